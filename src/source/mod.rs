//! Where token bytes come from: the [`TokenSource`] trait and its implementations.
//!
//! A source answers one question, "what is the token now?" ([`Fetched`]); the
//! [`TokenStore`](crate::TokenStore) built on it does the rest. Provided here:
//! - [`FileSource`]: a token file;
//! - [`FnSource`]: an async closure;
//! - [`ExecSource`]: a Kubernetes exec credential plugin (`aws eks get-token`, ...);
//! - [`TokenRequestSource`] (feature `kube`): the Kubernetes TokenRequest API;
//! - `oauth2::ClientCredentials` and `oauth2::TokenExchange` (feature `oauth2`).
//!
//! Implement [`TokenSource`] for anything else (a secret manager's client, a cloud
//! metadata server):
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), bearer_reload::LoadError> {
//! use std::time::{Duration, SystemTime};
//! use bearer_reload::TokenStore;
//! use bearer_reload::source::{FetchContext, Fetched, TokenSource};
//!
//! /// A client-credentials flow, here simulated: each token lives for five minutes.
//! struct ClientCredentials;
//!
//! impl TokenSource for ClientCredentials {
//!     type Error = std::io::Error;
//!
//!     async fn fetch(&self, _cx: FetchContext) -> Result<Fetched, Self::Error> {
//!         let expires = SystemTime::now() + Duration::from_secs(300);
//!         Ok(Fetched::new("access-token-from-the-idp").with_expires_at(expires))
//!     }
//!
//!     fn describe(&self) -> String {
//!         "client-credentials https://idp.example".into()
//!     }
//! }
//!
//! let store = TokenStore::builder(ClientCredentials).load().await?;
//! assert_eq!(store.current().header_value(), "Bearer access-token-from-the-idp");
//! assert!(store.status().expires_at.is_some());
//! # Ok(()) }
//! ```
#![cfg_attr(
    not(feature = "kube"),
    doc = "[`TokenRequestSource`]: crate#feature-flags"
)]

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::time::{Duration, SystemTime};

use zeroize::Zeroizing;

use crate::clock::Clock;

mod exec;
mod file;
mod func;
#[cfg(feature = "kube")]
mod token_request;

#[cfg(fuzzing)]
#[doc(hidden)]
pub use exec::fuzz_parse_credential;
pub use exec::{ExecError, ExecSource};
pub use file::{FileError, FileSource};
pub use func::FnSource;
#[cfg(all(fuzzing, feature = "kube"))]
#[doc(hidden)]
pub use token_request::fuzz_parse_response;
#[cfg(feature = "kube")]
pub use token_request::{TokenRequestError, TokenRequestSource};

pub(crate) const FILE_REFRESH_INTERVAL: Duration = Duration::from_secs(60);

pub(crate) const DEFAULT_FETCH_TIMEOUT: Duration = Duration::from_secs(10);

pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What a source returned: the token's bytes (`Debug` shows only their length; wiped when
/// dropped), and what the source knows about its dates.
#[derive(Clone)]
pub struct Fetched {
    bytes: Zeroizing<Vec<u8>>,
    expires_at: Option<SystemTime>,
    refresh_at: Option<SystemTime>,
}

impl Fetched {
    /// The token's bytes, which the store trims and validates.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self {
            bytes: Zeroizing::new(bytes.into()),
            expires_at: None,
            refresh_at: None,
        }
    }

    /// Says when the token stops being valid (an `ExecCredential`'s
    /// `expirationTimestamp`, an OAuth2 `expires_in`). Without it the store falls back on a
    /// JWT's `exp`.
    ///
    /// Unless [`with_refresh_at`](Self::with_refresh_at) says otherwise, the store's timer
    /// fetches again before this moment by a tenth of the token's lifetime (at least a
    /// minute, at most half of it), less a per-token jitter so that a fleet of clients does
    /// not refresh in step.
    pub fn with_expires_at(mut self, at: SystemTime) -> Self {
        self.expires_at = Some(at);
        self
    }

    /// Says when the source wants to be asked again, overriding the store's rule from the
    /// expiry.
    pub fn with_refresh_at(mut self, at: SystemTime) -> Self {
        self.refresh_at = Some(at);
        self
    }

    pub(crate) fn bytes(&self) -> &[u8] {
        &self.bytes
    }

    pub(crate) fn expires_at(&self) -> Option<SystemTime> {
        self.expires_at
    }

    pub(crate) fn refresh_at(&self) -> Option<SystemTime> {
        self.refresh_at
    }
}

