//! [`BearerLayer`]: puts `Authorization: Bearer <token>` on every request, from a
//! [`TokenStore`].
//!
//! The service keeps the current token's prebuilt header value; each request costs one
//! atomic load (is the cached token still current?) and the clone of a `HeaderValue`, the
//! same clone tower-http's static `AddAuthorization` makes.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::{BearerLayer, TokenLoader};
//! use http::{Request, Response, header::AUTHORIZATION};
//! use tower::{ServiceBuilder, ServiceExt, service_fn};
//!
//! let store = TokenLoader::new("example", || async { Ok::<_, std::io::Error>(b"abc\n".to_vec()) })
//!     .load()
//!     .await?;
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
//! # Where it goes in a stack
//!
//! Outside tower-http's `FollowRedirect`: a redirect to another origin then never carries
//! the token, because the header is set once, on the first hop, and `FollowRedirect`'s
//! policy strips it on cross-origin hops. Inside it, the layer would put the token back on
//! every hop. For kube's stack, see the `kube` module.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use http::header::AUTHORIZATION;
use http::{HeaderMap, Request};
use pin_project_lite::pin_project;
use tower_layer::Layer;
use tower_service::Service;

use crate::retry::{NoRetry, RetryUnauthorized};
use crate::store::TokenStore;
use crate::token::Token;

/// Layer that adds the store's current bearer token to every request.
///
/// See the [module docs](crate::layer) for an example.
#[derive(Debug, Clone)]
pub struct BearerLayer<R = NoRetry> {
    store: TokenStore,
    overwrite: bool,
    retry: R,
}

impl BearerLayer {
    /// A layer taking its token from `store`, leaving requests that already carry an
    /// `Authorization` header alone, and not retrying.
    pub fn new(store: TokenStore) -> Self {
        Self {
            store,
            overwrite: false,
            retry: NoRetry,
        }
    }
}

impl<R> BearerLayer<R> {
    /// Replace an `Authorization` header the request already has (default: keep it, as
    /// client-go does; of several values, which HTTP does not allow, the first is kept).
    pub fn overwrite_existing(mut self, overwrite: bool) -> Self {
        self.overwrite = overwrite;
        self
    }

    /// On an unauthorized response, reload the token and send the request once more with
    /// the new one. See [`RetryUnauthorized`].
    pub fn retry_unauthorized<C>(
        self,
        retry: RetryUnauthorized<C>,
    ) -> BearerLayer<RetryUnauthorized<C>> {
        BearerLayer {
            store: self.store,
            overwrite: self.overwrite,
            retry,
        }
    }

    /// The store the layer reads.
    pub fn store(&self) -> &TokenStore {
        &self.store
    }
}

impl<S, R: Clone> Layer<S> for BearerLayer<R> {
    type Service = BearerService<S, R>;

    fn layer(&self, inner: S) -> Self::Service {
        BearerService {
            inner,
            cached: self.store.current(),
            store: self.store.clone(),
            overwrite: self.overwrite,
            retry: self.retry.clone(),
        }
    }
}

/// Service that adds the store's current bearer token to every request.
///
/// Built by [`BearerLayer`].
#[derive(Debug, Clone)]
pub struct BearerService<S, R = NoRetry> {
    inner: S,
    store: TokenStore,
    cached: Arc<Token>,
    overwrite: bool,
    pub(crate) retry: R,
}

impl<S, R> BearerService<S, R> {
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
        &self.store
    }

    /// Sets the header unless the request has its own and `overwrite` is off. Returns the
    /// generation of the token it set.
    #[inline]
    pub(crate) fn authorize(&mut self, headers: &mut HeaderMap) -> Option<u64> {
        if !self.store.is_current(&self.cached) {
            self.cached = self.store.current();
        }
        let value = self.cached.header_value().clone();
        // `insert`, then put a request's own value back: one hash probe on the common path
        // (no header yet), where `entry` costs about 15 ns more.
        if let Some(own) = headers.insert(AUTHORIZATION, value)
            && !self.overwrite
        {
            headers.insert(AUTHORIZATION, own);
            return None;
        }
        Some(self.cached.generation())
    }

    pub(crate) fn parts_mut(&mut self) -> (&mut S, &TokenStore) {
        (&mut self.inner, &self.store)
    }
}

impl<S, B> Service<Request<B>> for BearerService<S, NoRetry>
where
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future>;

    #[inline]
    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    #[inline]
    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        self.authorize(req.headers_mut());
        ResponseFuture {
            inner: self.inner.call(req),
        }
    }
}

pin_project! {
    /// Response future of [`BearerService`] without retry: the inner service's future.
    #[derive(Debug)]
    pub struct ResponseFuture<F> {
        #[pin]
        inner: F,
    }
}

impl<F: Future> Future for ResponseFuture<F> {
    type Output = F::Output;

    #[inline]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        self.project().inner.poll(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::TokenLoader;
    use std::convert::Infallible;
    use tower::{ServiceExt, service_fn};

    async fn store_of(token: &str) -> TokenStore {
        let token = token.as_bytes().to_vec();
        TokenLoader::new("test", move || {
            let token = token.clone();
            async move { Ok::<_, std::io::Error>(token) }
        })
        .refresh_interval(None)
        .load()
        .await
        .unwrap()
    }

    fn echo_auth() -> impl Service<
        Request<()>,
        Response = Option<http::HeaderValue>,
        Error = Infallible,
        Future = impl Future<Output = Result<Option<http::HeaderValue>, Infallible>> + Send,
    > + Clone {
        service_fn(|req: Request<()>| async move {
            Ok::<_, Infallible>(req.headers().get(AUTHORIZATION).cloned())
        })
    }

    #[tokio::test]
    async fn sets_a_sensitive_header() {
        let svc = BearerLayer::new(store_of("tok").await).layer(echo_auth());
        let got = svc.oneshot(Request::new(())).await.unwrap().unwrap();
        assert_eq!(got, "Bearer tok");
        assert!(got.is_sensitive());
    }

    #[tokio::test]
    async fn keeps_or_overwrites_an_existing_header() {
        let own = || {
            Request::builder()
                .header(AUTHORIZATION, "Basic dXNlcg==")
                .body(())
                .unwrap()
        };
        let store = store_of("tok").await;
        let keep = BearerLayer::new(store.clone()).layer(echo_auth());
        assert_eq!(
            keep.oneshot(own()).await.unwrap().unwrap(),
            "Basic dXNlcg=="
        );
        let over = BearerLayer::new(store)
            .overwrite_existing(true)
            .layer(echo_auth());
        assert_eq!(over.oneshot(own()).await.unwrap().unwrap(), "Bearer tok");
    }

    #[tokio::test]
    async fn a_rotation_reaches_an_existing_service() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "one").unwrap();
        let store = crate::TokenFile::new(&path)
            .watch(false)
            .refresh_interval(None)
            .load()
            .await
            .unwrap();
        let mut svc = BearerLayer::new(store.clone()).layer(echo_auth());
        let got = svc.ready().await.unwrap().call(Request::new(())).await;
        assert_eq!(got.unwrap().unwrap(), "Bearer one");
        std::fs::write(&path, "two").unwrap();
        store.reload().await.unwrap();
        let got = svc.ready().await.unwrap().call(Request::new(())).await;
        assert_eq!(got.unwrap().unwrap(), "Bearer two");
        // A clone made before the rotation also catches up.
        let clone = svc.clone();
        std::fs::write(&path, "three").unwrap();
        store.reload().await.unwrap();
        let got = clone.oneshot(Request::new(())).await.unwrap().unwrap();
        assert_eq!(got, "Bearer three");
    }
}
