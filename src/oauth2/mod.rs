//! OAuth 2.0 service tokens as token sources (feature `oauth2`): the client-credentials
//! grant ([`ClientCredentials`], RFC 6749 §4.4) and token exchange ([`TokenExchange`], RFC
//! 8693), over the `tls` feature's [`HttpsClient`](crate::tls::HttpsClient).
//!
//! A source makes one token request per fetch; the [`TokenStore`](crate::TokenStore) built
//! on it is the cache, and with
//! [`retry_unauthorized`](crate::BearerLayer::retry_unauthorized) replaces at once a token
//! that a resource server refuses before its expiry.
//!
//! The client authenticates as [`ClientAuth`] says. The token endpoint must be `https://`,
//! verified with a [`RootStore`](crate::tls::RootStore) you give: the crate carries no
//! system trust store (load `/etc/ssl/certs/ca-certificates.crt` for a public endpoint).
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

/// Reads a token endpoint's answer as a fetch does, for the fuzz targets (`--cfg fuzzing`).
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

/// A token request's default time limit: a remote server, a TLS handshake, a cold start.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

#[cfg(test)]
mod tests;
