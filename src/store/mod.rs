//! [`TokenStore`]: the current token, shared by every request, and how it is replaced.
//!
//! The store holds the current [`Token`] in an [`ArcSwap`] and a generation counter that
//! goes up by one each time a token with a different secret is installed. Reading it is
//! lock-free. A reload reads the source once for all concurrent callers (single flight, in
//! a task the store owns: a caller that goes away does not cancel it), installs the result
//! only when it is valid, and otherwise keeps the last good token and reports the error.
//!
//! The store spawns only its reads. The timer and the watcher that keep it fresh are
//! started by the [builder](crate::StoreBuilder) and hold a weak [`Handle`]: they stop
//! when the last `TokenStore` clone is dropped.
//!
//! [`ArcSwap`]: https://docs.rs/arc-swap/1/arc_swap/type.ArcSwap.html
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::TokenFile;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("token");
//! std::fs::write(&path, "first\n")?;
//! let store = TokenFile::new(&path).watch(false).refresh_interval(None).load().await?;
//! assert_eq!(store.generation(), 1);
//!
//! std::fs::write(&path, "second\n")?;
//! store.reload().await?;
//! assert_eq!(store.generation(), 2);
//! assert_eq!(store.current().header_value(), "Bearer second");
//!
//! // A bad file is reported and the last good token stays.
//! std::fs::write(&path, "")?;
//! assert!(store.reload().await.is_err());
//! assert_eq!(store.current().header_value(), "Bearer second");
//! assert!(store.status().last_error.is_some());
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::source::{DynSource, FetchContext, Trigger};
use crate::sync::lock;
use crate::token::Token;

mod error;
mod expiry;
mod flight;
mod handle;
mod install;
mod live;
mod status;
mod telemetry;
mod unauthorized;

pub use error::LoadError;
pub(crate) use flight::{OnFailure, Recency};
pub use handle::Handle;
pub(crate) use status::RetryOutcome;
pub use status::{Status, UnauthorizedStats, WatchState};

use expiry::ExpiryWarnings;
use flight::{Done, Flight, Ticket};
use install::token_of;
pub(crate) use live::StoreId;
#[cfg(feature = "metrics")]
pub(crate) use live::live;
use status::Counters;
use telemetry::Telemetry;
use unauthorized::UnauthorizedRead;

/// What the store needs to know of its options.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The `source` label of the store's metrics; its source's description when `None`.
    pub(crate) name: Option<String>,
    pub(crate) max_size: usize,
    pub(crate) read_timeout: Duration,
    pub(crate) unauthorized_interval: Duration,
    pub(crate) clock: Clock,
}

/// What a successful reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// The source holds the same token as before; the generation is unchanged.
    Unchanged {
        /// The current generation.
        generation: u64,
    },
    /// A new token was installed.
    Rotated {
        /// The generation it replaced.
        from: u64,
        /// The new generation.
        to: u64,
    },
}

impl Reloaded {
    /// The generation current after the reload.
    pub fn generation(&self) -> u64 {
        match *self {
            Reloaded::Unchanged { generation } => generation,
            Reloaded::Rotated { to, .. } => to,
        }
    }
}

pub(crate) struct Shared {
    /// This store's number in [`LIVE`].
    id: StoreId,
    current: ArcSwap<Token>,
    /// Mirrors `current.generation`, written after it: one atomic load tells a cached
    /// header whether it is still current.
    generation: AtomicU64,
    source: Arc<dyn DynSource>,
    origin: Arc<str>,
    config: Config,
    /// Where the store's reads run: the runtime it was built in.
    runtime: tokio::runtime::Handle,
    flight: Mutex<Flight>,
    done: watch::Sender<Done>,
    generations: watch::Sender<u64>,
    counters: Counters,
    last_error: Mutex<Option<LoadError>>,
    last_unauthorized_read: Mutex<Option<UnauthorizedRead>>,
    watch_state: Mutex<WatchState>,
    expiry: ExpiryWarnings,
    telemetry: Telemetry,
}

impl Drop for Shared {
    fn drop(&mut self) {
        self.flight
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .abort();
        self.id.forget();
    }
}

/// The current token of one source, shared by every request: cheap to clone, lock-free to
/// read.
///
/// Built by [`StoreBuilder::load`](crate::StoreBuilder::load) (through
/// [`TokenFile`](crate::TokenFile), [`TokenLoader`](crate::TokenLoader) or
/// [`StoreBuilder::from_source`](crate::StoreBuilder::from_source)); every clone is the same
/// store. Background refreshers (timer, watcher) hold only a weak [`Handle`]: they stop
/// when the last `TokenStore` clone, including those inside layers, is dropped.
#[derive(Clone)]
pub struct TokenStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenStore")
            .field("source", &self.shared.origin)
            .field("current", &*self.shared.current.load())
            .finish_non_exhaustive()
    }
}

