//! [`BearerLayer`]: puts `Authorization: Bearer <token>` on every request, from a
//! [`TokenStore`], and reloads the token when a server refuses it.
//!
//! The service keeps the current token's prebuilt header value; each request costs one
//! atomic load (is the cached token still current?) and the clone of a `HeaderValue`, the
//! same clone tower-http's static `AddAuthorization` makes. On the way back, one status
//! comparison: a response that says the token was not accepted (HTTP 401 by default, see
//! [`classify`](crate::classify)) to a request that carried the store's token starts a
//! reload at once, for the requests that follow. With
//! [`retry_unauthorized`](BearerLayer::retry_unauthorized) the refused request itself is
//! sent once more with the new token (see [`RetryFuture`]).
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
//! When a request is refused and the reload it started is still running, the services
//! whose token is the refused one wait for that reload at `poll_ready` (at most as long as
//! the store's [`fetch_timeout`](crate::StoreBuilder::fetch_timeout), as the reload
//! itself), then send with whatever token it installed: a request that could not be sent
//! again (a streamed body) is the only one to meet the 401, not every request sent while
//! the source is being read. Once a newer token is installed nothing waits. The wait is at
//! readiness, before the layer sees the request: one that carries its own `Authorization`
//! waits too. If the source still holds the refused token, the requests go with it and
//! meet their 401 (the rate limit keeps them from reading the source again within a
//! second).
//!
//! Where the layer goes in a stack: see [the crate docs](crate#where-the-layer-goes).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};

use http::header::AUTHORIZATION;
use http::{HeaderMap, Request, Response};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::classify::{Http401, Unauthorized};
use crate::store::{StoreId, TokenStore};
use crate::token::Token;

pub(crate) mod refused;
mod retry;

pub use retry::RetryFuture;

/// Whether a request's own `Authorization` header is kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnHeader {
    Keep,
    Replace,
}

/// Layer that adds the store's current bearer token to every request and reloads the token
/// when a server refuses it.
///
/// `C` tells a refusal (HTTP 401 by default, [`classifier`](Self::classifier) for gRPC's);
/// `RETRY` says whether the refused request itself is sent once more with the new token
/// ([`retry_unauthorized`](Self::retry_unauthorized)) or goes back to the caller. The two
/// are independent: set them in any order.
///
/// See the [module docs](crate::layer) for an example, and
/// [the crate docs](crate#where-the-layer-goes) for where it goes in a stack.
#[derive(Debug, Clone)]
pub struct BearerLayer<C = Http401, const RETRY: bool = false> {
    store: TokenStore,
    own_header: OwnHeader,
    classifier: C,
}

impl BearerLayer {
    /// A layer taking its token from `store`, leaving requests that already carry an
    /// `Authorization` header alone, and reloading the token on HTTP 401.
    pub fn new(store: TokenStore) -> Self {
        Self {
            store,
            own_header: OwnHeader::Keep,
            classifier: Http401,
        }
    }
}

impl<C, const RETRY: bool> BearerLayer<C, RETRY> {
    /// Use `classifier` to tell unauthorized responses (for example
    /// [`GrpcUnauthenticated`](crate::classify::GrpcUnauthenticated)), for the reload and
    /// for the retry alike.
    pub fn classifier<D: Unauthorized>(self, classifier: D) -> BearerLayer<D, RETRY> {
        BearerLayer {
            store: self.store,
            own_header: self.own_header,
            classifier,
        }
    }

    /// On an unauthorized response, also send the request once more with the new token
    /// (see [`RetryFuture`]): once at most, only when the reload found a newer token, and
    /// only when the body can be sent again ([`TryCloneBody`](crate::body::TryCloneBody):
    /// buffered bodies, or any body in a [`ReplayBody`](crate::body::ReplayBody)).
    pub fn retry_unauthorized(self) -> BearerLayer<C, true> {
        BearerLayer {
            store: self.store,
            own_header: self.own_header,
            classifier: self.classifier,
        }
    }

    /// Replace an `Authorization` header the request already has. By default it is kept,
    /// as client-go does (of several values, which HTTP does not allow, the first), and a
    /// request that keeps its own header is the caller's business: its 401 reloads
    /// nothing and is never retried.
    pub fn overwrite_existing(mut self) -> Self {
        self.own_header = OwnHeader::Replace;
        self
    }

    /// The store the layer reads.
    pub fn store(&self) -> &TokenStore {
        &self.store
    }
}

impl<S, C: Clone, const RETRY: bool> Layer<S> for BearerLayer<C, RETRY> {
    type Service = BearerService<S, C, RETRY>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerService {
            inner,
            auth: Authorizer::new(&self.store, self.own_header),
            classifier: self.classifier.clone(),
        }
    }
}

/// The wait of a request that would carry a refused token, at readiness.
type Waiting = Pin<Box<dyn Future<Output = ()> + Send + Sync>>;

