//! [`BearerMiddleware`]: the store's token on every request of a
//! [reqwest-middleware](https://docs.rs/reqwest-middleware) client, reloaded when a server
//! refuses it, as [`BearerLayer`](crate::BearerLayer) does for tower clients. With feature
//! `tls`, `TlsMiddleware` does the same for client certificates and CA bundles.
//!
//! reqwest follows redirects below the middleware, and drops `Authorization` on a redirect
//! to another host, so the token never leaves its origin.
//!
//! reqwest 0.13 needs a TLS backend chosen by the application. With reqwest's
//! `rustls-no-provider` feature, install a provider before building the client:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bearer_reload::TokenStore;
//! use bearer_reload::reqwest::BearerMiddleware;
//! use bearer_reload::source::FileSource;
//!
//! rustls::crypto::ring::default_provider()
//!     .install_default()
//!     .expect("no other provider installed yet");
//! let path = "/var/run/secrets/kubernetes.io/serviceaccount/token";
//! let store = TokenStore::builder(FileSource::new(path)).load().await?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(BearerMiddleware::new(store).retry_unauthorized())
//!     .build();
//! let response = client.get("https://kubernetes.default.svc/api").send().await?;
//! # let _ = response; Ok(()) }
//! ```

use std::fmt;

use ::reqwest::{Body, Request, Response, StatusCode};
use http::Extensions;
use http::header::AUTHORIZATION;
use reqwest_middleware::{Middleware, Next, Result};

use crate::layer::RetryUnauthorized;
use crate::refusal::{AfterRefusal, Refused, Renewed};
use crate::store::{Certainty, TokenStore};

#[cfg(feature = "tls")]
mod tls;
#[cfg(feature = "tls")]
pub use tls::TlsMiddleware;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OwnHeader {
    Keep,
    Replace,
}

/// What a 401 to the store's token does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum OnUnauthorized {
    /// Reload the token for the requests that follow; the 401 goes back.
    Reload,
    /// Reload, and send the request once more with the new token.
    Retry,
}

/// A [`reqwest_middleware::Middleware`] that puts the store's current token on every
/// request (a sensitive `Authorization: Bearer` header) and reloads the token when a
/// server answers 401 to it; `R` says whether the request is then sent again (`()`: no;
/// [`RetryUnauthorized`], after [`retry_unauthorized`](Self::retry_unauthorized)).
///
/// [`reqwest_middleware::Middleware`]: https://docs.rs/reqwest-middleware/0.5/reqwest_middleware/trait.Middleware.html
#[derive(Clone)]
pub struct BearerMiddleware<R = ()> {
    store: TokenStore,
    own_header: OwnHeader,
    retry: R,
}

impl<R: fmt::Debug> fmt::Debug for BearerMiddleware<R> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BearerMiddleware")
            .field("store", &self.store)
            .field("own_header", &self.own_header)
            .field("retry", &self.retry)
            .finish()
    }
}

impl BearerMiddleware {
    /// A middleware with `store`'s token that keeps a request's own `Authorization` header
    /// and, on a 401, reloads the token without sending the request again.
    pub fn new(store: TokenStore) -> Self {
        Self {
            store,
            own_header: OwnHeader::Keep,
            retry: (),
        }
    }
}

impl<R> BearerMiddleware<R> {
    /// Replace an `Authorization` header the request already has. By default it is kept,
    /// and a request that keeps its own header is the caller's business: its 401 reloads
    /// nothing and is never sent again.
    pub fn overwrite_existing(mut self) -> Self {
        self.own_header = OwnHeader::Replace;
        self
    }

    /// On a 401, also send the request once more with the new token, as
    /// [`BearerLayer::retry_unauthorized`](crate::BearerLayer::retry_unauthorized) does,
    /// when `reqwest::Request::try_clone` can copy it (not a `Body::wrap_stream` body).
    pub fn retry_unauthorized(self) -> BearerMiddleware<RetryUnauthorized> {
        BearerMiddleware {
            store: self.store,
            own_header: self.own_header,
            retry: RetryUnauthorized,
        }
    }

    /// Sets the header unless the request keeps its own; the generation of the token set.
    fn authorize(&self, req: &mut Request) -> Option<u64> {
        if self.own_header == OwnHeader::Keep && req.headers().contains_key(AUTHORIZATION) {
            self.store.0.count_kept_authorization();
            return None;
        }
        let token = self.store.current();
        req.headers_mut()
            .insert(AUTHORIZATION, token.header_value().clone());
        Some(token.generation())
    }
}

impl Refused for Response {
    type Body = Body;

    fn into_body(self) -> Body {
        Body::from(self)
    }
}

#[async_trait::async_trait]
impl Middleware for BearerMiddleware<()> {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        self.run(req, extensions, next, OnUnauthorized::Reload)
            .await
    }
}

#[async_trait::async_trait]
impl Middleware for BearerMiddleware<RetryUnauthorized> {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        self.run(req, extensions, next, OnUnauthorized::Retry).await
    }
}

impl<R: Send + Sync> BearerMiddleware<R> {
    /// Sends `req` with the store's token; a 401 does what `on_unauthorized` says.
    async fn run(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
        on_unauthorized: OnUnauthorized,
    ) -> Result<Response> {
        self.store.0.revive_if_stopped();
        let Some(sent) = self.authorize(&mut req) else {
            // Only our own token is ours to refresh.
            return next.run(req, extensions).await;
        };
        let replay = match on_unauthorized {
            OnUnauthorized::Retry => req.try_clone(),
            OnUnauthorized::Reload => None,
        };
        let response = next.clone().run(req, extensions).await;
        let response = match response {
            Ok(response) if response.status() == StatusCode::UNAUTHORIZED => response,
            response => return response,
        };
        // A refusal proves the server did not act on it: any method goes again.
        let Some(mut replay) = replay else {
            // The requests that follow get the new token; this one gets its 401.
            self.store.0.reload_after_refusal(sent, Certainty::Certain);
            return Ok(response);
        };
        let renewed = response.extensions().get::<Renewed>().is_some();
        let after = AfterRefusal::new(self.store.0.clone(), sent, renewed, response);
        let mut after = std::pin::pin!(after);
        if let Err(response) =
            std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || true)).await
        {
            // The same credentials would be refused again.
            return Ok(response);
        }
        self.store.0.resend(replay.headers_mut());
        let response = next.run(replay, extensions).await;
        if let Ok(response) = &response {
            self.store
                .0
                .count_resent(response.status() == StatusCode::UNAUTHORIZED);
        }
        response
    }
}
