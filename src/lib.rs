//! # bearer-reload
//!
//! Client-side [tower](https://docs.rs/tower) middleware that puts
//! `Authorization: Bearer <token>` on every request, from a token that another process
//! rotates (a projected service-account token, a kubeconfig `tokenFile`, a Vault agent
//! sink) or that a [`TokenSource`](source::TokenSource) of your own fetches, and keeps every
//! request working through the rotation.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::{BearerLayer, RetryUnauthorized, TokenFile};
//!
//! let store = TokenFile::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
//!     .load()
//!     .await?;
//! let layer = BearerLayer::new(store).retry_unauthorized(RetryUnauthorized::new());
//! // ServiceBuilder::new().layer(layer).service(client) ...
//! # let _ = layer; Ok(()) }
//! ```
//!
//! # How it fits together
//!
//! Data flows one way: **source → token → store → layer → request**.
//!
//! - [`source`]: where the bytes come from. The [`TokenSource`](source::TokenSource) trait,
//!   and its implementations for a file ([`FileSource`](source::FileSource)), a Kubernetes
//!   exec credential plugin ([`ExecSource`](source::ExecSource)), an async closure
//!   ([`FnSource`](source::FnSource)) and, with feature `kube`, the TokenRequest API
//!   (`TokenRequestSource`: audience-bound service-account tokens).
//! - [`token`]: bytes → a validated, trimmed, sensitive header value ([`Token`]), and what
//!   the token says about itself ([`TokenKind`]: a JWT's claims, a bootstrap token's id).
//! - [`store`]: the current token behind an `ArcSwap` ([`TokenStore`]); single-flight
//!   reads that keep the last good token; [`Status`]; a weak [`Handle`](store::Handle) for
//!   the background work.
//! - The timer and the directory watcher keep a store fresh; [`StoreBuilder`] (and its
//!   forms [`TokenFile`], [`TokenLoader`], [`Options`]) builds the store and starts them.
//! - [`layer`]: the tower middleware ([`BearerLayer`]), with [`RetryUnauthorized`];
//!   [`classify`] says what counts as unauthorized, [`body`] makes request bodies
//!   replayable.
//! - `kube` (feature `kube`): a `kube::Client` built with the layer, for a token file or an
//!   exec plugin. `reqwest` (feature `reqwest`): the same for reqwest-middleware clients.
//!   `metrics` (feature `metrics`): what every store reports through the `metrics` facade,
//!   and alert rules. `testing` (feature `testing`): kubelet-faithful token writers for
//!   your own tests.
//! - tonic: the layer over a `tonic::transport::Channel`, with
//!   [`RetryUnauthorized::grpc()`] and [`ReplayLayer`](body::ReplayLayer) (see the README).
//!
//! # Where the layer goes
//!
//! - **Outside tower-http's `FollowRedirect`.** The header is then set once, on the first
//!   hop, and `FollowRedirect`'s policy strips it on cross-origin hops, so a redirect to
//!   another origin never carries the token. Inside it, the layer would put the token back
//!   on every hop.
//! - **Inside a general retry layer** (such as kube's retry of 429/503/504), so that each
//!   of its attempts carries the token current at that moment; the 401 retry here is
//!   separate and happens at most once per attempt.
//! - **Outside any layer that sets `Authorization` itself** (kube's own auth layer, for
//!   one): the layer closest to the wire wins. The `kube` module takes kube's token out of
//!   its config for this reason.
#![deny(missing_docs, unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod body;
mod builder;
pub mod classify;
mod clock;
#[cfg(feature = "kube")]
#[cfg_attr(docsrs, doc(cfg(feature = "kube")))]
pub mod kube;
pub mod layer;
#[cfg(feature = "metrics")]
#[cfg_attr(docsrs, doc(cfg(feature = "metrics")))]
pub mod metrics;
mod refresh;
#[cfg(feature = "reqwest")]
#[cfg_attr(docsrs, doc(cfg(feature = "reqwest")))]
pub mod reqwest;
pub mod source;
pub mod store;
mod sync;
#[cfg(test)]
mod test_support;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod testing;
pub mod token;

pub use builder::{NoSource, Options, Refresher, StoreBuilder, TokenFile, TokenLoader};
pub use layer::{BearerLayer, BearerService, RetryUnauthorized};
pub use store::{LoadError, Reloaded, Status, TokenStore, WatchState};
pub use token::{Claims, Fingerprint, Freshness, Token, TokenError, TokenKind};
