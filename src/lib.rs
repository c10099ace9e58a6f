//! # bearer-reload
//!
//! Client-side [tower] middleware that puts `Authorization: Bearer <token>` on every
//! request, from a token file that another process rotates, and keeps every request working
//! through the rotation.
//!
//! Flow, one direction: **file → token → store → layer → request**.
//!
//! - [`source`]: where bytes come from ([`TokenFile`], [`TokenLoader`]).
//! - [`token`]: bytes → a validated, trimmed, sensitive header value ([`Token`]), and what
//!   the token says about itself ([`TokenKind`]: a JWT's claims, a bootstrap token's id).
//! - [`store`]: the current token behind an `ArcSwap`, single-flight reloads that keep the
//!   last good token ([`TokenStore`]), refreshed in the background by a timer and a
//!   directory watcher.
//! - [`layer`]: the tower middleware ([`BearerLayer`]).
//! - [`retry`]: a 401 reloads the token at once and, opt-in, retries the request once.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::{BearerLayer, TokenFile};
//!
//! let store = TokenFile::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
//!     .load()
//!     .await?;
//! let layer = BearerLayer::new(store);
//! // ServiceBuilder::new().layer(layer).service(client) ...
//! # let _ = layer; Ok(()) }
//! ```
#![deny(missing_docs, unsafe_code)]

mod clock;
#[cfg(feature = "kube")]
pub mod kube;
pub mod layer;
mod refresh;
pub mod retry;
pub mod source;
pub mod store;
#[cfg(feature = "testing")]
pub mod testing;
pub mod token;

pub use layer::{BearerLayer, BearerService};
pub use retry::RetryUnauthorized;
pub use source::{LoadError, TokenFile, TokenLoader};
pub use store::{Reloaded, Status, TokenStore, WatchState};
pub use token::{Claims, Fingerprint, Freshness, Token, TokenError, TokenKind};
