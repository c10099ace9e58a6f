//! The per-request rows again, measured with divan, the ecosystem's standard harness:
//! each variant on its own, with divan's distribution (fastest, slowest, median, mean) per
//! variant.
//!
//! ```text
//! cargo bench --bench per_request
//! ```
//!
//! The same variants as `benches/overhead` (`benches/common/mod.rs` builds both): a
//! 900-byte token, a no-op inner service that hands the request back, and a request that
//! has one header (`One`) or none (`Empty`). The request is built and the response dropped
//! outside the timed part (divan's `with_inputs` and deferred drop); the timed part is
//! `poll_ready`, `call` and polling the ready future with a no-op waker: 1000 samples of 64
//! iterations after 10,000 untimed ones (see [`SAMPLE_SIZE`]). The cached-token
//! checks of `benches/common/check.rs` (the generation atomic `BearerService` uses and
//! `arc_swap::Cache`) are here too.
//!
//! divan measures one variant after another, so a ratio of two of its medians carries the
//! machine's drift between them; `benches/overhead` measures them interleaved and reports
//! paired ratios. Both are kept: see the README's Performance section.

#[path = "common/check.rs"]
mod check;
mod common;
#[path = "common/store.rs"]
mod store;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::task::{Context, Waker};

use bearer_reload::BearerLayer;
use divan::Bencher;
use tokio::sync::RwLock;
use tower::filter::AsyncFilterLayer;
use tower::{Layer, Service};
use tower_http::auth::AddAuthorizationLayer;

use check::MirrorStore;
use common::{
    Echo, Headers, Kube5Token, KubeStyle, Req, Res, drive, header_of, new_request,
    sensitive_bearer, token,
};

const SHAPES: [Headers; 2] = [Headers::One, Headers::Empty];

/// Iterations per sample, fixed. Left to tune itself, divan starts from one iteration and
/// keeps the first sample size whose slowest sample exceeds 100 timer ticks: the process's
/// first benchmark (`bearer_layer`, by name) then often keeps one iteration per sample from
/// a cold first call, and reads ~25% slow from the timer's granularity alone. 64 is what
/// divan picks for the fast variants when nothing goes wrong (about 4 µs, 180 ticks of a
/// 22 ns timer); much larger samples hold so many live requests that a header map's first
/// allocation (the `Empty` rows) misses the allocator's warm memory and triples.
const SAMPLE_SIZE: u32 = 64;
/// Samples per benchmark (divan's default is 100).
const SAMPLE_COUNT: u32 = 1000;
/// Untimed requests through each service before its samples: caches, the allocator.
const WARM_UP: usize = 10_000;

fn main() {
    // Set before the command line's options, so that `--sample-size` still wins.
    divan::Divan::default()
        .sample_size(SAMPLE_SIZE)
        .sample_count(SAMPLE_COUNT)
        .config_with_args()
        .main();
}

/// What `bearer_layer` sets up before it measures (a store, built on a runtime that is then
/// dropped), for the variants that need no store: the allocator is left in the same state
/// for all, and the `Empty` rows' first header-map allocation costs the same. Without it,
/// callgrind counts about 40 instructions a request fewer for `tower_http_static`, all of
/// them in `malloc`: a difference of set-up, not of request path.
fn same_heap() -> bearer_reload::TokenStore {
    store::bearer_store(Arc::new(AtomicU64::new(0)))
}

/// Checks that `svc` puts the bench's token on a request, then times it on `headers`.
fn bench<S>(bencher: Bencher<'_, '_>, mut svc: S, headers: Headers)
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    let got = header_of(&mut svc);
    assert_eq!(got, sensitive_bearer(&token(0)));
    assert!(got.is_sensitive());
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..WARM_UP {
        drop(drive(&mut svc, new_request(headers), &mut cx));
    }
    bencher
        .with_inputs(|| new_request(headers))
        .bench_local_values(|req| drive(&mut svc, req, &mut cx));
}

#[divan::bench(args = SHAPES)]
fn bearer_layer(bencher: Bencher<'_, '_>, headers: Headers) {
    let store = store::bearer_store(Arc::new(AtomicU64::new(0)));
    bench(bencher, BearerLayer::new(store).layer(Echo), headers);
}

#[divan::bench(args = SHAPES)]
fn tower_http_static(bencher: Bencher<'_, '_>, headers: Headers) {
    let _heap = same_heap();
    let layer = AddAuthorizationLayer::bearer(&token(0)).as_sensitive(true);
    bench(bencher, layer.layer(Echo), headers);
}

#[divan::bench(args = SHAPES)]
fn kube_style_rwlock(bencher: Bencher<'_, '_>, headers: Headers) {
    let _heap = same_heap();
    let lock = Arc::new(RwLock::new(sensitive_bearer(&token(0))));
    bench(
        bencher,
        AsyncFilterLayer::new(KubeStyle(lock)).layer(Echo),
        headers,
    );
}

#[divan::bench(args = SHAPES)]
fn kube5_as_shipped(bencher: Bencher<'_, '_>, headers: Headers) {
    let _heap = same_heap();
    let predicate = Kube5Token::new(token(0));
    bench(
        bencher,
        AsyncFilterLayer::new(predicate).layer(Echo),
        headers,
    );
}

#[divan::bench(args = SHAPES)]
fn check_generation_atomic(bencher: Bencher<'_, '_>, headers: Headers) {
    let _heap = same_heap();
    let store = MirrorStore::new(&token(0));
    bench(bencher, store.generation_check(Echo), headers);
}

#[divan::bench(args = SHAPES)]
fn check_arc_swap_cache(bencher: Bencher<'_, '_>, headers: Headers) {
    let _heap = same_heap();
    let store = MirrorStore::new(&token(0));
    bench(bencher, store.cache_check(Echo), headers);
}
