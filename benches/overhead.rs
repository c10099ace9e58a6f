//! What `BearerLayer` costs per request, next to what people use today.
//!
//! ```text
//! cargo bench --bench overhead
//! ```
//!
//! In one run, with a hand-written harness so that every variant is measured in the same
//! rounds (interleaved, in rotating order, so machine noise hits all of them alike) and each
//! figure is the median of those rounds:
//!
//! 1. The per-request cost of putting the header on a request, on a no-op inner service
//!    that hands the request back: `BearerLayer`; tower-http's static
//!    `AddAuthorizationLayer::bearer` (the floor: it clones a prebuilt `HeaderValue`); and a
//!    kube-style path, the token behind a tokio `RwLock` read through
//!    `tower::filter::AsyncFilterLayer` with a boxed predicate future, as kube-rs 5 does
//!    (here made generous to kube: the lock holds a prebuilt `HeaderValue`, where kube 5
//!    formats and validates a new one per request; that path is measured too, as
//!    "kube 5 as shipped"). On 1 thread, and on 2 threads each with its own clone of the
//!    service sharing one token. A "no layer" row times the harness alone. The requests
//!    (each with one `accept` header already, as a client's requests have by the time they
//!    reach an auth layer) are built outside the timed part, in batches; the timed part is
//!    `poll_ready`, `call` and polling the (immediately ready) future with a no-op waker.
//! 2. The same while writer threads rotate each variant's token 100 times a second
//!    (`TokenStore::reload` from a loader that returns a new token each time; a write lock
//!    and a replaced value for kube-style; nothing for the static floor).
//! 3. End-to-end requests per second over loopback: a hyper-util legacy client (HTTP/1,
//!    keep-alive) with and without the layer, against a local hyper server that answers 200
//!    with an empty body; the same client and server for all, runs interleaved.
//!
//! The last line is
//! `overhead ratio_vs_static=<r> ratio_vs_kube_style=<k> e2e_ratio=<e> ...`, with r and k
//! from the 1-thread figures without rotation (k against kube 5's path as shipped) and e the
//! requests/s with the layer over without; then the ratio against the generous prebuilt
//! `RwLock` variant, and the end-to-end ratio against the static layer (the same header
//! bytes on the wire).
//! Each ratio is the median over rounds of the ratio of the two figures taken in the same
//! round, which cancels the drift of a shared, busy machine between rounds.
//!
//! Knobs (environment): `OVERHEAD_ROUNDS` (micro rounds, default 31), `OVERHEAD_E2E_N`
//! (requests per end-to-end run, default 10000), `OVERHEAD_E2E_ROUNDS` (default 25),
//! `OVERHEAD_E2E_CONCURRENCY` (default 8), `OVERHEAD_EMPTY_REQUESTS=1` (requests without
//! any header; see `new_request`).

use std::convert::Infallible;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::hint::black_box;
use std::pin::{Pin, pin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Poll, Waker};
use std::thread;
use std::time::{Duration, Instant, SystemTime};

use bearer_reload::{BearerLayer, BearerService, TokenLoader, TokenStore};
use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderValue, Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::sync::RwLock;
use tower::filter::{AsyncFilter, AsyncFilterLayer, AsyncPredicate};
use tower::{BoxError, Layer, Service, ServiceExt};
use tower_http::auth::{AddAuthorization, AddAuthorizationLayer};

type Req = Request<()>;

/// Requests built ahead of each timed batch.
const BATCH: usize = 256;
/// Batches per variant per round (about 50k requests).
const BATCHES: usize = 200;
/// Length of the token: about that of a projected service-account JWT.
const TOKEN_LEN: usize = 900;
/// Rotations per second in the rotation cases.
const ROTATIONS_PER_SEC: u64 = 100;

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// An opaque token of `TOKEN_LEN` visible ASCII characters, different for every `n`.
fn token(n: u64) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut state = n.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..TOKEN_LEN)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            ALPHABET[(state % 64) as usize] as char
        })
        .collect()
}