impl fmt::Debug for Fetched {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fetched")
            .field("len", &self.bytes.len())
            .field("expires_at", &self.expires_at.map(crate::clock::Rfc3339))
            .field("refresh_at", &self.refresh_at.map(crate::clock::Rfc3339))
            .finish()
    }
}

/// Why the store asks a source for the token.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum Trigger {
    /// The first fetch, when the store is built.
    Load,
    /// A call to [`TokenStore::reload`](crate::TokenStore::reload).
    Call,
    /// The timer: the period, or a moment the token's dates tell about.
    Timer,
    /// The watcher saw the file change (or the store it follows read).
    Watch,
    /// A server refused the current token.
    Unauthorized,
}

impl Trigger {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Trigger::Load => "load",
            Trigger::Call => "call",
            Trigger::Timer => "timer",
            Trigger::Watch => "watch",
            Trigger::Unauthorized => "unauthorized",
        }
    }
}

/// What the store tells a source about one fetch.
///
/// `FetchContext::default()` is for a fetch asked for by hand (a test): the default size
/// cap, the system clock.
#[derive(Debug, Clone, Copy)]
pub struct FetchContext {
    trigger: Trigger,
    max_size: usize,
    clock: Clock,
}

impl Default for FetchContext {
    fn default() -> Self {
        Self::new(Trigger::Call, crate::token::DEFAULT_MAX_SIZE)
    }
}

impl FetchContext {
    pub(crate) fn new(trigger: Trigger, max_size: usize) -> Self {
        Self {
            trigger,
            max_size,
            clock: Clock::System,
        }
    }

    pub(crate) fn on(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn trigger(&self) -> Trigger {
        self.trigger
    }

    /// Whether a server has just refused the current token: a source must not answer from
    /// a cache of its own.
    pub fn refused(&self) -> bool {
        self.trigger == Trigger::Unauthorized
    }

    /// The largest token the store accepts, in bytes: a source that reads a stream can stop
    /// one byte past it.
    pub fn max_size(&self) -> usize {
        self.max_size
    }

    /// The wall-clock time now, as the store reads it (a test's simulated clock too): for
    /// a source that works out dates from the present.
    pub fn now(&self) -> SystemTime {
        self.clock.now()
    }
}

/// Where a token comes from: see the [module docs](self) for an example.
///
/// The store never runs `fetch` twice at once; drops a fetch that outlasts its
/// [`fetch_timeout`](crate::StoreBuilder::fetch_timeout) (a child process spawned with
/// `kill_on_drop` dies with it); and keeps the last good token through failures, reporting
/// each after the source's [`describe`] and retrying with a backoff.
///
/// `Error`'s message must name the problem, never the token.
///
/// [`describe`]: TokenSource::describe
pub trait TokenSource: Send + Sync + 'static {
    /// The error of a failed fetch.
    type Error: Into<BoxError>;

    /// Fetches the current token.
    fn fetch(&self, cx: FetchContext) -> impl Future<Output = Result<Fetched, Self::Error>> + Send;

    /// Names the source in logs, errors and [`Status::source`](crate::Status::source).
    /// Never the token.
    fn describe(&self) -> String;

    /// The files this source reads, if any: the store's watcher watches each (and the
    /// symlinks leading to it).
    fn paths(&self) -> &[PathBuf] {
        &[]
    }

    /// How often the store fetches again when nothing else asks, unless the builder says
    /// otherwise. The default, `None`, leaves it to the token's dates (see
    /// [`Fetched::with_expires_at`]) and to refusals. A file says 60 s: a cheap read, the
    /// backstop for a missed event.
    fn default_refresh_interval(&self) -> Option<Duration> {
        None
    }

    /// How long one fetch may take before the store gives up on it, unless the builder
    /// says otherwise ([`fetch_timeout`](crate::StoreBuilder::fetch_timeout)). The
    /// default, 10 s, suits a file read or a call to a nearby service.
    fn default_fetch_timeout(&self) -> Duration {
        DEFAULT_FETCH_TIMEOUT
    }
}

pub(crate) type BoxFetch<'a> = Pin<Box<dyn Future<Output = Result<Fetched, BoxError>> + Send + 'a>>;

/// [`TokenSource`] with its types erased.
pub(crate) trait DynSource: Send + Sync + 'static {
    fn fetch_dyn(&self, cx: FetchContext) -> BoxFetch<'_>;
}

impl<S: TokenSource> DynSource for S {
    fn fetch_dyn(&self, cx: FetchContext) -> BoxFetch<'_> {
        let fetch = self.fetch(cx);
        Box::pin(async move { fetch.await.map_err(Into::into) })
    }
}

#[cfg(test)]
mod tests;
