//! [`Shared`]: all the state of one store, held by each of its handles, and what acts on
//! it: the credential in use and replacing it (validate, keep the last good one, bump the
//! generation); the reads its single flight ([`Flight`](super::flight::Flight)) numbers,
//! run in a task of the store's own and ended here (install or keep the last good one,
//! report, publish); and starting the store's refresher again when the runtime that ran it
//! went away.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;
use tracing::field::display;

use super::Stamp;
use super::credential::{Credential, event};
use super::error::{Chain, LoadError};
use super::flight::{Ask, Flight, OnFailure, ReadId, fetch};
use super::status::{Counters, ExpiryWarnings, Reloaded, WatchState};
use super::word::Word;
use super::{Certainty, WeakStore};
use crate::clock::{Clock, Rfc3339};
use crate::source::{DynSource, Fetched, Trigger};
use crate::sync::lock;
use crate::token::Freshness;

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

/// A store's refresher, running.
pub(crate) type Running = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How the builder starts a store's refresher again: subscribe, read once for what
/// changed while nothing watched, then run the same timer and watcher.
pub(crate) type Restart<C> = Box<dyn Fn(WeakStore<C>) -> Running + Send + Sync>;

/// The last read asked for by a certain refusal and by a possible one: each is
/// rate-limited on its own, so that a possible refusal (a connection that closed, which
/// may have happened before the rotation was written) never spends the read that a
/// certain one of the same generation needs.
#[derive(Default)]
pub(super) struct Refusals {
    pub(super) certain: Option<LastRefusal>,
    pub(super) possible: Option<LastRefusal>,
}

impl Refusals {
    pub(super) fn of(&mut self, certainty: Certainty) -> &mut Option<LastRefusal> {
        match certainty {
            Certainty::Certain => &mut self.certain,
            Certainty::Possible => &mut self.possible,
        }
    }
}

/// A refusal that asked for a read.
#[derive(Clone, Copy)]
pub(super) struct LastRefusal {
    pub(super) at: std::time::Instant,
    /// The generation refused.
    pub(super) generation: u64,
    /// The read it asked for.
    pub(super) read: ReadId,
}

/// Why [`WatchState::Stopped`].
const STOPPED: &str = "the store's refresher stopped while the store lives (its tokio runtime \
                       shut down, or its future was dropped)";

/// A store of `C`: what every handle of it shares.
pub(crate) struct Shared<C: Credential> {
    pub(super) credential: ArcSwap<C>,
    /// The generation of `credential` and the flag, written after `credential`.
    pub(super) word: Word,
    /// Announces each new generation.
    pub(super) generations: watch::Sender<u64>,
    /// The error of the last read, if it failed.
    pub(super) last_error: Mutex<Option<LoadError>>,
    pub(super) source: Arc<dyn DynSource>,
    pub(super) parser: C::Parser,
    pub(super) origin: Arc<str>,
    /// The `source` label of its metrics.
    pub(super) label: Arc<str>,
    pub(super) config: Config,
    /// Where the store's reads run when the caller is outside any runtime: the runtime it
    /// was built in, or the one that last restarted its refresher.
    pub(super) runtime: Mutex<tokio::runtime::Handle>,
    pub(super) flight: Flight,
    pub(super) counters: Counters,
    /// The last read asked for by each kind of refusal.
    pub(super) refusals: Mutex<Refusals>,
    pub(super) watch_state: Mutex<WatchState>,
    pub(super) expiry: ExpiryWarnings,
    /// How to start the refresher again when it stops while the store lives; `None` for a
    /// store whose refresher the caller runs ([`StoreBuilder::pair`](crate::StoreBuilder::pair)).
    pub(super) restart: Option<Restart<C>>,
}

