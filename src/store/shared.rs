//! [`Shared`]: all the state of one store, held by each of its handles, and what acts on
//! it: the reads its single flight ([`Flight`](super::flight::Flight)) numbers, run in a
//! task of the store's own and ended here (install or keep the last good one, report,
//! publish); and starting the store's refresher again when the runtime that ran it went
//! away.
//!
//! The builder spawns a store's refresher (its timer and watcher) on the runtime that
//! loads the store. A store can outlive that runtime: loaded by a short-lived runtime (a
//! start-up step, a test fixture) and used on another. When the refresher is dropped while
//! its store lives, the store says so ([`WatchState::Stopped`], a warning) and sets the
//! `STOPPED` flag of its word, so that the next request through a layer (or a
//! [`reload`](crate::TokenStore::reload)) made from a live runtime starts a new refresher
//! there, reads the source once (for what changed while nothing watched) and follows it
//! again. A refresher the caller runs ([`StoreBuilder::pair`](crate::StoreBuilder::pair))
//! is the caller's: the store reports that it stopped but starts nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::Duration;

use tokio::task::AbortHandle;

use super::credential::Credential;
use super::error::LoadError;
use super::expiry::ExpiryWarnings;
use super::flight::{Ask, Flight, OnFailure, Recency, Ticket, fetch};
use super::install::{Current, credential_of};
use super::refused::Refusals;
use super::status::{Counters, WatchState};
use super::telemetry::Telemetry;
use super::weak::WeakStore;
use crate::clock::Clock;
use crate::source::{DynSource, FetchContext, Fetched, Trigger};
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
    Box<dyn Fn(Weak<Shared<C>>) -> Pin<Box<dyn Future<Output = Running> + Send>> + Send + Sync>;

