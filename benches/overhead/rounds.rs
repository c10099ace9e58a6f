//! The per-request rounds: every variant of a case measured once per round, in an order
//! that rotates round by round, and the writers that rotate the tokens meanwhile.

use std::fmt;
use std::hint::black_box;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::task::{Context, Waker};
use std::thread;
use std::time::{Duration, Instant};

use bearer_reload::{BearerService, TokenStore};
use http::HeaderValue;
use tokio::sync::RwLock;
use tower::Service;
use tower::filter::AsyncFilter;
use tower_http::auth::AddAuthorization;

use crate::check::{CacheCheck, GenerationCheck, MirrorStore};
use crate::common::{Echo, Headers, Kube5Token, KubeStyle, Req, Res, drive, new_request, token};

/// Requests built ahead of each timed batch.
const BATCH: usize = 256;
/// Batches per variant per round (about 50k requests).
pub(crate) const BATCHES: usize = 200;
/// Requests per variant per round.
pub(crate) const PER_ROUND: usize = BATCH * BATCHES;
/// Rotations per second in the rotation cases.
const ROTATIONS_PER_SEC: u64 = 100;

/// Sends `batches * BATCH` fresh requests through `svc`; returns the time spent in the
/// calls alone (building and dropping the requests is outside the timed part). Never
/// inlined: each variant's loop is compiled on its own, whatever the caller looks like.
#[inline(never)]
fn time_requests<S>(svc: &mut S, batches: usize, headers: Headers) -> Duration
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let mut input = Vec::with_capacity(BATCH);
    let mut output = Vec::with_capacity(BATCH);
    let mut total = Duration::ZERO;
    for _ in 0..batches {
        input.extend((0..BATCH).map(|_| new_request(headers)));
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
fn one_thread<S>(svc: &mut S, batches: usize, headers: Headers) -> f64
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    let spent = time_requests(svc, batches, headers);
    spent.as_nanos() as f64 / (batches * BATCH) as f64
}

/// ns per request per thread, two threads each with its own clone of `svc`.
fn two_threads<S>(svc: &S, batches: usize, headers: Headers) -> f64
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
                    time_requests(&mut svc, batches, headers)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let total: Duration = spent.iter().sum();
    total.as_nanos() as f64 / (2 * batches * BATCH) as f64
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Variant {
    NoLayer,
    Bearer,
    Static,
    Kube,
    Kube5,
    GenerationCheck,
    CacheCheck,
}

impl Variant {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Variant::NoLayer => "no layer (the harness alone)",
            Variant::Bearer => "bearer-reload BearerLayer",
            Variant::Static => "tower-http AddAuthorization (static)",
            Variant::Kube => "kube-style RwLock + AsyncFilter",
            Variant::Kube5 => "kube 5 as shipped (formats per request)",
            Variant::GenerationCheck => "check: generation atomic (ours)",
            Variant::CacheCheck => "check: arc_swap::Cache",
        }
    }
}

/// One service per variant.
pub(crate) struct Services {
    pub(crate) headers: Headers,
    pub(crate) none: Echo,
    pub(crate) bearer: BearerService<Echo>,
    pub(crate) stat: AddAuthorization<Echo>,
    pub(crate) kube: AsyncFilter<Echo, KubeStyle>,
    pub(crate) kube5: AsyncFilter<Echo, Kube5Token>,
    pub(crate) generation: GenerationCheck<Echo>,
    pub(crate) cache: CacheCheck<Echo>,
}

impl Services {
    fn measure(&mut self, variant: Variant, threads: usize, batches: usize) -> f64 {
        let h = self.headers;
        match (variant, threads) {
            (Variant::NoLayer, 1) => one_thread(&mut self.none, batches, h),
            (Variant::Bearer, 1) => one_thread(&mut self.bearer, batches, h),
            (Variant::Static, 1) => one_thread(&mut self.stat, batches, h),
            (Variant::Kube, 1) => one_thread(&mut self.kube, batches, h),
            (Variant::Kube5, 1) => one_thread(&mut self.kube5, batches, h),
            (Variant::GenerationCheck, 1) => one_thread(&mut self.generation, batches, h),
            (Variant::CacheCheck, 1) => one_thread(&mut self.cache, batches, h),
            (Variant::NoLayer, _) => two_threads(&self.none, batches, h),
            (Variant::Bearer, _) => two_threads(&self.bearer, batches, h),
            (Variant::Static, _) => two_threads(&self.stat, batches, h),
            (Variant::Kube, _) => two_threads(&self.kube, batches, h),
            (Variant::Kube5, _) => two_threads(&self.kube5, batches, h),
            (Variant::GenerationCheck, _) => two_threads(&self.generation, batches, h),
            (Variant::CacheCheck, _) => two_threads(&self.cache, batches, h),
        }
    }
}