impl<C: Credential> Shared<C> {
    /// Warns (once per token) when the current token, just confirmed by a read of the
    /// source, has expired or is overdue for rotation: the rotator has stalled; and
    /// publishes the token's gauges.
    pub(super) fn check_expiry(&self) {
        let current = self.credential.load();
        let (token, e) = (&**current, &self.expiry);
        let generation = token.generation();
        // `fetch_max`: a check of an older token that finishes late cannot re-arm a warning.
        let first = |seen: &AtomicU64| seen.fetch_max(generation, Ordering::AcqRel) < generation;
        let exp = token.expires_at().map(|t| display(Rfc3339(t)));
        let freshness = token.freshness_at(self.config.clock.now());
        if freshness.is_stale() {
            e.stalled.fetch_max(generation, Ordering::AcqRel);
        }
        match freshness {
            Freshness::Expired => {
                // An expired token is past overdue too: one warning says it all.
                e.overdue.fetch_max(generation, Ordering::AcqRel);
                if first(&e.expired) {
                    tracing::warn!(
                        source = %self.origin,
                        %token,
                        exp,
                        "the token in use has expired and its source holds no newer token: \
                         the server will refuse it"
                    );
                }
            }
            Freshness::Overdue if first(&e.overdue) => {
                let overdue = token.overdue_at().map(|t| display(Rfc3339(t)));
                tracing::warn!(
                    source = %self.origin,
                    %token,
                    exp,
                    overdue,
                    "the token in use is overdue for rotation and its source holds no \
                     newer token (a subPath mount, or a kubelet or writer that stopped?)"
                );
            }
            _ => {}
        }
        crate::metrics::token(
            &self.label,
            &crate::metrics::TokenGauges {
                kind: C::KIND.metric,
                generation,
                expires_at: token.expires_at(),
                issued_at: token.issued_at().unwrap_or(token.loaded_at()),
                changed_at: token.loaded_at(),
                stalled: e.stalled_since(token).is_some(),
            },
        );
    }

    /// Records whether the store's file is watched, and whether anything refreshes it.
    pub(super) fn set_watch_state(&self, state: WatchState) {
        let mut current = lock(&self.watch_state);
        if *current != state {
            crate::metrics::watch_state(&self.label, state.metric());
            *current = state;
        }
    }

    /// Installs `token`, a valid read, if it is new.
    fn install(&self, token: C, trigger: Trigger) -> Reloaded {
        *lock(&self.last_error) = None;
        let old = self.credential.load_full();
        if old.same(&token) {
            event!(
                C::KIND,
                trace,
                { trigger = trigger.as_str(), token = %old.logged(), },
                "token unchanged",
                "unchanged"
            );
            return Reloaded::Same;
        }
        let to = old.generation() + 1;
        let mut stamp = *token.stamp();
        stamp.generation = to;
        let token = token.stamped(stamp);
        event!(
            C::KIND,
            info,
            {
                trigger = trigger.as_str(),
                old = %old.logged(),
                new = %token,
                generation = to,
            },
            "token rotated",
            "rotated"
        );
        // Counted before it is published: whoever sees the new credential sees its
        // rotation counted in `status()`.
        Counters::bump(&self.counters.rotations);
        self.credential.store(Arc::new(token));
        self.word.set_generation(to);
        self.generations.send_replace(to);
        Reloaded::New
    }

    /// Counts, logs and keeps a failed read's error; the credential in use stays.
    fn report_failure(&self, error: &LoadError, trigger: Trigger) {
        Counters::bump(&self.counters.failures);
        let current = self.credential.load();
        event!(
            C::KIND,
            warn,
            {
                trigger = trigger.as_str(),
                token = %current.logged(),
                error = %Chain(error),
            },
            "token reload failed; keeping the last good token",
            "reload failed; keeping the last good one"
        );
        *lock(&self.last_error) = Some(error.clone());
    }

    /// The refresher was dropped before the store: report it, and let the next use start
    /// it again (see the module docs).
    pub(super) fn refresher_stopped(&self) {
        self.set_watch_state(WatchState::Stopped {
            reason: STOPPED.to_owned(),
        });
        let restarts = self.restart.is_some();
        if restarts {
            self.word.stop();
        }
        tracing::warn!(
            source = %self.origin,
            "nothing refreshes the token any more: {STOPPED}; {}",
            if restarts {
                "the next request or reload from a live runtime starts it again"
            } else {
                "its refresher came from `StoreBuilder::pair`, so nothing starts it again"
            }
        );
    }

    /// Starts the refresher again on the current runtime, if it stopped, the store knows
    /// how, and the caller is in a runtime. One caller wins; the others find the flag
    /// cleared.
    #[cold]
    pub(super) fn revive(self: &Arc<Self>) {
        let (Some(restart), Ok(runtime)) = (&self.restart, tokio::runtime::Handle::try_current())
        else {
            return;
        };
        if !self.word.restart() {
            return;
        }
        *lock(&self.runtime) = runtime.clone();
        self.set_watch_state(WatchState::Off);
        runtime.spawn(restart(WeakStore(Arc::downgrade(self))));
        tracing::info!(
            source = %self.origin,
            "the store's refresher started again on the current runtime"
        );
    }

