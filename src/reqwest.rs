//! [`BearerMiddleware`]: the store's token on every request of a
//! [reqwest-middleware](https://docs.rs/reqwest-middleware) client, reloaded when a server
//! refuses it.
//!
//! The middleware does for `reqwest` what [`BearerLayer`](crate::BearerLayer) does for tower
//! clients, from the same [`TokenStore`] and with the same 401 logic:
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
//!   read and dropped (up to [`DRAIN_LIMIT`] bytes, for at most [`DRAIN_TIME`]), as the
//!   tower layer does: an HTTP/1 connection is reused, and an HTTP/2 stream ends without a
//!   reset (see [`layer::retry`](crate::layer::retry)).
//!
//! [`DRAIN_LIMIT`]: crate::layer::retry::DRAIN_LIMIT
//! [`DRAIN_TIME`]: crate::layer::retry::DRAIN_TIME
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
//! use bearer_reload::TokenFile;
//! use bearer_reload::reqwest::BearerMiddleware;
//!
//! rustls::crypto::ring::default_provider()
//!     .install_default()
//!     .expect("no other provider installed yet");
//! let store = TokenFile::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
//!     .load()
//!     .await?;
//! let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
//!     .with(BearerMiddleware::new(store).retry_unauthorized())
//!     .build();
//! let response = client.get("https://kubernetes.default.svc/api").send().await?;
//! # let _ = response; Ok(()) }
//! ```

use ::reqwest::{Request, Response, StatusCode};
use http::header::AUTHORIZATION;
use http::{Extensions, HeaderMap};
use reqwest_middleware::{Middleware, Next, Result};

use crate::layer::retry::{DRAIN_TIME, drained};
use crate::store::{RetryOutcome, TokenStore};

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
/// [`reqwest_middleware::Middleware`]: https://docs.rs/reqwest-middleware/0.5/reqwest_middleware/trait.Middleware.html
#[derive(Debug, Clone)]
pub struct BearerMiddleware {
    store: TokenStore,
    own_header: OwnHeader,
    on_unauthorized: OnUnauthorized,
}

impl BearerMiddleware {
    /// A middleware taking its token from `store`, leaving requests that already carry an
    /// `Authorization` header alone, and reloading the token on HTTP 401 (without sending
    /// the request again).
    pub fn new(store: TokenStore) -> Self {
        Self {
            store,
            own_header: OwnHeader::Keep,
            on_unauthorized: OnUnauthorized::Reload,
        }
    }

    /// Replace an `Authorization` header the request already has. By default it is kept,
    /// and a request that keeps its own header is the caller's business: its 401 reloads
    /// nothing and is never sent again.
    pub fn overwrite_existing(mut self) -> Self {
        self.own_header = OwnHeader::Replace;
        self
    }

    /// On a 401, reload the token and send the request once more with the new one, if the
    /// request can be copied and the token changed.
    pub fn retry_unauthorized(mut self) -> Self {
        self.on_unauthorized = OnUnauthorized::Retry;
        self
    }

    /// The store the middleware reads.
    pub fn store(&self) -> &TokenStore {
        &self.store
    }

    /// Sets the header unless the request has its own and it is kept. Returns the
    /// generation of the token it set.
    fn authorize(&self, headers: &mut HeaderMap) -> Option<u64> {
        if self.own_header == OwnHeader::Keep && headers.contains_key(AUTHORIZATION) {
            return None;
        }
        let token = self.store.current();
        headers.insert(AUTHORIZATION, token.header_value().clone());
        Some(token.generation())
    }
}

#[async_trait::async_trait]
impl Middleware for BearerMiddleware {
    async fn handle(
        &self,
        mut req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> Result<Response> {
        let Some(sent) = self.authorize(req.headers_mut()) else {
            // Only our own token is ours to refresh.
            return next.run(req, extensions).await;
        };
        // The copy is made before the request goes: sending consumes it.
        let replay = match self.on_unauthorized {
            OnUnauthorized::Retry => req.try_clone(),
            OnUnauthorized::Reload => None,
        };
        let response = next.clone().run(req, extensions).await?;
        if response.status() != StatusCode::UNAUTHORIZED {
            return Ok(response);
        }
        let Some(mut replay) = replay else {
            // Starts the store's read and returns: the requests that follow get the new
            // token, this one gets its 401.
            self.store.reload_after_unauthorized(sent);
            return Ok(response);
        };
        if self.store.refresh_after_unauthorized(sent).await.is_none() {
            // The same token would be refused again.
            return Ok(response);
        }
        drain(http::Response::from(response).into_body()).await;
        // The newest token now: the drain may have outlasted another rotation.
        let token = self.store.current();
        replay
            .headers_mut()
            .insert(AUTHORIZATION, token.header_value().clone());
        self.store.count_retry(RetryOutcome::Sent);
        let response = next.run(replay, extensions).await?;
        self.store
            .count_retry(if response.status() == StatusCode::UNAUTHORIZED {
                RetryOutcome::Refused
            } else {
                RetryOutcome::Succeeded
            });
        Ok(response)
    }
}

/// Reads a refused response's `body` away as the tower retry does, then yields once so that
/// the connection's own task can put it back in the pool before the retry asks for one.
async fn drain<B: http_body::Body>(body: B) {
    let mut body = std::pin::pin!(body);
    let mut deadline = std::pin::pin!(tokio::time::sleep(DRAIN_TIME));
    let mut read = 0;
    std::future::poll_fn(|cx| drained(body.as_mut(), &mut read, deadline.as_mut(), cx)).await;
    tokio::task::yield_now().await;
}
