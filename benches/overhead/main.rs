//! What `BearerLayer` costs per request, next to what people use today.
//!
//! ```text
//! cargo bench --bench overhead
//! ```
//!
//! One run starts this binary `OVERHEAD_PROCESSES` times (default 5), one process after
//! another, and reports each process's ratios, their median and their range (see
//! `processes.rs`): one process's figure is not the crate's. Each process measures, with a
//! hand-written harness so that every variant is measured in the same rounds (interleaved,
//! in rotating order, so machine noise hits all of them alike):
//!
//! 1. The per-request cost of putting the header on a request, on a no-op inner service
//!    that hands the request back (the variants are described in `benches/common/mod.rs`):
//!    `BearerLayer`; tower-http's static `AddAuthorizationLayer::bearer` (the floor); a
//!    kube-style `RwLock` + `AsyncFilter` with a prebuilt header; kube 5's path as shipped.
//!    On 1 thread, and on 2 threads each with its own clone of the service sharing one
//!    token. A "no layer" row times the harness alone. The requests (each with one
//!    `accept` header already, as a client's requests have by the time they reach an auth
//!    layer) are built outside the timed part, in batches; the timed part is `poll_ready`,
//!    `call` and polling the (immediately ready) future with a no-op waker.
//! 2. The cached-token check two ways (`benches/common/check.rs`): the generation atomic
//!    `BearerService` uses, and `arc_swap::Cache`, beside the real `BearerLayer`.
//! 3. The same while writer threads rotate each variant's token 100 times a second
//!    (`TokenStore::reload` from a loader that returns a new token each time; a write lock
//!    and a replaced value for kube-style; nothing for the static floor).
//! 4. End-to-end requests per second over loopback (`e2e.rs`), with and without the
//!    layer, and with the static layer.
//!
//! The last line is
//! `overhead ratio_vs_static=<r> ratio_vs_kube_style=<k> e2e_ratio=<e> ...`, with r and k
//! from the 1-thread figures without rotation (k against kube 5's path as shipped) and e the
//! requests/s with the layer over without; then the ratio against the generous prebuilt
//! `RwLock` variant, the end-to-end ratio against the static layer (the same header bytes
//! on the wire), and `arc_swap::Cache`'s check over ours; each the median over processes,
//! then `processes=N` and each one's range over processes (`ratio_vs_static_range=a..b`).
//!
//! **Why paired ratios.** Each ratio is the median over rounds of the ratio of the two
//! figures taken in the same round, not the ratio of two medians. This machine is shared:
//! another developer's build takes a core for seconds and gives it back, and the CPU's
//! clock moves with it, so one round's figures can all be 20% slower than the next
//! round's. A round measures every variant within a few milliseconds of each other, so a
//! slow round is slow for all of them and their ratio keeps still; the medians of separate
//! series each pick up the drift of whichever rounds they happened to land on, and their
//! ratio carries both drifts. The per-variant medians are printed too (ns per request,
//! with p25..p75), for scale.
//!
//! Knobs (environment): `OVERHEAD_PROCESSES` (default 5; 1 runs in this process alone),
//! `OVERHEAD_ROUNDS` (micro rounds, default 31), `OVERHEAD_E2E_N` (requests per
//! end-to-end run, default 10000), `OVERHEAD_E2E_ROUNDS` (default 25),
//! `OVERHEAD_E2E_CONCURRENCY` (default 8), `OVERHEAD_EMPTY_REQUESTS=1` (requests without
//! any header; see `common::Headers`).

#[path = "../common/check.rs"]
mod check;
#[path = "../common/mod.rs"]
mod common;
mod e2e;
mod processes;
mod rounds;
#[path = "../common/store.rs"]
mod store;

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Instant;

use bearer_reload::BearerLayer;
use tokio::sync::RwLock;
use tower::Layer;
use tower::filter::AsyncFilterLayer;
use tower_http::auth::AddAuthorizationLayer;

use check::MirrorStore;
use common::{Echo, Headers, Kube5Token, KubeStyle, TOKEN_LEN, header_of, sensitive_bearer, token};
use rounds::{Case, PER_ROUND, Rotation, Samples, Services, Variant, paired_ratio};

pub(crate) fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

fn main() {
    let processes = env_or("OVERHEAD_PROCESSES", 5).max(1);
    if processes > 1 {
        processes::run(processes);
    } else {
        one_process();
    }
}

/// The headers each service puts on a request now: bearer, static, kube-style, kube 5,
/// generation check, cache check.
fn headers(s: &mut Services) -> [http::HeaderValue; 6] {
    [
        header_of(&mut s.bearer),
        header_of(&mut s.stat),
        header_of(&mut s.kube),
        header_of(&mut s.kube5),
        header_of(&mut s.generation),
        header_of(&mut s.cache),
    ]
}

