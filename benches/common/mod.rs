//! What both per-request benches share: the variants, the request, the no-op inner service
//! and the loop that drives one request through a service.
//!
//! Every variant puts the same 900-byte bearer token (the size of a projected
//! service-account token) on the request:
//!
//! - `BearerLayer`, from a `TokenStore` (`store.rs`);
//! - tower-http's static `AddAuthorizationLayer::bearer` (the floor: it clones a prebuilt
//!   `HeaderValue`);
//! - kube-style: the token behind a tokio `RwLock` read through
//!   `tower::filter::AsyncFilterLayer` with a boxed predicate future, as kube-rs 5 does, but
//!   generous to kube: the lock holds a prebuilt `HeaderValue`;
//! - kube 5 as shipped: the same, formatting and validating a new header value per request;
//! - the two cached-token checks of `check.rs`, side by side.

// Each bench uses most of this, not all of it.
#![allow(dead_code)]

// Nothing here names the crate's API, so that `benches/ab` can build this file against an
// older commit: the store and the cached-token checks are in `store.rs` and `check.rs`,
// which each bench includes beside it.

use std::convert::Infallible;
use std::fmt;
use std::future::{Future, Ready, ready};
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderValue, Request, Response};
use tokio::sync::RwLock;
use tower::BoxError;
use tower::Service;
use tower::filter::AsyncPredicate;

pub(crate) type Req = Request<()>;
pub(crate) type Res = Response<()>;

/// Length of the token: about that of a projected service-account JWT.
pub(crate) const TOKEN_LEN: usize = 900;

/// An opaque token of `TOKEN_LEN` visible ASCII characters, different for every `n`.
pub(crate) fn token(n: u64) -> String {
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

/// What the request holds when it reaches the auth layer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Headers {
    /// One `accept` header, as a client's requests have by then: the header map is
    /// allocated when the request is built, outside the timed part.
    One,
    /// None: the timed part then includes allocating the map's storage for the first
    /// header, the same for every variant.
    Empty,
}

/// A fresh request with `headers`.
#[inline]
pub(crate) fn new_request(headers: Headers) -> Req {
    let mut req = Request::new(());
    if headers == Headers::One {
        req.headers_mut()
            .insert(ACCEPT, HeaderValue::from_static("application/json"));
    }
    req
}

/// `Bearer <token>`, marked sensitive.
pub(crate) fn sensitive_bearer(token: &str) -> HeaderValue {
    let mut value = HeaderValue::try_from(format!("Bearer {token}")).expect("valid token");
    value.set_sensitive(true);
    value
}

/// The no-op inner service: answers at once, handing the request's headers back in the
/// response (so that they are dropped outside the timed part, and can be checked).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Echo;

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
pub(crate) struct KubeStyle(pub(crate) Arc<RwLock<HeaderValue>>);

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

/// The predicate of kube 5's token-file path.
#[derive(Clone, Debug)]
pub(crate) struct Kube5Token(Arc<RwLock<Kube5File>>);

impl Kube5Token {
    /// A token file read just now, valid for a day.
    pub(crate) fn new(token: String) -> Self {
        Kube5Token(Arc::new(RwLock::new(Kube5File {
            token,
            expires_at: SystemTime::now() + Duration::from_secs(24 * 3600),
        })))
    }
}

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

/// Readies `svc`, calls it and polls the future to completion with `cx` (a no-op waker).
/// Generic over the request, for the A/B harness's variant with a request body.
#[inline(always)]
pub(crate) fn drive<S, R>(svc: &mut S, req: R, cx: &mut Context<'_>) -> S::Response
where
    S: Service<R>,
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

/// The `Authorization` header `svc` puts on a request now.
pub(crate) fn header_of<S>(svc: &mut S) -> HeaderValue
where
    S: Service<Req, Response = Res>,
    S::Error: fmt::Debug,
{
    let mut cx = Context::from_waker(std::task::Waker::noop());
    drive(svc, Request::new(()), &mut cx).headers()[AUTHORIZATION].clone()
}
