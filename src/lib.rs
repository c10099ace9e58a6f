//! Client-side [tower](https://docs.rs/tower) middleware that puts
//! `Authorization: Bearer <token>` on every request, from a token that another process
//! rotates (a projected service-account token, a kubeconfig `tokenFile`, a Vault agent
//! sink) or that a [`TokenSource`](source::TokenSource) fetches (an exec credential plugin,
//! the TokenRequest API, your own), and keeps every request working through the rotation.
//!
//! A watcher on the file's directory installs a new token as soon as it is written, and a
//! timer re-reads it as a backstop; a bad read never replaces the last good token. A
//! request that meets a 401 reloads the token for the requests that follow and, with
//! [`retry_unauthorized`](BearerLayer::retry_unauthorized), is itself sent once more with
//! the new token.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bearer_reload::{BearerLayer, TokenStore};
//! use bearer_reload::source::FileSource;
//! use bytes::Bytes;
//! use http::Request;
//! use http_body_util::Empty;
//! use hyper_rustls::HttpsConnectorBuilder;
//! use hyper_util::client::legacy::Client;
//! use hyper_util::rt::TokioExecutor;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! let path = "/var/run/secrets/kubernetes.io/serviceaccount/token";
//! let store = TokenStore::builder(FileSource::new(path)).load().await?;
//!
//! // Any tower HTTP client; here hyper-util's, over TLS (hyper-rustls) and https:// alone.
//! let tls = HttpsConnectorBuilder::new().with_native_roots()?.https_only().enable_http1();
//! let http = Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(tls.build());
//! let client = ServiceBuilder::new()
//!     .layer(BearerLayer::new(store.clone()).retry_unauthorized())
//!     .service(http);
//!
//! let request = Request::get("https://api.internal/healthz").body(Empty::new())?;
//! let response = client.oneshot(request).await?;
//! println!("{} with token {}", response.status(), store.current().fingerprint());
//! println!("{:?}", store.status()); // generation, reads, failures, 401s, retries
//! # Ok(()) }
//! ```
//!
//! For kube-rs, [`kube::Credentials`] builds the whole client (feature `kube`).
//!
//! # How it fits together
//!
//! **source → token → store → layer → request**: a [`source`] fetches the bytes, [`token`]
//! validates them, a [`TokenStore`] (from [`TokenStore::builder`]) holds the current
//! [`Token`] and keeps it fresh, and a [`BearerLayer`] puts it on each request;
//! [`classify`] says what counts as unauthorized, [`body`] makes bodies replayable.
//!
//! # Platforms
//!
//! Linux, macOS and Windows, each with its native file watcher, and one code path; the one
//! difference is how an [`ExecSource`](source::ExecSource) plugin that times out is killed.
//!
//! # Feature flags
//!
//! The core needs none of them.
//!
//! | feature | module | what it adds |
//! |---|---|---|
//! | `kube` | [`kube`] | a `kube::Client` built with the layer, for a token file or an exec plugin (kube 5, with the TLS your own kube dependency turns on); [`TokenRequestSource`]; `ExecSource::try_from(&ExecConfig)` |
//! | `gzip` | [`kube`] | gzip decompression of responses in the kube client built on rotating TLS credentials, unless the config's `disable_compression`; turns on `kube`, and kube's own `gzip` for kube's client |
//! | `reqwest` | [`reqwest`] | [`BearerMiddleware`]: the same store and 401 handling for reqwest-middleware clients (reqwest 0.13; no TLS backend chosen) |
//! | `tls` | [`tls`] | client certificates ([`tls::IdentityStore`]) and CA bundles ([`tls::RootStore`]) that rotate, a rustls resolver and verifier over them, and [`tls::HttpsClient`], which retires its connections on rotation; certificate users in [`kube::Credentials`] |
//! | `tonic` | [`tonic`] | [`tonic::TlsChannel`]: a tonic transport whose connections present the current client certificate and trust the current CA bundle, made anew on rotation (turns on `tls`) |
//! | `oauth2` | [`oauth2`] | OAuth 2.0 service tokens: the client-credentials grant and token exchange as sources (turns on `tls`) |
//! | `metrics` | [`metrics`] | what every store reports through the `metrics` facade, and alert rules |
//! | `testing` | [`testing`] | a kubelet-faithful token writer for your own tests; [`StoreBuilder::simulated_clock`] |
//! | `ring` (default), `aws-lc-rs` | | rustls's crypto provider for `tls`, unless the application installed a process default ([TLS providers]) |
//!
//! # Where the layer goes
//!
//! Outermost → innermost:
//!
//! ```text
//! a general retry (429/503/504) ─▶ BearerLayer (and its 401 retry) ─▶ FollowRedirect ─▶ HTTP client
//! ```
//!
//! - **Outside tower-http's `FollowRedirect`**, whose policy strips the header on
//!   cross-origin hops: inside it, the layer would put the token back on every hop.
//! - **Inside a general retry layer** (such as kube's retry of 429/503/504), so that each
//!   of its attempts carries the token current at that moment.
//! - **Not with another layer that sets `Authorization`** (kube's own auth layer,
//!   tower-http's `AddAuthorization`): one inside this layer overwrites its token, and a
//!   header set outside it is kept (unless
//!   [`overwrite_existing`](BearerLayer::overwrite_existing)), its 401s reloading nothing.
//!
//! # When a request is sent again
//!
//! Once at most, whatever the stack; only when its body is replayable (see [`body`]), and
//! only when the server cannot have acted on it (RFC 9110 §9.2.2): it was never written;
//! or the credential was refused (a 401, gRPC `UNAUTHENTICATED`, a certificate alert, or
//! our verifier refused the server's); or its method is idempotent. So a POST whose
//! connection closed without an answer goes back to the caller as the error, while the
//! credential is still reloaded for the requests that follow.
//!
// Feature-gated items exist only with their feature: without it, their links point at the
// feature table, so that no build of these docs shows a broken link.
#![cfg_attr(
    feature = "kube",
    doc = "[`TokenRequestSource`]: source::TokenRequestSource"
)]
#![cfg_attr(
    not(feature = "kube"),
    doc = "[`kube`]: #feature-flags\n[`kube::Credentials`]: #feature-flags\n[`TokenRequestSource`]: #feature-flags"
)]
#![cfg_attr(
    feature = "reqwest",
    doc = "[`BearerMiddleware`]: reqwest::BearerMiddleware"
)]
#![cfg_attr(
    not(feature = "reqwest"),
    doc = "[`reqwest`]: #feature-flags\n[`BearerMiddleware`]: #feature-flags"
)]
#![cfg_attr(not(feature = "metrics"), doc = "[`metrics`]: #feature-flags")]
#![cfg_attr(
    not(feature = "tls"),
    doc = "[`tls`]: #feature-flags\n[`tls::IdentityStore`]: #feature-flags\n[`tls::RootStore`]: #feature-flags\n[`tls::HttpsClient`]: #feature-flags\n[TLS providers]: #feature-flags"
)]
#![cfg_attr(feature = "tls", doc = "[TLS providers]: tls#tls-providers")]
#![cfg_attr(not(feature = "oauth2"), doc = "[`oauth2`]: #feature-flags")]
#![cfg_attr(
    not(feature = "tonic"),
    doc = "[`tonic`]: #feature-flags\n[`tonic::TlsChannel`]: #feature-flags"
)]
#![cfg_attr(
    not(feature = "testing"),
    doc = "[`testing`]: #feature-flags\n[`StoreBuilder::simulated_clock`]: #feature-flags"
)]
#![deny(missing_docs, unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod body;
mod builder;
pub mod classify;
mod clock;
#[cfg(feature = "kube")]
pub mod kube;
pub mod layer;
#[cfg(feature = "metrics")]
pub mod metrics;
// Without the feature, the stores' calls to it do nothing.
#[cfg(not(feature = "metrics"))]
mod metrics;
#[cfg(feature = "oauth2")]
pub mod oauth2;
mod refresh;
mod refusal;
#[cfg(feature = "reqwest")]
pub mod reqwest;
pub mod source;
pub mod store;
mod sync;
#[cfg(test)]
mod test_support;
#[cfg(feature = "testing")]
pub mod testing;
#[cfg(feature = "tls")]
pub mod tls;
pub mod token;
#[cfg(feature = "tonic")]
pub mod tonic;

pub use builder::StoreBuilder;
pub use layer::{BearerLayer, BearerService};
pub use store::{LoadError, Status, TokenStore, WatchState};
pub use token::Token;

// The README's examples, compiled and run as doctests.
#[cfg(all(doctest, feature = "kube", feature = "reqwest"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
