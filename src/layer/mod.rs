//! [`BearerLayer`]: puts `Authorization: Bearer <token>` on every request, from a
//! [`TokenStore`], and reloads the token when a server refuses it.
//!
//! A request costs an atomic load and the clone of the prebuilt header value. A refusal
//! (see [`classify`](crate::classify)) of the store's token starts a reload at once, for
//! the requests that follow; with [`retry_unauthorized`](BearerLayer::retry_unauthorized)
//! the refused request itself is sent once more with the new token ([`RetryFuture`]).
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::{BearerLayer, TokenStore};
//! use bearer_reload::source::FnSource;
//! use http::{Request, Response, header::AUTHORIZATION};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! let source = FnSource::new("example", || async { Ok::<_, std::io::Error>(b"abc\n".to_vec()) });
//! let store = TokenStore::builder(source).load().await?;
//! let client = ServiceBuilder::new()
//!     .layer(BearerLayer::new(store))
//!     .service(service_fn(|req: Request<String>| async move {
//!         // The inner service (the real client) sees the header.
//!         assert_eq!(req.headers()[AUTHORIZATION], "Bearer abc");
//!         assert!(req.headers()[AUTHORIZATION].is_sensitive());
//!         Ok::<_, std::convert::Infallible>(Response::new(String::new()))
//!     }));
//! client.oneshot(Request::new(String::new())).await?;
//! # Ok(()) }
//! ```
//!
//! # A request sent right after a refusal
//!
//! Until the reload has installed the new token, requests still carry the refused token
//! and may meet their own 401 (one read answers every refusal of one token); with
//! `retry_unauthorized` each is sent again with the new token. The request path itself
//! never waits.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::AUTHORIZATION;
use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::classify::{Http401, Unauthorized};
use crate::store::{Certainty, Store, TokenStore};
use crate::token::Token;

mod retry;

pub use retry::RetryFuture;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnHeader {
    Keep,
    Replace,
}

/// The `R` of [`BearerLayer`] (and `reqwest::BearerMiddleware`) after
/// `retry_unauthorized()`: a refused request is sent once more with the new token (see
/// [`RetryFuture`]). With `()`, the default, it goes back to its caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryUnauthorized;

/// Layer that adds the store's current bearer token to every request and reloads the token
/// when a server refuses it.
///
/// `C` tells a refusal ([`classifier`](Self::classifier)); `R` says whether the refused
/// request is sent again ([`RetryUnauthorized`]). Where it goes in a stack: see [the crate
/// docs](crate#where-the-layer-goes).
#[derive(Debug, Clone)]
pub struct BearerLayer<C = Http401, R = ()> {
    store: TokenStore,
    own_header: OwnHeader,
    classifier: C,
    retry: R,
}

impl BearerLayer {
    /// A layer taking its token from `store`, leaving requests that already carry an
    /// `Authorization` header alone, and reloading the token on HTTP 401.
    pub fn new(store: TokenStore) -> Self {
        Self {
            store,
            own_header: OwnHeader::Keep,
            classifier: Http401,
            retry: (),
        }
    }
}

impl<C, R> BearerLayer<C, R> {
    /// Use `classifier` to tell unauthorized responses (for example
    /// [`GrpcUnauthenticated`](crate::classify::GrpcUnauthenticated)).
    pub fn classifier<D: Unauthorized>(self, classifier: D) -> BearerLayer<D, R> {
        BearerLayer {
            store: self.store,
            own_header: self.own_header,
            classifier,
            retry: self.retry,
        }
    }

    /// On an unauthorized response, also send the request once more with the new token
    /// (see [`RetryFuture`]).
    pub fn retry_unauthorized(self) -> BearerLayer<C, RetryUnauthorized> {
        BearerLayer {
            store: self.store,
            own_header: self.own_header,
            classifier: self.classifier,
            retry: RetryUnauthorized,
        }
    }

    /// Replace an `Authorization` header the request already has. By default it is kept,
    /// as client-go does, and that request's 401 reloads nothing and is never retried.
    pub fn overwrite_existing(mut self) -> Self {
        self.own_header = OwnHeader::Replace;
        self
    }
}