impl TokenStore {
    /// Fetches the first token from `source` and builds the store on it. Must be called
    /// within a tokio runtime with its time driver: the store's reads run there.
    pub(crate) async fn load(
        source: Arc<dyn DynSource>,
        origin: String,
        config: Config,
    ) -> Result<Self, LoadError> {
        let origin: Arc<str> = origin.into();
        let cx = FetchContext::new(Trigger::Load, config.max_size).on(config.clock);
        let fetched = flight::fetch(&*source, &origin, config.read_timeout, cx).await?;
        let first = token_of(fetched, &origin, &config)?.with_generation(1);
        tracing::info!(source = %origin, token = %first, "token loaded");
        let id = StoreId::next();
        let label = config
            .name
            .as_deref()
            .map_or_else(|| origin.clone(), Arc::from);
        let store = TokenStore {
            shared: Arc::new(Shared {
                id,
                current: ArcSwap::from_pointee(first),
                generation: AtomicU64::new(1),
                source,
                origin,
                config,
                runtime: tokio::runtime::Handle::current(),
                flight: Mutex::new(Flight::new()),
                done: watch::Sender::new(Done {
                    read: 1,
                    result: None,
                }),
                generations: watch::Sender::new(1),
                counters: Counters {
                    reads: AtomicU64::new(1),
                    ..Counters::default()
                },
                last_error: Mutex::new(None),
                last_unauthorized_read: Mutex::new(None),
                watch_state: Mutex::new(WatchState::Off),
                expiry: ExpiryWarnings::default(),
                telemetry: Telemetry::new(label),
            }),
        };
        store
            .shared
            .telemetry
            .reload(Trigger::Load, &Ok(Reloaded::Unchanged { generation: 1 }));
        store.shared.telemetry.watch_state(&WatchState::Off);
        StoreId::register(&store.shared);
        store.shared.check_expiry();
        Ok(store)
    }

    /// The store's number, to find it again after a 401 without holding it.
    #[inline]
    pub(crate) fn id(&self) -> StoreId {
        self.shared.id
    }

    /// A weak handle, for background work that must not keep the store alive.
    pub fn downgrade(&self) -> Handle {
        Handle::new(Arc::downgrade(&self.shared))
    }

    /// Whether both are clones of the same store.
    pub fn ptr_eq(&self, other: &TokenStore) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The current token. Lock-free.
    pub fn current(&self) -> Arc<Token> {
        self.shared.current.load_full()
    }

    /// The current token's generation: 1 for the first token, one more for each new one.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Whether `cached` is still the current token. One atomic load.
    #[inline]
    pub(crate) fn is_current(&self, cached: &Token) -> bool {
        self.shared.generation.load(Ordering::Acquire) == cached.generation()
    }

    /// Reads the source again and installs its token if it is valid and new.
    ///
    /// Callers that arrive while a read is in flight share its result (a read that may have
    /// started before the caller's own last write; the watcher, the timer and 401s always
    /// ask for a read that starts after their trigger). The read belongs to the store:
    /// dropping this future does not cancel it. On failure the last good token stays in
    /// use and the error is returned (and shown in [`status`]).
    ///
    /// [`status`]: TokenStore::status
    pub async fn reload(&self) -> Result<Reloaded, LoadError> {
        let handle = self.downgrade();
        let result = handle
            .reload(Trigger::Call, Recency::InFlight, OnFailure::Report)
            .await;
        result.expect("the store outlives the call")
    }

    /// A receiver of generation numbers, updated each time a new token is installed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.generations.subscribe()
    }

    /// A snapshot of the store's state.
    pub fn status(&self) -> Status {
        let s = &self.shared;
        let current = s.current.load();
        let c = &s.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Status {
            source: s.origin.to_string(),
            generation: current.generation(),
            fingerprint: current.fingerprint(),
            loaded_at: current.loaded_at(),
            kind: current.kind().clone(),
            expires_at: current.expires_at(),
            rotate_hint: current.rotate_hint(),
            freshness: current.freshness_at(s.config.clock.now()),
            reads: get(&c.reads),
            rotations: get(&c.rotations),
            failures: get(&c.failures),
            last_error: lock(&s.last_error).clone(),
            watch: lock(&s.watch_state).clone(),
            unauthorized: c.unauthorized(),
            stalled_since: s.expiry.stalled_since(&current),
        }
    }

    /// Counts how a retry went.
    pub(crate) fn count_retry(&self, outcome: RetryOutcome) {
        self.shared.counters.retry(outcome);
        self.shared.telemetry.retry(outcome);
    }

    /// Counts a request that kept its own `Authorization` (metrics only).
    #[inline]
    pub(crate) fn count_kept_authorization(&self) {
        self.shared.telemetry.kept_authorization();
    }

    /// Publishes the gauges of the token in use.
    #[cfg(feature = "metrics")]
    pub(crate) fn publish_gauges(&self) {
        self.shared.publish_gauges();
    }
}

impl Shared {
    /// Warns (once per token) when the current token, just confirmed by a read of the
    /// source, has expired or is overdue for rotation: the rotator has stalled.
    fn check_expiry(&self) {
        self.expiry
            .check(&self.current.load(), self.config.clock.now(), &self.origin);
        #[cfg(feature = "metrics")]
        self.publish_gauges();
    }

    #[cfg(feature = "metrics")]
    fn publish_gauges(&self) {
        let current = self.current.load();
        let stalled = self.expiry.stalled_since(&current).is_some();
        self.telemetry
            .token(&current, self.config.clock.now(), stalled);
    }

    fn report_failure(&self, error: &LoadError, trigger: Trigger) {
        Counters::bump(&self.counters.failures);
        tracing::warn!(
            trigger = trigger.as_str(),
            token = %self.current.load().fingerprint(),
            %error,
            "token reload failed; keeping the last good token"
        );
        *lock(&self.last_error) = Some(error.clone());
    }
}

/// Waits until read `n` is done; `None` when the store was dropped first.
async fn wait(
    mut done: watch::Receiver<Done>,
    ticket: Ticket,
) -> Option<Result<Reloaded, LoadError>> {
    match ticket {
        Ticket::Answered(result) => Some(result),
        Ticket::Wait(n) => {
            let done = done.wait_for(|d| d.read >= n).await.ok()?;
            done.result.clone()
        }
    }
}

#[cfg(test)]
mod tests;