/// A request as it reaches an auth layer: by default with one header already set (so its
/// header map is allocated when the request is built, outside the timed part); with
/// `OVERHEAD_EMPTY_REQUESTS=1`, with none, and the timed part then includes allocating the
/// map's storage for the first header, the same for every variant.
fn new_request(empty: bool) -> Req {
    let mut req = Request::new(());
    if !empty {
        req.headers_mut()
            .insert(ACCEPT, HeaderValue::from_static("application/json"));
    }
    req
}

fn sensitive_bearer(token: &str) -> HeaderValue {
    let mut value = HeaderValue::try_from(format!("Bearer {token}")).expect("valid token");
    value.set_sensitive(true);
    value
}

type Res = Response<()>;

/// The no-op inner service: answers at once, handing the request's headers back in the
/// response (so that they are dropped outside the timed part, and can be checked).
#[derive(Clone, Copy, Debug)]
struct Echo;

impl Service<Req> for Echo {
    type Response = Res;
    type Error = Infallible;
    type Future = Ready<Result<Res, Infallible>>;

    #[inline]
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    #[inline]
    fn call(&mut self, req: Req) -> Self::Future {
        let mut res = Response::new(());
        *res.headers_mut() = req.into_parts().0.headers;
        ready(Ok(res))
    }
}

/// kube-style: the token behind a tokio `RwLock`, read by an async predicate whose future
/// is boxed, as kube-rs 5's `RefreshableToken` is; the lock holds a prebuilt value.
#[derive(Clone, Debug)]
struct KubeStyle(Arc<RwLock<HeaderValue>>);

impl AsyncPredicate<Req> for KubeStyle {
    type Future = Pin<Box<dyn Future<Output = Result<Req, BoxError>> + Send>>;
    type Request = Req;

    fn check(&mut self, mut req: Req) -> Self::Future {
        let lock = self.clone();
        Box::pin(async move {
            let value = lock.0.read().await.clone();
            req.headers_mut().insert(AUTHORIZATION, value);
            Ok(req)
        })
    }
}

/// kube-rs 5's token-file path as shipped: under the read lock, compare the clock with the
/// reload deadline, then format and validate a new header value for every request.
#[derive(Debug)]
struct Kube5File {
    token: String,
    expires_at: SystemTime,
}

#[derive(Clone, Debug)]
struct Kube5Token(Arc<RwLock<Kube5File>>);

impl AsyncPredicate<Req> for Kube5Token {
    type Future = Pin<Box<dyn Future<Output = Result<Req, BoxError>> + Send>>;
    type Request = Req;

    fn check(&mut self, mut req: Req) -> Self::Future {
        let lock = self.clone();
        Box::pin(async move {
            let file = lock.0.read().await;
            if SystemTime::now() + Duration::from_secs(10) > file.expires_at {
                return Err("the benchmark never lets the kube 5 token expire".into());
            }
            let value = sensitive_bearer(&file.token);
            drop(file);
            req.headers_mut().insert(AUTHORIZATION, value);
            Ok(req)
        })
    }
}

/// Readies `svc`, calls it and polls the future to completion with a no-op waker.
#[inline(always)]
fn drive<S>(svc: &mut S, req: Req, cx: &mut Context<'_>) -> Res
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    loop {
        match svc.poll_ready(cx) {
            Poll::Ready(r) => break r.expect("ready"),
            Poll::Pending => std::hint::spin_loop(),
        }
    }
    let mut fut = pin!(svc.call(req));
    loop {
        match fut.as_mut().poll(cx) {
            Poll::Ready(r) => return r.expect("response"),
            // Only the kube-style lock can be pending, while a writer holds it.
            Poll::Pending => std::hint::spin_loop(),
        }
    }
}