fn one_process() {
    let rounds = env_or("OVERHEAD_ROUNDS", 31).max(1);
    let headers_of_requests = if env_or("OVERHEAD_EMPTY_REQUESTS", 0) != 0 {
        Headers::Empty
    } else {
        Headers::One
    };
    let started = Instant::now();

    // The bearer store: a loader whose token changes each time `next` does.
    let next = Arc::new(AtomicU64::new(0));
    let store = store::bearer_store(next.clone());
    let first = token(0);
    let kube_lock = Arc::new(RwLock::new(sensitive_bearer(&first)));
    let mirror = MirrorStore::new(&first);
    let mut services = Services {
        headers: headers_of_requests,
        none: Echo,
        bearer: BearerLayer::new(store.clone()).layer(Echo),
        stat: AddAuthorizationLayer::bearer(&first)
            .as_sensitive(true)
            .layer(Echo),
        kube: AsyncFilterLayer::new(KubeStyle(kube_lock.clone())).layer(Echo),
        kube5: AsyncFilterLayer::new(Kube5Token::new(first.clone())).layer(Echo),
        generation: mirror.generation_check(Echo),
        cache: mirror.cache_check(Echo),
    };
    let expected = sensitive_bearer(&first);
    for got in headers(&mut services) {
        assert_eq!(got, expected);
        assert!(got.is_sensitive());
    }

    use Variant::{Bearer, CacheCheck, GenerationCheck, Kube, Kube5, NoLayer, Static};
    const CHECKS: &[Variant] = &[NoLayer, Bearer, GenerationCheck, CacheCheck];
    const HEADERS: &[Variant] = &[NoLayer, Bearer, Static, Kube];
    let mut cases = [
        Case::new(
            "1 thread",
            1,
            &[NoLayer, Bearer, Static, Kube, Kube5],
            Static,
        ),
        Case::new("2 threads (per thread)", 2, HEADERS, Static),
        Case::new("check, 1 thread", 1, CHECKS, GenerationCheck),
        Case::new("check, 2 threads", 2, CHECKS, GenerationCheck),
        Case::new("1 thread, rotating 100/s", 1, HEADERS, Static),
        Case::new("2 threads, rotating 100/s", 2, HEADERS, Static),
        Case::new("check, 1 thread, rotating", 1, CHECKS, GenerationCheck),
    ];
    let (steady, rotating) = cases.split_at_mut(4);
    for case in steady {
        case.run(&mut services, rounds);
    }
    let generation = store.generation();
    let rotation = Rotation::start(&store, &next, &kube_lock, &mirror);
    for case in rotating {
        case.run(&mut services, rounds);
    }
    let rotation_rate = rotation.stop();
    assert!(store.generation() > generation, "the store rotated");
    let [bearer_now, _, kube_now, _, generation_now, cache_now] = headers(&mut services);
    assert_eq!(&bearer_now, store.current().header_value());
    assert_ne!(bearer_now, expected);
    assert_ne!(kube_now, expected);
    assert_eq!(
        generation_now, kube_now,
        "the generation check follows rotations"
    );
    assert_eq!(cache_now, kube_now, "the cache check follows rotations");

    let e2e = e2e::run(&store, &first);

    println!();
    println!(
        "overhead: ns per request, median of {rounds} interleaved rounds of {PER_ROUND} \
         requests [p25..p75]; token {TOKEN_LEN} bytes; requests {}",
        match headers_of_requests {
            Headers::One => "with one header",
            Headers::Empty => "without headers",
        }
    );
    println!(
        "{:<26} {:<40} {:>20} {:>8} {:>8}",
        "case", "variant", "ns/req [p25..p75]", "+ns", "x base"
    );
    for case in &cases {
        let none = case.variants.contains(&NoLayer).then(|| case.of(NoLayer));
        let base = case.of(case.base);
        for (&v, s) in case.variants.iter().zip(&case.results) {
            let added = none.map_or(0.0, |n| s.median() - n.median());
            println!(
                "{:<26} {:<40} {:>6.1} [{:>5.1}..{:>5.1}] {:>8.1} {:>8.3}",
                case.name,
                v.label(),
                s.median(),
                s.quantile(0.25),
                s.quantile(0.75),
                added,
                paired_ratio(s, base)
            );
        }
    }
    println!(
        "(+ns: median minus the no-layer median; x base: median over rounds of the ratio \
         to the same round's static layer, or for the check cases to the generation check)"
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

    let [one, _, check, _, _, _, check_rotating] = &cases;
    println!(
        "overhead ratio_vs_static={:.3} ratio_vs_kube_style={:.3} e2e_ratio={:.3} \
         ratio_vs_rwlock_prebuilt={:.3} e2e_ratio_vs_static={:.3} cache_vs_generation={:.3} \
         cache_vs_generation_rotating={:.3}",
        paired_ratio(one.of(Bearer), one.of(Static)),
        paired_ratio(one.of(Bearer), one.of(Kube5)),
        paired_ratio(&e2e.bearer, &e2e.plain),
        paired_ratio(one.of(Bearer), one.of(Kube)),
        paired_ratio(&e2e.bearer, &e2e.stat),
        paired_ratio(check.of(CacheCheck), check.of(GenerationCheck)),
        paired_ratio(
            check_rotating.of(CacheCheck),
            check_rotating.of(GenerationCheck)
        ),
    );
}