    /// Asks for read number `wanted` or a later one, starting or queueing it as needed.
    /// A read that starts runs in a task, with any read queued after it, on the caller's
    /// runtime, which is being driven right now; on the store's own (where it was built)
    /// when called from outside any runtime (the watcher's thread).
    pub(super) fn ask(self: &Arc<Self>, wanted: ReadId, ask: Ask) -> ReadId {
        self.flight.ask(wanted, ask, |n, trigger| {
            let runtime = tokio::runtime::Handle::try_current()
                .unwrap_or_else(|_| lock(&self.runtime).clone());
            let task = runtime.spawn(read_loop(Arc::downgrade(self), n, trigger));
            task.abort_handle()
        })
    }

    /// Ends read `n` with `result`: reports a failure if a caller asked for that,
    /// publishes the result, and says which read to start next, if one was queued.
    fn finish(
        &self,
        n: ReadId,
        trigger: Trigger,
        fetched: Result<Fetched, LoadError>,
    ) -> Option<(ReadId, Trigger)> {
        Counters::bump(&self.counters.reads);
        let result = fetched
            .and_then(|f| credential_of(f, &self.parser, &self.origin, &self.config, 0))
            .map(|token| self.install(token, trigger));
        let outcome = match result {
            Ok(Reloaded::New) => "rotated",
            Ok(Reloaded::Same) => "unchanged",
            Err(_) => "failed",
        };
        crate::metrics::reload(&self.label, trigger.as_str(), outcome);
        let mut reads = lock(&self.flight.reads);
        let report = reads.running.as_ref().map(|(ask, _)| ask.report);
        if let (Err(error), Some(OnFailure::Report)) = (&result, report) {
            self.report_failure(error, trigger);
        }
        self.flight.publish(n, result);
        self.check_expiry();
        reads.next()
    }
}

/// A dropped store's read ends with it.
impl<C: Credential> Drop for Shared<C> {
    fn drop(&mut self) {
        if let Some((_, task)) = lock(&self.flight.reads).running.take() {
            task.abort();
        }
    }
}

/// A fetched read as a store's credential of `generation` (0 until it is installed),
/// stamped with the time of the read on the store's clock and the source's dates.
pub(super) fn credential_of<C: Credential>(
    fetched: Fetched,
    parser: &C::Parser,
    origin: &Arc<str>,
    config: &Config,
    generation: u64,
) -> Result<C, LoadError> {
    let stamp = Stamp {
        generation,
        loaded_at: config.clock.now(),
        source_expiry: fetched.expires_at(),
        refresh_at: fetched.refresh_at(),
    };
    Ok(C::from_fetched(fetched, parser, origin, config.max_size, stamp.loaded_at)?.stamped(stamp))
}

/// The read task: read `n`, then any read queued meanwhile, until none is.
async fn read_loop<C: Credential>(store: Weak<Shared<C>>, read: ReadId, trigger: Trigger) {
    let Some((source, origin, config)) = store
        .upgrade()
        .map(|s| (s.source.clone(), s.origin.clone(), s.config.clone()))
    else {
        return;
    };
    let mut task = Unfinished {
        store,
        read: Some(read),
        trigger,
    };
    loop {
        let fetched = fetch(&*source, &origin, &config, task.trigger).await;
        let Some(shared) = task.store.upgrade() else {
            return;
        };
        let read = task.read.expect("a read in flight");
        let Some((next, trigger)) = shared.finish(read, task.trigger, fetched) else {
            task.read = None;
            return;
        };
        (task.read, task.trigger) = (Some(next), trigger);
    }
}

/// Ends the read in flight with an error if the read task is dropped before it finishes
/// (its runtime shut down), so that no caller waits for it forever and the next caller
/// starts a new read.
struct Unfinished<C: Credential> {
    store: Weak<Shared<C>>,
    /// The read in flight; `None` once the task ended normally.
    read: Option<ReadId>,
    trigger: Trigger,
}

impl<C: Credential> Drop for Unfinished<C> {
    fn drop(&mut self) {
        let Some(shared) = self.store.upgrade().filter(|_| self.read.is_some()) else {
            return;
        };
        let error = LoadError::Fetch {
            origin: shared.origin.clone(),
            error: Arc::new(std::io::Error::other(
                "the read was dropped unfinished: the tokio runtime running it shut down",
            )),
        };
        shared.report_failure(&error, self.trigger);
        let mut reads = lock(&shared.flight.reads);
        // The queued read cannot run either: it ends with the same error, and the next
        // caller starts anew.
        let read = reads.next().map_or(reads.started, |(queued, _)| queued);
        reads.running = None;
        shared.flight.publish(read, Err(error));
    }
}
