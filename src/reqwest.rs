//! [`BearerMiddleware`]: the store's token on every request of a
//! [reqwest-middleware](https://docs.rs/reqwest-middleware) client, reloaded when a server
//! refuses it.
//!
//! The middleware does for `reqwest` what [`BearerLayer`](crate::BearerLayer) does for tower
//! clients, from the same [`TokenStore`], with the same options and the same 401 code:
//!
//! - every request gets `Authorization: Bearer <token>` (a sensitive header value), unless
//!   it has its own `Authorization` (set with `bearer_auth`, say), which is left alone
//!   unless [`overwrite_existing`](BearerMiddleware::overwrite_existing) is asked for;
//! - an HTTP 401 to a request that carried the store's token reloads the token for the
//!   requests that follow (one read per burst of 401s, at most one a second while a token
//!   keeps being refused; none when the store already holds a newer token);
//! - with [`retry_unauthorized`](BearerMiddleware::retry_unauthorized), the refused request
//!   is sent once more with the new token, when [`reqwest::Request::try_clone`] can copy
//!   it (a body made with `Body::wrap_stream` cannot be copied: that request gets its 401
//!   back, after the reload has started). Before the second attempt, the 401's body is
//!   read and dropped (at most 8 KiB for at most 50 ms), as the tower layer does: an HTTP/1
//!   connection is reused, and an HTTP/2 stream ends without a reset.
//!
//! [`reqwest::Request::try_clone`]: https://docs.rs/reqwest/0.13/reqwest/struct.Request.html#method.try_clone
//!
//! reqwest follows redirects inside the client, below the middleware, and removes
//! `Authorization` from a redirect to another host, so the token never follows a redirect
//! off its origin.
//!
//! reqwest 0.13 needs a TLS backend chosen by the application. With rustls and ring (and no
//! aws-lc), enable reqwest's `rustls-no-provider` feature and install ring's provider before
//! building the client:
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

/// Whether a request's own `Authorization` header is kept.
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

/// A [`reqwest_middleware::Middleware`] that adds the store's current bearer token to every
/// request and reloads the token when a server refuses it. See the [module docs](self).
///
/// `R` says whether a refused request is sent once more with the new token, as for
/// [`BearerLayer`](crate::BearerLayer): `()` (no) by default, [`RetryUnauthorized`]
/// after [`retry_unauthorized`](Self::retry_unauthorized).
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
    /// A middleware taking its token from `store`, leaving requests that already carry an
    /// `Authorization` header alone, and reloading the token on HTTP 401 (without sending
    /// the request again).
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

    /// On a 401, also send the request once more with the new token, if the request can be
    /// copied and the token changed.
    pub fn retry_unauthorized(self) -> BearerMiddleware<RetryUnauthorized> {
        BearerMiddleware {
            store: self.store,
            own_header: self.own_header,
            retry: RetryUnauthorized,
        }
    }

    /// Sets the header unless the request has its own and it is kept. Returns the
    /// generation of the token it set.
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
        // The copy is made before the request goes: sending consumes it.
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
            // Starts the store's read and returns: the requests that follow get the new
            // token, this one gets its 401.
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