/// Sends `batches * BATCH` fresh requests through `svc`; returns the time spent in the
/// calls alone (building and dropping the requests is outside the timed part). Never
/// inlined: each variant's loop is compiled on its own, whatever the caller looks like.
#[inline(never)]
fn time_requests<S>(svc: &mut S, batches: usize, empty: bool) -> Duration
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut input = Vec::with_capacity(BATCH);
    let mut output = Vec::with_capacity(BATCH);
    let mut total = Duration::ZERO;
    for _ in 0..batches {
        input.extend((0..BATCH).map(|_| new_request(empty)));
        let start = Instant::now();
        for req in input.drain(..) {
            output.push(black_box(drive(svc, req, &mut cx)));
        }
        total += start.elapsed();
        output.clear();
    }
    total
}

/// ns per request on the calling thread.
fn one_thread<S>(svc: &mut S, batches: usize, empty: bool) -> f64
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    let spent = time_requests(svc, batches, empty);
    spent.as_nanos() as f64 / (batches * BATCH) as f64
}

/// ns per request per thread, two threads each with its own clone of `svc`.
fn two_threads<S>(svc: &S, batches: usize, empty: bool) -> f64
where
    S: Service<Req, Response = Res> + Clone + Send,
    S::Error: fmt::Debug,
{
    let barrier = Barrier::new(2);
    let spent: Vec<Duration> = thread::scope(|s| {
        let handles: Vec<_> = (0..2)
            .map(|_| {
                let mut svc = svc.clone();
                let barrier = &barrier;
                s.spawn(move || {
                    barrier.wait();
                    time_requests(&mut svc, batches, empty)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: Duration = spent.iter().sum();
    total.as_nanos() as f64 / (2 * batches * BATCH) as f64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Variant {
    NoLayer,
    Bearer,
    Static,
    Kube,
    Kube5,
}

impl Variant {
    fn label(self) -> &'static str {
        match self {
            Variant::NoLayer => "no layer (the harness alone)",
            Variant::Bearer => "bearer-reload BearerLayer",
            Variant::Static => "tower-http AddAuthorization (static)",
            Variant::Kube => "kube-style RwLock + AsyncFilter",
            Variant::Kube5 => "kube 5 as shipped (formats per request)",
        }
    }
}

struct Services {
    empty: bool,
    none: Echo,
    bearer: BearerService<Echo>,
    stat: AddAuthorization<Echo>,
    kube: AsyncFilter<Echo, KubeStyle>,
    kube5: AsyncFilter<Echo, Kube5Token>,
}

impl Services {
    fn measure(&mut self, variant: Variant, threads: usize, batches: usize) -> f64 {
        let e = self.empty;
        match (variant, threads) {
            (Variant::NoLayer, 1) => one_thread(&mut self.none, batches, e),
            (Variant::Bearer, 1) => one_thread(&mut self.bearer, batches, e),
            (Variant::Static, 1) => one_thread(&mut self.stat, batches, e),
            (Variant::Kube, 1) => one_thread(&mut self.kube, batches, e),
            (Variant::Kube5, 1) => one_thread(&mut self.kube5, batches, e),
            (Variant::NoLayer, _) => two_threads(&self.none, batches, e),
            (Variant::Bearer, _) => two_threads(&self.bearer, batches, e),
            (Variant::Static, _) => two_threads(&self.stat, batches, e),
            (Variant::Kube, _) => two_threads(&self.kube, batches, e),
            (Variant::Kube5, _) => two_threads(&self.kube5, batches, e),
        }
    }

    /// The header each variant puts on a request now.
    fn headers(&mut self) -> [HeaderValue; 4] {
        let mut cx = Context::from_waker(Waker::noop());
        let get = |r: Res| r.headers()[AUTHORIZATION].clone();
        [
            get(drive(&mut self.bearer, Request::new(()), &mut cx)),
            get(drive(&mut self.stat, Request::new(()), &mut cx)),
            get(drive(&mut self.kube, Request::new(()), &mut cx)),
            get(drive(&mut self.kube5, Request::new(()), &mut cx)),
        ]
    }
}

/// Per-round figures of one variant in one case.
#[derive(Default)]
struct Samples(Vec<f64>);

impl Samples {
    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    fn quantile(&self, q: f64) -> f64 {
        let v = self.sorted();
        let pos = q * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    }

    fn median(&self) -> f64 {
        self.quantile(0.5)
    }
}

/// Median over rounds of `a[i] / b[i]`: each round's figures were taken side by side, so
/// their ratio is free of the drift between rounds.
fn paired_ratio(a: &Samples, b: &Samples) -> f64 {
    Samples(a.0.iter().zip(&b.0).map(|(a, b)| a / b).collect()).median()
}

struct Case {
    name: &'static str,
    threads: usize,
    variants: &'static [Variant],
    results: Vec<Samples>,
}

/// Runs every variant of `case` once per round, in an order that rotates round by round.
fn run_case(services: &mut Services, case: &mut Case, rounds: usize) {
    let n = case.variants.len();
    case.results = (0..n).map(|_| Samples::default()).collect();
    // Warm-up: caches, branch predictors, the allocator's free lists, CPU frequency.
    for &v in case.variants {
        services.measure(v, case.threads, BATCHES / 4);
    }
    for round in 0..rounds {
        for k in 0..n {
            let i = (round + k) % n;
            let ns = services.measure(case.variants[i], case.threads, BATCHES);
            case.results[i].0.push(ns);
        }
    }
}

/// Writer threads rotating the bearer store and the kube-style lock `ROTATIONS_PER_SEC`
/// times a second until [`Rotation::stop`].
struct Rotation {
    stop: Arc<AtomicBool>,
    started: Instant,
    writers: Vec<thread::JoinHandle<u64>>,
}

impl Rotation {
    fn start(store: &TokenStore, next: &Arc<AtomicU64>, kube: &Arc<RwLock<HeaderValue>>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let period = Duration::from_nanos(1_000_000_000 / ROTATIONS_PER_SEC);
        let bearer = {
            let (stop, store, next) = (stop.clone(), store.clone(), next.clone());
            thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_time()
                    .build()
                    .unwrap();
                rt.block_on(async move {
                    let mut tick = tokio::time::interval(period);
                    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                    let mut rotations = 0;
                    while !stop.load(Ordering::Relaxed) {
                        tick.tick().await;
                        next.fetch_add(1, Ordering::Relaxed);
                        let reloaded = store.reload().await.expect("reload");
                        assert!(matches!(reloaded, bearer_reload::Reloaded::Rotated { .. }));
                        rotations += 1;
                    }
                    rotations
                })
            })
        };
        let kube = {
            let (stop, kube) = (stop.clone(), kube.clone());
            thread::spawn(move || {
                let mut rotations = 0;
                let mut deadline = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    deadline += period;
                    thread::sleep(deadline.saturating_duration_since(Instant::now()));
                    let value = sensitive_bearer(&token(1_000_000 + rotations));
                    *kube.blocking_write() = value;
                    rotations += 1;
                }
                rotations
            })
        };
        Rotation {
            stop,
            started: Instant::now(),
            writers: vec![bearer, kube],
        }
    }

    /// Stops the writers; returns rotations per second of the slowest one.
    fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        let done = self.writers.into_iter().map(|w| w.join().unwrap());
        done.min().unwrap_or(0) as f64 / secs
    }
}

/// End-to-end requests/s medians: (without the layer, with it, with static AddAuthorization).
struct E2e {
    plain: Samples,
    bearer: Samples,
    stat: Samples,
}

async fn e2e_run<S>(svc: &S, uri: &Uri, n: usize, concurrency: usize) -> f64
where
    S: Service<Request<Empty<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: fmt::Debug + Send,
{
    let per_task = n / concurrency;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (mut svc, uri) = (svc.clone(), uri.clone());
        tasks.spawn(async move {
            for _ in 0..per_task {
                let req = Request::get(uri.clone()).body(Empty::new()).unwrap();
                let res = svc.ready().await.unwrap().call(req).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK);
                res.into_body().collect().await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    (per_task * concurrency) as f64 / start.elapsed().as_secs_f64()
}

fn e2e(store: &TokenStore, token: &str) -> E2e {
    let n = env_or("OVERHEAD_E2E_N", 10_000);
    let rounds = env_or("OVERHEAD_E2E_ROUNDS", 25);
    let concurrency = env_or("OVERHEAD_E2E_CONCURRENCY", 8).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let authorized = Arc::new(AtomicU64::new(0));
        let server = tokio::spawn({
            let authorized = authorized.clone();
            async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    tcp.set_nodelay(true).unwrap();
                    let authorized = authorized.clone();
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                            if req.headers().contains_key(AUTHORIZATION) {
                                authorized.fetch_add(1, Ordering::Relaxed);
                            }
                            ready(Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())))
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tcp), svc)
                            .await;
                    });
                }
            }
        });

        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let plain: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
        let bearer = BearerLayer::new(store.clone()).layer(plain.clone());
        let stat = AddAuthorizationLayer::bearer(token)
            .as_sensitive(true)
            .layer(plain.clone());
        let uri: Uri = format!("http://{addr}/").parse().unwrap();

        // Warm-up: opens the pooled connections all runs share.
        let warm = (n / 10).max(concurrency);
        e2e_run(&plain, &uri, warm, concurrency).await;
        e2e_run(&bearer, &uri, warm, concurrency).await;
        e2e_run(&stat, &uri, warm, concurrency).await;

        let mut out = E2e {
            plain: Samples::default(),
            bearer: Samples::default(),
            stat: Samples::default(),
        };
        for round in 0..rounds {
            for k in 0..3 {
                match (round + k) % 3 {
                    0 => out
                        .plain
                        .0
                        .push(e2e_run(&plain, &uri, n, concurrency).await),
                    1 => {
                        let before = authorized.load(Ordering::Relaxed);
                        out.bearer
                            .0
                            .push(e2e_run(&bearer, &uri, n, concurrency).await);
                        let sent = authorized.load(Ordering::Relaxed) - before;
                        assert_eq!(sent as usize, n / concurrency * concurrency);
                    }
                    _ => out.stat.0.push(e2e_run(&stat, &uri, n, concurrency).await),
                }
            }
        }
        server.abort();
        out
    })
}

