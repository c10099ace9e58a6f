//! OAuth 2.0 service tokens as a token source (feature `oauth2`): the client-credentials
//! grant ([`ClientCredentials`], RFC 6749 §4.4) and token exchange ([`TokenExchange`],
//! RFC 8693), over the `tls` feature's [`HttpsClient`](crate::tls::HttpsClient).
//!
//! A source here makes one token request per fetch and caches nothing: the
//! [`TokenStore`](crate::TokenStore) built on it is the cache, and gives these tokens
//! what it gives every token:
//!
//! - **refresh before expiry**: `expires_in` becomes the token's expiry, and the store's
//!   timer fetches a new one before it, with a margin and a jitter, in the background;
//! - **one request for many callers**: however many requests, timers and 401s ask at
//!   once, one token request is in flight (single flight);
//! - **keep-last-good**: a failed request (`invalid_client`, a 5xx, a refused connection)
//!   never replaces a token that still works; the store retries with a backoff and shows
//!   the [`Error`] in its [`status`](crate::TokenStore::status);
//! - **401s**: a token the resource server refuses before its expiry (revoked at the
//!   server, a signing key rolled) is replaced at once, and with
//!   [`retry_unauthorized`](crate::BearerLayer::retry_unauthorized) the refused request
//!   is sent again with the new one. A cache that only looks at `expires_in` (what the
//!   `oauth2` and `yup-oauth2` crates leave you with) goes on sending the revoked token
//!   until it expires.
//!
//! The client authenticates with a secret (HTTP Basic or in the form) or with a JWT
//! assertion read from a file at every fetch, such as a projected service-account token
//! ([`ClientAuth`]). Secrets, assertions, subject tokens and access tokens never appear
//! in an error, a log line or a `Debug`, and the `Authorization` header built for
//! `client_secret_basic` is marked sensitive.
//!
//! The token endpoint must be `https://`, and verified with a CA bundle you give
//! (a [`RootStore`](crate::tls::RootStore), an argument of each grant's `new`): the
//! crate carries no system trust store. For a public
//! endpoint, load the system's bundle (`/etc/ssl/certs/ca-certificates.crt` on Debian
//! and Ubuntu, `/etc/pki/tls/certs/ca-bundle.crt` on Fedora and RHEL) into a
//! [`RootStore`](crate::tls::RootStore).
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bearer_reload::oauth2::{ClientAuth, ClientCredentials};
//! use bearer_reload::source::FileSource;
//! use bearer_reload::tls::{HttpsClient, RootStore};
//! use bearer_reload::{BearerLayer, TokenStore};
//! use bytes::Bytes;
//! use http_body_util::Empty;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let roots = RootStore::builder(FileSource::new("/etc/ssl/certs/ca-certificates.crt"))
//!     .load()
//!     .await?;
//! // A Kubernetes workload federated with the IdP: its projected token is the assertion.
//! let auth = ClientAuth::client_assertion_file("/var/run/secrets/tokens/idp");
//! let endpoint = "https://idp.example/token".parse()?;
//! let source = ClientCredentials::new(endpoint, "reports", auth, roots.clone())
//!     .scope("metrics.read");
//! let store = TokenStore::builder(source).load().await?;
//!
//! // The resource server over TLS too, verified with the same bundle.
//! let https = HttpsClient::<Empty<Bytes>>::new(roots);
//! let client = ServiceBuilder::new()
//!     .layer(BearerLayer::new(store.clone()).retry_unauthorized())
//!     .service(https);
//! let request = http::Request::get("https://metrics.internal/api").body(Empty::new())?;
//! let response = client.oneshot(request).await?;
//! println!("{} ({:?})", response.status(), store.status().expires_at);
//! # Ok(()) }
//! ```

use std::time::Duration;

mod auth;
mod client_credentials;
mod error;
mod exchange;
mod request;

pub use auth::ClientAuth;
pub use client_credentials::ClientCredentials;
pub use error::Error;
pub use exchange::TokenExchange;

/// The token endpoint's answer read as a fetch reads it, for the fuzz targets
/// (`--cfg fuzzing`, which cargo-fuzz sets; never in a normal build): the token with its
/// expiry counted from `sent_at`, or the error.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_parse_response(
    status: u16,
    body: &[u8],
    sent_at: std::time::SystemTime,
) -> Result<crate::source::Fetched, Error> {
    let status = http::StatusCode::from_u16(status).unwrap_or(http::StatusCode::OK);
    request::parse(status, body)?.fetched(sent_at)
}

/// How long a token request may take by default.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests;