/// A store of `C`: what every handle of it shares.
pub(crate) struct Shared<C: Credential> {
    pub(super) current: Current<C>,
    pub(super) source: Arc<dyn DynSource>,
    pub(super) parser: C::Parser,
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
        parser: C::Parser,
        origin: Arc<str>,
        config: Config,
        label: Arc<str>,
    ) -> Self {
        Shared {
            current: Current::new(first),
            source,
            parser,
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

/// A store's refresher, running.
pub(crate) type Running = Pin<Box<dyn Future<Output = ()> + Send>>;

/// Builds a store's refresher (the same timer and watcher each time): subscribes, then
/// hands back the refresher to run.
pub(crate) type Start<C> =
    Arc<dyn Fn(WeakStore<C>) -> Pin<Box<dyn Future<Output = Running> + Send>> + Send + Sync>;

/// Why [`WatchState::Stopped`].
pub(super) const STOPPED: &str = "the store's refresher stopped while the store lives (its tokio \
                       runtime shut down, or its future was dropped)";

impl<C: Credential> Shared<C> {
    /// Makes `start` the way to start the store's refresher again (a store whose refresher
    /// the crate spawned).
    pub(super) fn restart_with(&self, start: Start<C>) {
        let _ = self
            .restart
            .set(Box::new(move |shared| start(WeakStore::new(shared))));
    }

    /// Starts the refresher again on the current runtime, if it stopped, the store knows
    /// how, and the caller is in a runtime. One caller wins; the others find the flag
    /// cleared.
    #[cold]
    pub(super) fn revive(self: &Arc<Self>) {
        let Some(start) = self.restart.get() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.current.resume() {
            return;
        }
        *lock(&self.runtime) = runtime.clone();
        self.set_watch_state(WatchState::Off);
        // Subscribed in the task (following links and watching directories touches the
        // filesystem, never on the caller's thread), then one read, for what changed while
        // nothing watched, before the refresher runs.
        let subscribe = start(Arc::downgrade(self));
        let weak = WeakStore::new(Arc::downgrade(self));
        runtime.spawn(async move {
            let refresher = subscribe.await;
            let _ = weak
                .reload(Trigger::Timer, Recency::AfterNow, OnFailure::Report)
                .await;
            refresher.await;
        });
        tracing::info!(
            source = %self.origin,
            "the store's refresher started again on the current runtime"
        );
    }
}

impl<C: Credential> Shared<C> {
    /// Asks for read number `wanted` or a later one, starting or queueing it as needed.
    pub(super) fn ask(self: &Arc<Self>, wanted: u64, ask: Ask) -> Ticket {
        self.flight
            .ask(wanted, ask, |n, trigger| self.spawn_read(n, trigger))
    }

    /// Starts the task that runs read `n`, and any queued after it.
    fn spawn_read(self: &Arc<Self>, n: u64, trigger: Trigger) -> AbortHandle {
        // The caller's runtime, which is being driven right now; the store's own (where
        // it was built) when called from outside any runtime (the watcher's thread).
        let runtime =
            tokio::runtime::Handle::try_current().unwrap_or_else(|_| lock(&self.runtime).clone());
        runtime
            .spawn(read_loop(
                Arc::downgrade(self),
                self.source.clone(),
                n,
                trigger,
            ))
            .abort_handle()
    }

    /// Ends read `n` with `result`: reports a failure if a caller asked for that,
    /// publishes the result, and says whether it installed the token (or found it
    /// unchanged) and which read to start next, if one was queued.
    fn finish(
        &self,
        n: u64,
        trigger: Trigger,
        fetched: Result<Fetched, LoadError>,
    ) -> (bool, Option<(u64, Trigger)>) {
        Counters::bump(&self.counters.reads);
        let result = fetched.and_then(|f| {
            let token = credential_of(
                f,
                &self.parser,
                &self.origin,
                self.config.clock,
                self.config.max_size,
            )?;
            Ok(self.current.install(token, trigger, &self.counters))
        });
        self.telemetry.reload(trigger, &result);
        let mut reads = self.flight.lock();
        if let (Err(error), Some(OnFailure::Report)) = (&result, reads.report()) {
            self.current.report_failure(error, trigger, &self.counters);
        }
        let installed = result.is_ok();
        self.flight.publish(n, result);
        self.check_expiry();
        let next = reads.next();
        (installed, next)
    }
}

/// The read task: read `n`, then any read queued meanwhile, until none is.
async fn read_loop<C: Credential>(
    store: Weak<Shared<C>>,
    source: Arc<dyn DynSource>,
    mut n: u64,
    mut trigger: Trigger,
) {
    let Some((origin, config)) = store
        .upgrade()
        .map(|s| (s.origin.clone(), s.config.clone()))
    else {
        return;
    };
    let mut unfinished = Unfinished {
        store: store.clone(),
        origin: origin.clone(),
        read: n,
        trigger,
    };
    loop {
        let cx = FetchContext::new(trigger, config.max_size).on(config.clock);
        let fetched = fetch(&*source, &origin, config.fetch_timeout, cx).await;
        let Some(shared) = store.upgrade() else {
            return;
        };
        match shared.finish(n, trigger, fetched).1 {
            Some(next) => (n, trigger) = next,
            None => {
                unfinished.read = 0;
                return;
            }
        }
        (unfinished.read, unfinished.trigger) = (n, trigger);
    }
}

/// Ends the read in flight with an error if the read task is dropped before it finishes
/// (its runtime shut down), so that no caller waits for it forever and the next caller
/// starts a new read.
struct Unfinished<C: Credential> {
    store: Weak<Shared<C>>,
    origin: Arc<str>,
    /// The read in flight; 0 once the task ended normally.
    read: u64,
    trigger: Trigger,
}

impl<C: Credential> Drop for Unfinished<C> {
    fn drop(&mut self) {
        if self.read == 0 {
            return;
        }
        let Some(shared) = self.store.upgrade() else {
            return;
        };
        let error = LoadError::Fetch {
            origin: self.origin.clone(),
            error: Arc::new(std::io::Error::other(
                "the read was dropped unfinished: the tokio runtime running it shut down",
            )),
        };
        shared
            .current
            .report_failure(&error, self.trigger, &shared.counters);
        let flight = &shared.flight;
        let mut reads = flight.lock();
        // The queued read cannot run either: it ends with the same error, and the next
        // caller starts anew.
        let read = reads.abandon();
        flight.publish(read, Err(error));
    }
}
