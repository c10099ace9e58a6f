//! [`Shared`]: all the state of one store, held by each of its handles. It holds the parts
//! the files before it own (the credential in use, the single flight, the refusals, the
//! counters, the expiry warnings, the metrics) with what the store was built with, and
//! says nothing of what the files after it do with them.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use super::credential::Credential;
use super::expiry::ExpiryWarnings;
use super::flight::Flight;
use super::install::Current;
use super::refused::Refusals;
use super::status::{Counters, WatchState};
use super::telemetry::Telemetry;
use crate::clock::Clock;
use crate::source::DynSource;
use crate::sync::lock;

/// What the store needs to know of its options.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The `source` label of the store's metrics; its source's description when `None`.
    pub(crate) name: Option<String>,
    pub(crate) max_size: usize,
    pub(crate) fetch_timeout: Duration,
    pub(crate) unauthorized_interval: Duration,
    pub(crate) clock: Clock,
}

/// How to build a store's refresher again, from a weak reference to its state (the
/// builder's `Start`, as `background.rs` keeps it: a type of its own would name the weak
/// handle, which names this one).
pub(super) type Restart<C> =
    Box<dyn Fn(Weak<Shared<C>>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// A store of `C`: what every handle of it shares.
pub(crate) struct Shared<C: Credential> {
    pub(super) current: Current<C>,
    pub(super) source: Arc<dyn DynSource>,
    pub(super) origin: Arc<str>,
    pub(super) config: Config,
    /// Where the store's reads run when the caller is outside any runtime: the runtime it
    /// was built in, or the one that last restarted its refresher.
    pub(super) runtime: Mutex<tokio::runtime::Handle>,
    pub(super) flight: Flight,
    pub(super) counters: Counters,
    pub(super) refusals: Refusals,
    pub(super) watch_state: Mutex<WatchState>,
    pub(super) expiry: ExpiryWarnings,
    pub(super) telemetry: Telemetry,
    /// How to start the refresher again when it stops while the store lives; unset for a
    /// store whose refresher the caller runs ([`StoreBuilder::pair`](crate::StoreBuilder::pair)).
    pub(super) restart: OnceLock<Restart<C>>,
}

impl<C: Credential> Shared<C> {
    /// The state of a store just loaded with `first` (generation 1, read 1 done), whose
    /// metrics carry the label `label`, on the current runtime.
    pub(super) fn new(
        first: C,
        source: Arc<dyn DynSource>,
        origin: Arc<str>,
        config: Config,
        label: Arc<str>,
    ) -> Self {
        Shared {
            current: Current::new(first),
            source,
            origin,
            config,
            runtime: Mutex::new(tokio::runtime::Handle::current()),
            flight: Flight::new(),
            counters: Counters::first_read(),
            refusals: Refusals::default(),
            watch_state: Mutex::new(WatchState::Off),
            expiry: ExpiryWarnings::default(),
            telemetry: Telemetry::new(label),
            restart: OnceLock::new(),
        }
    }

    /// Warns (once per token) when the current token, just confirmed by a read of the
    /// source, has expired or is overdue for rotation: the rotator has stalled; and
    /// publishes the token's gauges.
    pub(super) fn check_expiry(&self) {
        let current = self.current.load();
        self.expiry
            .check(&**current, self.config.clock.now(), &self.origin);
        let stalled = self.expiry.stalled_since(&**current).is_some();
        self.telemetry.token(&**current, stalled);
    }

    /// Records whether the store's file is watched, and whether anything refreshes it.
    pub(super) fn set_watch_state(&self, state: WatchState) {
        self.telemetry.watch_state(&state);
        *lock(&self.watch_state) = state;
    }
}

impl<C: Credential> Drop for Shared<C> {
    fn drop(&mut self) {
        self.flight.abort();
    }
}
