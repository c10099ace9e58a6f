//! The request path, A against B: the `per_request` bench's `bearer_layer` and
//! `tower_http_static`, on the same request, inner service and loop
//! (`benches/common/mod.rs`), built by `benches/ab.sh` once against a base commit and once
//! against the work tree. Only the store's construction follows the API of the tree it is
//! built against: `--cfg ab_api="loader"` for commits before `TokenStore::builder`.

#[path = "../common/mod.rs"]
mod common;

use std::fmt;
use std::task::{Context, Waker};

use bearer_reload::{BearerLayer, TokenStore};
use divan::Bencher;
use tower::{Layer, Service};
use tower_http::auth::AddAuthorizationLayer;

use common::{Echo, Headers, Req, Res, drive, header_of, new_request, sensitive_bearer, token};

const SHAPES: [Headers; 2] = [Headers::One, Headers::Empty];

fn main() {
    // The per_request bench's settings: see its docs for why.
    divan::Divan::default()
        .sample_size(64)
        .sample_count(1000)
        .config_with_args()
        .main();
}

/// A store holding `token(0)`, its refresher not running.
#[cfg(not(ab_api = "loader"))]
fn store() -> TokenStore {
    use bearer_reload::source::FnSource;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    let source = FnSource::new("ab", || async {
        Ok::<_, std::io::Error>(token(0).into_bytes())
    });
    let (store, refresher) = rt
        .block_on(TokenStore::builder(source).pair())
        .expect("first token");
    drop(refresher);
    store
}

/// A store holding `token(0)` (the `TokenLoader` API).
#[cfg(ab_api = "loader")]
fn store() -> TokenStore {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    rt.block_on(
        bearer_reload::TokenLoader::new("ab", || async {
            Ok::<_, std::io::Error>(token(0).into_bytes())
        })
        .load(),
    )
    .expect("first token")
}

fn bench<S>(bencher: Bencher<'_, '_>, mut svc: S, headers: Headers)
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    assert_eq!(header_of(&mut svc), sensitive_bearer(&token(0)));
    let mut cx = Context::from_waker(Waker::noop());
    for _ in 0..10_000 {
        drop(drive(&mut svc, new_request(headers), &mut cx));
    }
    bencher
        .with_inputs(|| new_request(headers))
        .bench_local_values(|req| drive(&mut svc, req, &mut cx));
}

#[divan::bench(args = SHAPES)]
fn bearer_layer(bencher: Bencher<'_, '_>, headers: Headers) {
    bench(bencher, BearerLayer::new(store()).layer(Echo), headers);
}

#[divan::bench(args = SHAPES)]
fn tower_http_static(bencher: Bencher<'_, '_>, headers: Headers) {
    // The same set-up as `bearer_layer`, for the allocator's sake (see `per_request`).
    let _heap = store();
    let layer = AddAuthorizationLayer::bearer(&token(0)).as_sensitive(true);
    bench(bencher, layer.layer(Echo), headers);
}