impl<S, C: Clone, R: Clone> Layer<S> for BearerLayer<C, R> {
    type Service = BearerService<S, C, R>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerService {
            inner,
            auth: Authorizer::new(&self.store, self.own_header),
            classifier: self.classifier.clone(),
            retry: self.retry.clone(),
        }
    }
}

/// The token a request carried, for a refusal.
#[derive(Clone, Debug)]
struct Carried {
    store: Store<Token>,
    sent: u64,
}

/// The store and the token last read from it. Not generic: its slow path is compiled once.
#[derive(Clone, Debug)]
struct Authorizer {
    store: Store<Token>,
    cached: Arc<Token>,
    own_header: OwnHeader,
}

impl Authorizer {
    fn new(store: &TokenStore, own_header: OwnHeader) -> Self {
        let store = &store.0;
        Self {
            cached: store.current(),
            store: store.clone(),
            own_header,
        }
    }

    /// Sets the header unless the request keeps its own: the token it set, or `None`.
    #[inline]
    fn authorize(&mut self, headers: &mut HeaderMap) -> Option<Carried> {
        // A generation atomic: `arc_swap::Cache` measured no faster (BENCHMARKS.md).
        if !self.store.is_current(&self.cached) {
            self.store.catch_up(&mut self.cached);
        }
        let value = self.cached.header_value().clone();
        // `append`, then put a request's own value back: one hash probe when it has none.
        if headers.append(AUTHORIZATION, value) {
            if self.own_header == OwnHeader::Keep {
                keep_own(headers);
                self.store.count_kept_authorization();
                return None;
            }
            headers.insert(AUTHORIZATION, self.cached.header_value().clone());
        }
        Some(Carried {
            store: self.store.clone(),
            sent: self.cached.generation(),
        })
    }
}

/// Keeps the request's own `Authorization` (of several, the first).
#[cold]
fn keep_own(headers: &mut HeaderMap) {
    if let Some(first) = headers.get(AUTHORIZATION).cloned() {
        headers.insert(AUTHORIZATION, first);
    }
}

/// The service [`BearerLayer`] builds; its docs say what `C` and `R` are.
#[derive(Clone, Debug)]
pub struct BearerService<S, C = Http401, R = ()> {
    inner: S,
    auth: Authorizer,
    classifier: C,
    #[allow(dead_code, reason = "what a refusal does is its type; Debug shows it")]
    retry: R,
}

impl<S, C, R> BearerService<S, C, R> {
    /// The inner service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }

    /// The inner service, mutably.
    pub fn get_mut(&mut self) -> &mut S {
        &mut self.inner
    }

    /// Consumes `self`, returning the inner service.
    pub fn into_inner(self) -> S {
        self.inner
    }
}

impl<S, B, ResB, C> Service<Request<B>> for BearerService<S, C, ()>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    C: Unauthorized,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, C>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let sent = self.auth.authorize(req.headers_mut());
        ResponseFuture {
            inner: self.inner.call(req),
            sent,
            classifier: self.classifier.clone(),
        }
    }
}

pin_project! {
    /// Response future of [`BearerService`] without the retry.
    pub struct ResponseFuture<F, C = Http401> {
        #[pin]
        inner: F,
        // `None` for a request that kept its own `Authorization`.
        sent: Option<Carried>,
        classifier: C,
    }
}

impl<F, C: fmt::Debug> fmt::Debug for ResponseFuture<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field("sent", &self.sent.as_ref().map(|carried| carried.sent))
            .field("classifier", &self.classifier)
            .finish_non_exhaustive()
    }
}

impl<F, ResB, E, C> Future for ResponseFuture<F, C>
where
    F: Future<Output = Result<Response<ResB>, E>>,
    C: Unauthorized,
{
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        // Returned as it is, so that the response is not moved again.
        let poll = this.inner.poll(cx);
        if let Poll::Ready(Ok(response)) = &poll
            && let Some(Carried { store, sent }) = this.sent.as_ref()
            && this.classifier.is_unauthorized(response)
        {
            // The requests that follow get the new token once it is in; this one its 401.
            store.reload_after_refusal(*sent, Certainty::Certain);
        }
        poll
    }
}

#[cfg(test)]
mod tests;