fn main() {
    let rounds = env_or("OVERHEAD_ROUNDS", 31).max(1);
    let empty = env_or("OVERHEAD_EMPTY_REQUESTS", 0) != 0;
    let started = Instant::now();

    // The bearer store: a loader whose token changes each time `next` does.
    let next = Arc::new(AtomicU64::new(0));
    let store = {
        let next = next.clone();
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        rt.block_on(
            TokenLoader::new("bench", move || {
                let bytes = token(next.load(Ordering::Relaxed)).into_bytes();
                async move { Ok::<_, std::io::Error>(bytes) }
            })
            .refresh_interval(None)
            .load(),
        )
        .expect("first token")
    };
    let first = token(0);
    let kube_lock = Arc::new(RwLock::new(sensitive_bearer(&first)));
    let mut services = Services {
        empty,
        none: Echo,
        bearer: BearerLayer::new(store.clone()).layer(Echo),
        stat: AddAuthorizationLayer::bearer(&first)
            .as_sensitive(true)
            .layer(Echo),
        kube: AsyncFilterLayer::new(KubeStyle(kube_lock.clone())).layer(Echo),
        kube5: AsyncFilterLayer::new(Kube5Token(Arc::new(RwLock::new(Kube5File {
            token: first.clone(),
            expires_at: SystemTime::now() + Duration::from_secs(24 * 3600),
        }))))
        .layer(Echo),
    };
    let expected = sensitive_bearer(&first);
    for got in services.headers() {
        assert_eq!(got, expected);
        assert!(got.is_sensitive());
    }

    use Variant::{Bearer, Kube, Kube5, NoLayer, Static};
    let case = |name, threads, variants| Case {
        name,
        threads,
        variants,
        results: Vec::new(),
    };
    let mut cases = [
        case("1 thread", 1, &[NoLayer, Bearer, Static, Kube, Kube5]),
        case(
            "2 threads (per thread)",
            2,
            &[NoLayer, Bearer, Static, Kube],
        ),
        case(
            "1 thread, rotating 100/s",
            1,
            &[NoLayer, Bearer, Static, Kube],
        ),
        case(
            "2 threads, rotating 100/s",
            2,
            &[NoLayer, Bearer, Static, Kube],
        ),
    ];
    let (steady, rotating) = cases.split_at_mut(2);
    for case in steady {
        run_case(&mut services, case, rounds);
    }
    let generation = store.generation();
    let rotation = Rotation::start(&store, &next, &kube_lock);
    for case in rotating {
        run_case(&mut services, case, rounds);
    }
    let rotation_rate = rotation.stop();
    assert!(store.generation() > generation, "the store rotated");
    let [bearer_now, _, kube_now, _] = services.headers();
    assert_eq!(&bearer_now, store.current().header_value());
    assert_ne!(bearer_now, expected);
    assert_ne!(kube_now, expected);

    let e2e = e2e(&store, &first);

    println!();
    println!(
        "overhead: ns per request, median of {rounds} interleaved rounds of {} requests \
         [p25..p75]; token {TOKEN_LEN} bytes; requests {}",
        BATCH * BATCHES,
        if empty {
            "without headers"
        } else {
            "with one header"
        }
    );
    println!(
        "{:<26} {:<40} {:>20} {:>8} {:>8}",
        "case", "variant", "ns/req [p25..p75]", "+ns", "x static"
    );
    for case in &cases {
        let at = |v: Variant| case.variants.iter().position(|&x| x == v);
        let (none, floor) = (at(NoLayer), at(Static));
        for (&v, s) in case.variants.iter().zip(&case.results) {
            let added = none.map_or(0.0, |i| s.median() - case.results[i].median());
            let ratio = floor.map_or(f64::NAN, |i| paired_ratio(s, &case.results[i]));
            println!(
                "{:<26} {:<40} {:>6.1} [{:>5.1}..{:>5.1}] {:>8.1} {:>8.2}",
                case.name,
                v.label(),
                s.median(),
                s.quantile(0.25),
                s.quantile(0.75),
                added,
                ratio
            );
        }
    }
    println!(
        "(+ns: median minus the no-layer median; x static: median over rounds of the ratio \
         to the static layer in the same round)"
    );
    println!("rotation: {rotation_rate:.0} rotations/s per writer during the rotating cases");
    println!(
        "e2e: hyper-util legacy client, HTTP/1 keep-alive over loopback, {} requests x {} \
         rounds, concurrency {}, median [p25..p75]",
        env_or("OVERHEAD_E2E_N", 10_000),
        env_or("OVERHEAD_E2E_ROUNDS", 25),
        env_or("OVERHEAD_E2E_CONCURRENCY", 8)
    );
    let row = |name: &str, s: &Samples| {
        println!(
            "e2e {:<42} {:>7.0} req/s [{:.0}..{:.0}]  x without {:.3}",
            name,
            s.median(),
            s.quantile(0.25),
            s.quantile(0.75),
            paired_ratio(s, &e2e.plain)
        )
    };
    row("without a layer", &e2e.plain);
    row("with BearerLayer", &e2e.bearer);
    row("with tower-http AddAuthorization (static)", &e2e.stat);
    println!(
        "e2e with BearerLayer / with static AddAuthorization (the same header bytes): {:.3}",
        paired_ratio(&e2e.bearer, &e2e.stat)
    );
    println!("total time {:.0} s", started.elapsed().as_secs_f64());

    let one = &cases[0];
    let samples = |v: Variant| &one.results[one.variants.iter().position(|&x| x == v).unwrap()];
    println!(
        "overhead ratio_vs_static={:.2} ratio_vs_kube_style={:.2} e2e_ratio={:.3} \
         ratio_vs_rwlock_prebuilt={:.2} e2e_ratio_vs_static={:.3}",
        paired_ratio(samples(Bearer), samples(Static)),
        paired_ratio(samples(Bearer), samples(Kube5)),
        paired_ratio(&e2e.bearer, &e2e.plain),
        paired_ratio(samples(Bearer), samples(Kube)),
        paired_ratio(&e2e.bearer, &e2e.stat)
    );
}