/// What a service knows of its token: the store, the token it last read from it, and the
/// wait for a refused token's reload. Not generic, so that its slow paths are compiled once.
struct Authorizer {
    store: TokenStore,
    cached: Arc<Token>,
    own_header: OwnHeader,
    waiting: Option<Waiting>,
}

impl Authorizer {
    fn new(store: &TokenStore, own_header: OwnHeader) -> Self {
        Self {
            cached: store.current(),
            store: store.clone(),
            own_header,
            waiting: None,
        }
    }

    /// Readiness on our side: the cached token current, and no refused token's reload to
    /// wait for (see the module docs). One atomic load while nothing is going on.
    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        // A wait is only ever begun while the store's word has its `REFUSED` flag set, so
        // a current word means there is nothing to wait for (a finished wait left behind is
        // dropped by the next slow path).
        if self.store.is_current(&self.cached) {
            return Poll::Ready(());
        }
        self.poll_catch_up(cx)
    }

    #[cold]
    #[inline(never)]
    fn poll_catch_up(&mut self, cx: &mut Context<'_>) -> Poll<()> {
        loop {
            if let Some(waiting) = self.waiting.as_mut() {
                ready!(waiting.as_mut().poll(cx));
                self.waiting = None;
            }
            self.store.catch_up(&mut self.cached);
            match self.store.refusal_settled(self.cached.generation()) {
                Some(waiting) => self.waiting = Some(Box::pin(waiting)),
                None => return Poll::Ready(()),
            }
        }
    }

    /// Sets the header unless the request has its own and it is kept. Returns the
    /// generation of the token it set.
    #[inline]
    fn authorize(&mut self, headers: &mut HeaderMap) -> Option<u64> {
        // A generation atomic rather than `arc_swap::Cache`: Cache measured 0.6-2.3% slower
        // under divan and 0.2-1.6% faster in paired rounds (BENCHMARKS.md): no gain.
        if !self.store.is_current(&self.cached) {
            self.store.catch_up(&mut self.cached);
        }
        let value = self.cached.header_value().clone();
        // `insert`, then put a request's own value back: one hash probe on the common path
        // (no header yet), where `entry` costs about 15 ns more.
        if let Some(own) = headers.insert(AUTHORIZATION, value)
            && self.own_header == OwnHeader::Keep
        {
            headers.insert(AUTHORIZATION, own);
            self.store.count_kept_authorization();
            return None;
        }
        Some(self.cached.generation())
    }
}

// By hand: a clone waits for nothing of its original's.
impl Clone for Authorizer {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            cached: self.cached.clone(),
            own_header: self.own_header,
            waiting: None,
        }
    }
}

/// Service that adds the store's current bearer token to every request and reloads the
/// token when a server refuses it; built by [`BearerLayer`], whose docs say what `C` and
/// `RETRY` are.
#[derive(Clone)]
pub struct BearerService<S, C = Http401, const RETRY: bool = false> {
    inner: S,
    auth: Authorizer,
    classifier: C,
}

impl<S: fmt::Debug, C: fmt::Debug, const RETRY: bool> fmt::Debug for BearerService<S, C, RETRY> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerService")
            .field("inner", &self.inner)
            .field("store", &self.auth.store)
            .field("classifier", &self.classifier)
            .field("retry", &RETRY)
            .finish_non_exhaustive()
    }
}

impl<S, C, const RETRY: bool> BearerService<S, C, RETRY> {
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

    /// The store the service reads.
    pub fn store(&self) -> &TokenStore {
        &self.auth.store
    }
}

impl<S, B, ResB, C> Service<Request<B>> for BearerService<S, C, false>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    C: Unauthorized,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, C>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        ready!(self.auth.poll_ready(cx));
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let sent = self
            .auth
            .authorize(req.headers_mut())
            .map(|generation| (self.auth.store.id(), generation));
        ResponseFuture {
            inner: self.inner.call(req),
            sent,
            classifier: self.classifier.clone(),
        }
    }
}

pin_project! {
    /// Response future of [`BearerService`] without the retry: the inner service's
    /// future, and a look at the response's status on the way back.
    pub struct ResponseFuture<F, C = Http401> {
        #[pin]
        inner: F,
        // The store's number (not a handle: see `store::live`) and the generation of the
        // token the request carried; `None` for a request that kept its own
        // `Authorization`.
        sent: Option<(StoreId, u64)>,
        classifier: C,
    }
}

impl<F, C: fmt::Debug> fmt::Debug for ResponseFuture<F, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ResponseFuture")
            .field(
                "sent",
                &self.sent.as_ref().map(|(_, generation)| generation),
            )
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
        let result = ready!(this.inner.poll(cx));
        if let (Ok(response), Some((id, sent))) = (&result, this.sent.take())
            && this.classifier.is_unauthorized(response)
            && let Some(store) = id.store()
        {
            // Starts the store's read and returns: the request that follows gets the new
            // token (or waits for it, see the module docs), this one gets its 401.
            store.reload_after_unauthorized(sent);
        }
        Poll::Ready(result)
    }
}

#[cfg(test)]
mod tests;
