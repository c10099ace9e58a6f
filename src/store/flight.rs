//! Single flight: one read of the source at a time, owned by the store.
//!
//! Reads are numbered. A caller asks for "read `n` or a later one" and waits for the
//! store's `done` channel to reach `n`; it never runs the read itself. The read runs in a
//! task the store spawns, so a caller that goes away (a request dropped on a timeout, a
//! `select!`) takes nothing with it: the read finishes, installs its token, and every
//! later caller sees the result. A caller that asks while a read runs either joins it or,
//! when it needs a read that starts after its trigger, queues the next one: at most one
//! read runs and at most one waits, however many callers ask.
//!
//! This file keeps the books ([`Flight`]: which read answers whom, what is queued, what
//! is done) and knows nothing of the store; `shared.rs` runs the reads it numbers. The
//! task holds only a weak reference to the store and the source, so it never keeps a
//! dropped store alive; the store aborts it when dropped.

use std::sync::{Arc, Mutex};

use tokio::sync::watch;
use tokio::task::AbortHandle;

use super::error::LoadError;
use super::shared::Config;
use super::status::Reloaded;
use crate::source::{DynSource, FetchContext, Fetched, Trigger};
use crate::sync::lock;

/// Whether a failed read is recorded and logged as a failure, or left quiet (the
/// watcher's first attempts right after an event, which a half-written file can fail).
/// Reported when any caller of a read asks for it (the greater).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum OnFailure {
    Quiet,
    Report,
}

/// Which read may answer a caller.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Recency {
    /// A read already in flight will do.
    InFlight,
    /// Only a read that starts after this call (a watcher event must not be answered by a
    /// read that began before the write it reports).
    AfterNow,
}

/// A request for a read: who asked, and whether its failure is reported.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ask {
    pub(crate) trigger: Trigger,
    pub(crate) report: OnFailure,
}

/// A store's single flight: the reads asked for, started and queued, and the last one
/// done, published to the callers waiting for it.
#[derive(Default)]
pub(super) struct Flight {
    /// The books, held while a read ends (see [`Reads::next`]).
    pub(super) reads: Mutex<Reads>,
    /// The last read done (its receivers: the callers waiting).
    pub(super) done: watch::Sender<Done>,
}

/// The reads asked for, started and queued.
#[derive(Default)]
pub(super) struct Reads {
    /// The last read started.
    pub(super) started: ReadId,
    /// The read running now, who asked for it (a failure is reported if any asked for
    /// that), and its task.
    pub(super) running: Option<(Ask, AbortHandle)>,
    /// A read asked for after the running one started: it starts when that one ends.
    queued: Option<Ask>,
}

/// The last read done, published to the callers waiting for it.
#[derive(Clone, Default)]
pub(crate) struct Done {
    read: ReadId,
    /// `None` before the first reload (the load's result is not kept).
    result: Option<Result<Reloaded, LoadError>>,
}

/// A read's number, in the order reads start; the load is read 0. A caller waits for one
/// read (running, queued or done): its result, or a later read's, answers it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct ReadId(u64);

impl ReadId {
    /// The read that starts after this one.
    pub(super) fn next(self) -> Self {
        Self(self.0 + 1)
    }
}

impl Flight {
    /// The number of a read that answers a caller asking now with `recency`.
    pub(super) fn wanted(&self, recency: Recency) -> ReadId {
        let reads = lock(&self.reads);
        match (recency, &reads.running) {
            (Recency::InFlight, Some(_)) => reads.started,
            _ => reads.started.next(),
        }
    }

    /// Asks for read number `wanted` or a later one, joining or queueing it as needed, or
    /// starting it with `start` (called with the lock held: the read's number and who
    /// asked for it).
    pub(super) fn ask(
        &self,
        wanted: ReadId,
        ask: Ask,
        start: impl FnOnce(ReadId, Trigger) -> AbortHandle,
    ) -> ReadId {
        let mut guard = lock(&self.reads);
        let flight = &mut *guard;
        if let Some((running, _)) = &mut flight.running {
            // A failure is reported if any caller of the read asks for that.
            if flight.started >= wanted {
                running.report = running.report.max(ask.report);
                return flight.started;
            }
            let queued = flight.queued.get_or_insert(ask);
            queued.report = queued.report.max(ask.report);
            return flight.started.next();
        }
        let done = self.done.borrow();
        if done.read >= wanted && done.result.is_some() {
            return done.read;
        }
        drop(done);
        flight.started = flight.started.next();
        let n = flight.started;
        flight.running = Some((ask, start(n, ask.trigger)));
        n
    }

    /// Publishes read `n`'s result to the callers waiting for it.
    pub(super) fn publish(&self, n: ReadId, result: Result<Reloaded, LoadError>) {
        self.done.send_replace(Done {
            read: n,
            result: Some(result),
        });
    }
}

impl Reads {
    /// Ends the running read: the read queued meanwhile, now running (its number and
    /// trigger), if any.
    pub(super) fn next(&mut self) -> Option<(ReadId, Trigger)> {
        let Some(next) = self.queued.take() else {
            self.running = None;
            return None;
        };
        self.started = self.started.next();
        if let Some((ask, _)) = &mut self.running {
            *ask = next;
        }
        Some((self.started, next.trigger))
    }
}

/// Waits until read `read` (or a later one) is done; `None` when the store was dropped
/// first.
pub(super) async fn wait(
    mut done: watch::Receiver<Done>,
    read: ReadId,
) -> Option<Result<Reloaded, LoadError>> {
    let done = done.wait_for(|d| d.read >= read).await.ok()?;
    done.result.clone()
}

/// Fetches for `trigger` with the store's size cap, clock and time limit, and wraps the
/// source's error with its origin.
pub(super) async fn fetch(
    source: &dyn DynSource,
    origin: &Arc<str>,
    config: &Config,
    trigger: Trigger,
) -> Result<Fetched, LoadError> {
    let cx = FetchContext::new(trigger, config.max_size).on(config.clock);
    let (origin, after) = (origin.clone(), config.fetch_timeout);
    let Ok(fetched) = tokio::time::timeout(after, source.fetch_dyn(cx)).await else {
        return Err(LoadError::Timeout { origin, after });
    };
    fetched.map_err(|e| LoadError::Fetch {
        origin,
        error: Arc::from(e),
    })
}

/// The reads of a store, as they complete (`Leader::reads_done`): what a store that
/// follows it waits on.
pub(crate) type ReadsDone = watch::Receiver<Done>;