/// Per-round figures of one variant in one case.
#[derive(Default)]
pub(crate) struct Samples(pub(crate) Vec<f64>);

impl Samples {
    fn sorted(&self) -> Vec<f64> {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        v
    }

    pub(crate) fn quantile(&self, q: f64) -> f64 {
        let v = self.sorted();
        let pos = q * (v.len() - 1) as f64;
        let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (pos - lo as f64)
    }

    pub(crate) fn median(&self) -> f64 {
        self.quantile(0.5)
    }
}

/// Median over rounds of `a[i] / b[i]`: each round's figures were taken side by side, so
/// their ratio is free of the drift between rounds.
pub(crate) fn paired_ratio(a: &Samples, b: &Samples) -> f64 {
    Samples(a.0.iter().zip(&b.0).map(|(a, b)| a / b).collect()).median()
}

/// Variants measured side by side; each one's ratio is to `base`'s figure of the same round.
pub(crate) struct Case {
    pub(crate) name: &'static str,
    pub(crate) threads: usize,
    pub(crate) variants: &'static [Variant],
    pub(crate) base: Variant,
    pub(crate) results: Vec<Samples>,
}

impl Case {
    pub(crate) fn new(
        name: &'static str,
        threads: usize,
        variants: &'static [Variant],
        base: Variant,
    ) -> Self {
        Case {
            name,
            threads,
            variants,
            base,
            results: Vec::new(),
        }
    }

    /// The figures of `variant`.
    pub(crate) fn of(&self, variant: Variant) -> &Samples {
        let i = self.variants.iter().position(|&v| v == variant);
        &self.results[i.expect("the variant is in the case")]
    }

    /// Runs every variant once per round, in an order that rotates round by round.
    pub(crate) fn run(&mut self, services: &mut Services, rounds: usize) {
        let n = self.variants.len();
        self.results = (0..n).map(|_| Samples::default()).collect();
        // Warm-up: caches, branch predictors, the allocator's free lists, CPU frequency.
        for &v in self.variants {
            services.measure(v, self.threads, BATCHES / 4);
        }
        for round in 0..rounds {
            for k in 0..n {
                let i = (round + k) % n;
                let ns = services.measure(self.variants[i], self.threads, BATCHES);
                self.results[i].0.push(ns);
            }
        }
    }
}

/// Writer threads rotating the bearer store, the kube-style lock and the check mirror
/// `ROTATIONS_PER_SEC` times a second until [`Rotation::stop`].
pub(crate) struct Rotation {
    stop: Arc<AtomicBool>,
    started: Instant,
    writers: Vec<thread::JoinHandle<u64>>,
}

impl Rotation {
    pub(crate) fn start(
        store: &TokenStore,
        next: &Arc<AtomicU64>,
        kube: &Arc<RwLock<HeaderValue>>,
        mirror: &MirrorStore,
    ) -> Self {
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
                        let before = store.generation();
                        store.reload().await.expect("reload");
                        assert!(store.generation() > before, "each reload rotates");
                        rotations += 1;
                    }
                    rotations
                })
            })
        };
        let others = {
            let (stop, kube, mirror) = (stop.clone(), kube.clone(), mirror.clone());
            thread::spawn(move || {
                let mut rotations = 0;
                let mut deadline = Instant::now();
                while !stop.load(Ordering::Relaxed) {
                    deadline += period;
                    thread::sleep(deadline.saturating_duration_since(Instant::now()));
                    let new = token(1_000_000 + rotations);
                    *kube.blocking_write() = crate::common::sensitive_bearer(&new);
                    mirror.rotate(&new);
                    rotations += 1;
                }
                rotations
            })
        };
        Rotation {
            stop,
            started: Instant::now(),
            writers: vec![bearer, others],
        }
    }

    /// Stops the writers; returns rotations per second of the slowest one.
    pub(crate) fn stop(self) -> f64 {
        self.stop.store(true, Ordering::Relaxed);
        let secs = self.started.elapsed().as_secs_f64();
        let done = self.writers.into_iter().map(|w| w.join().unwrap());
        done.min().unwrap_or(0) as f64 / secs
    }
}
