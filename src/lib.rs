//! Client-side [tower](https://docs.rs/tower) middleware that puts
//! `Authorization: Bearer <token>` on every request, from a token that another process
//! rotates (a projected service-account token, a kubeconfig `tokenFile`, a Vault agent
//! sink) or that a [`TokenSource`](source::TokenSource) fetches (an exec credential plugin,
//! the TokenRequest API, your own), and keeps every request working through the rotation.
//!
//! When the file changes, a watcher on its directory has the new token installed within
//! milliseconds, and a timer re-reads it as a backstop; a bad read (an empty, half-written
//! or unreadable file) never replaces the last good token. A request that still meets a
//! 401 reloads the token at once for the requests that follow and, with
//! [`retry_unauthorized`](BearerLayer::retry_unauthorized), is itself sent once more with
//! the new token. The request path costs one atomic load, the clone of a prebuilt,
//! sensitive header value, and a reference to the store for the response.
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
//! // Reads the token once (an error names the path and the problem), then follows it.
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
//! Data flows one way: **source → token → store → layer → request**.
//!
//! - [`source`]: where the bytes come from. The [`TokenSource`](source::TokenSource) trait,
//!   and its implementations for a file ([`FileSource`](source::FileSource)), a Kubernetes
//!   exec credential plugin ([`ExecSource`](source::ExecSource)), an async closure
//!   ([`FnSource`](source::FnSource)) and, with feature `kube`, the TokenRequest API
//!   ([`TokenRequestSource`]: audience-bound service-account tokens).
//! - [`token`]: bytes → a validated, trimmed, sensitive header value ([`Token`]), and what
//!   the token says about itself (a JWT's subject and dates, a bootstrap token's id).
//! - [`store`]: the current token behind an atomic pointer ([`TokenStore`]); single-flight
//!   reads that keep the last good token; [`Status`]. [`TokenStore::builder`] builds one on
//!   any source ([`StoreBuilder`]) and starts what keeps it fresh: the timer, and for a
//!   file the directory watcher. A store is shared by cloning it, and only so.
//! - [`layer`]: the tower middleware ([`BearerLayer`]), which reloads the token on a 401
//!   and, with [`retry_unauthorized`](BearerLayer::retry_unauthorized), sends the request
//!   again; [`classify`] says what counts as unauthorized (HTTP 401, gRPC
//!   `UNAUTHENTICATED`), [`body`] makes request bodies replayable (and shows the tonic
//!   stack).
//!
//! # Platforms
//!
//! Linux, macOS and Windows, each with its native file watcher (inotify, FSEvents,
//! `ReadDirectoryChangesW`), and one code path: the watcher's thread only routes events,
//! and every file is read on tokio's blocking pool under the store's time limit. The one
//! difference: an [`ExecSource`](source::ExecSource) plugin that times out is killed with
//! its whole process group on Unix; on Windows only the plugin process itself is killed,
//! and what it started may keep running.
//!
//! # Feature flags
//!
//! The core needs none of them.
//!
//! | feature | module | what it adds |
//! |---|---|---|
//! | `kube` | [`kube`] | a `kube::Client` built with the layer, for a token file or an exec plugin (kube 5, with the TLS your own kube dependency turns on); [`TokenRequestSource`]; `ExecSource::try_from(&ExecConfig)` |
//! | `reqwest` | [`reqwest`] | [`BearerMiddleware`]: the same store and 401 handling for reqwest-middleware clients (reqwest 0.13; no TLS backend chosen) |
//! | `tls` | [`tls`] | client certificates ([`tls::IdentityStore`]) and CA bundles ([`tls::RootStore`]) that rotate, a rustls resolver and verifier over them, and [`tls::HttpsClient`], which retires its connections on rotation; certificate users in [`kube::Credentials`] |
//! | `tonic` | [`tonic`] | [`tonic::TlsChannel`]: a tonic transport whose connections present the current client certificate and trust the current CA bundle, made anew on rotation (turns on `tls`) |
//! | `oauth2` | [`oauth2`] | OAuth 2.0 service tokens: the client-credentials grant and token exchange as sources |
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
//! - **Outside tower-http's `FollowRedirect`.** The header is then set once, on the first
//!   hop, and `FollowRedirect`'s policy strips it on cross-origin hops, so a redirect to
//!   another origin never carries the token. Inside it, the layer would put the token back
//!   on every hop.
//! - **Inside a general retry layer** (such as kube's retry of 429/503/504), so that each
//!   of its attempts carries the token current at that moment; the 401 retry here is
//!   separate and happens at most once per attempt.
//! - **Not with another layer that sets `Authorization`** (kube's own auth layer,
//!   tower-http's `AddAuthorization`): one inside this layer overwrites its token, and a
//!   header set outside it is kept (unless
//!   [`overwrite_existing`](BearerLayer::overwrite_existing)), so that request's 401s
//!   reload nothing. Give the credentials to one layer only: the [`kube`] module takes
//!   kube's token out of its config for this reason.
//!
//! # When a request is sent again
//!
//! After a failure, a request is sent again (once, and only when its body is replayable:
//! see [`body`]) only when the server cannot have acted on it (RFC 9110 §9.2.2):
//!
//! - it was never written;
//! - or the server refused the credential before acting: a 401 or gRPC `UNAUTHENTICATED`
//!   answer, a certificate alert; or our own verifier refused the server's certificate;
//! - or its method is idempotent: GET, HEAD, OPTIONS, TRACE, PUT, DELETE.
//!
//! A refused request is sent again once, whatever the stack: under the layer's retry, the
//! `tls` feature's HTTPS clients reload their certificate on a 401 and leave the second
//! sending to the layer, which sends it with every credential newer by then.
//!
//! The layer's retry and the reqwest middleware resend after a 401 only. The `tls`
//! feature's HTTPS client also meets connections that close without an answer, which a
//! refused certificate and a crashed server both give: there a POST or PATCH goes back
//! to the caller as the error, once, while the credential is still reloaded for the
//! requests that follow.
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

// The README's examples, compiled and run as doctests, so that they cannot rot.
#[cfg(all(doctest, feature = "kube", feature = "reqwest"))]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
