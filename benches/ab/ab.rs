//! The request path, A against B: the `per_request` bench's `bearer_layer` and
//! `tower_http_static`, and `retry_unauthorized` (the layer every README example uses,
//! `BearerLayer::retry_unauthorized()`, on a request with the README's body), on the same
//! request, inner service and loop (`benches/common/mod.rs`), built by `benches/ab.sh` once
//! against a base commit and once against the work tree. Only the store's construction
//! follows the API of the tree it is built against: `--cfg ab_api="loader"` for commits
//! before `TokenStore::builder`.

#[path = "../common/mod.rs"]
mod common;

use std::convert::Infallible;
use std::fmt;
use std::future::{Ready, ready};
use std::task::{Context, Poll, Waker};

use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use divan::Bencher;
use http::header::AUTHORIZATION;
use http::{Request, Response};
use http_body_util::{Empty, Full};
use tower::{Layer, Service};
use tower_http::auth::AddAuthorizationLayer;

use common::{Echo, Headers, drive, new_request, sensitive_bearer, token};

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

/// The retry variant's request: `new_request`'s, with the body the README's hyper-util
/// example sends (`Full::default()`), which the retry copies before sending.
type BodyReq = Request<Full<Bytes>>;

/// `Echo` for `BodyReq`: the retry layer wants a response type with a body.
#[derive(Clone, Copy, Debug)]
struct EchoBody;

impl Service<BodyReq> for EchoBody {
    type Response = Response<Empty<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    #[inline]
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    #[inline]
    fn call(&mut self, req: BodyReq) -> Self::Future {
        let mut res = Response::new(Empty::new());
        *res.headers_mut() = req.into_parts().0.headers;
        ready(Ok(res))
    }
}

/// Checks that `svc` sets `token(0)`, warms it up, then times it on requests from `request`.
fn bench<S, R, B>(bencher: Bencher<'_, '_>, mut svc: S, request: impl Fn() -> R)
where
    S: Service<R, Response = Response<B>>,
    S::Error: fmt::Debug,
{
    let mut cx = Context::from_waker(Waker::noop());
    let first = drive(&mut svc, request(), &mut cx);
    assert_eq!(first.headers()[AUTHORIZATION], sensitive_bearer(&token(0)));
    for _ in 0..10_000 {
        drop(drive(&mut svc, request(), &mut cx));
    }
    bencher
        .with_inputs(request)
        .bench_local_values(|req| drive(&mut svc, req, &mut cx));
}

#[divan::bench(args = SHAPES)]
fn bearer_layer(bencher: Bencher<'_, '_>, headers: Headers) {
    let svc = BearerLayer::new(store()).layer(Echo);
    bench(bencher, svc, || new_request(headers));
}

/// Not named `bearer_layer_…`: `ab.sh` selects a variant by a pattern on its name.
#[divan::bench(args = SHAPES)]
fn retry_unauthorized(bencher: Bencher<'_, '_>, headers: Headers) {
    let svc = BearerLayer::new(store())
        .retry_unauthorized()
        .layer(EchoBody);
    let request = || new_request(headers).map(|()| Full::default());
    bench(bencher, svc, request);
}

#[divan::bench(args = SHAPES)]
fn tower_http_static(bencher: Bencher<'_, '_>, headers: Headers) {
    // The same set-up as `bearer_layer`, for the allocator's sake (see `per_request`).
    let _heap = store();
    let layer = AddAuthorizationLayer::bearer(&token(0)).as_sensitive(true);
    bench(bencher, layer.layer(Echo), || new_request(headers));
}
