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
//! The task holds only a weak reference to the store and the source, so it never keeps
//! a dropped store alive; the store aborts it when dropped.

use std::sync::{Arc, Weak};

use tokio::task::AbortHandle;

use super::{Config, Credential, LoadError, Reloaded, Shared};
use crate::source::{DynSource, FetchContext, Fetched, Trigger};
use crate::sync::lock;

/// Whether a failed read is recorded and logged as a failure, or left quiet (the
/// watcher's first attempts right after an event, which a half-written file can fail).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum OnFailure {
    Report,
    Quiet,
}

impl OnFailure {
    fn or(self, other: OnFailure) -> OnFailure {
        if self == OnFailure::Report || other == OnFailure::Report {
            OnFailure::Report
        } else {
            OnFailure::Quiet
        }
    }
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

impl Ask {
    fn merge(self, other: Ask) -> Ask {
        Ask {
            trigger: self.trigger,
            report: self.report.or(other.report),
        }
    }
}

/// The reads asked for, started and queued.
#[derive(Default)]
pub(crate) struct Flight {
    /// The number of the last read started; the first read, at load, is 1.
    pub(crate) started: u64,
    /// The read running now, who asked for it, and its task (none for a read made on the
    /// caller's thread: [`Shared::read_now`]).
    running: Option<(Ask, Option<AbortHandle>)>,
    /// A read asked for after the running one started: it starts when that one ends.
    queued: Option<Ask>,
}

impl Flight {
    pub(crate) fn new() -> Self {
        Self {
            started: 1,
            ..Self::default()
        }
    }

    /// The number of a read that answers a caller asking now with `recency`.
    pub(crate) fn wanted(&self, recency: Recency) -> u64 {
        match (recency, &self.running) {
            (Recency::InFlight, Some(_)) => self.started,
            _ => self.started + 1,
        }
    }

    /// Aborts the running read (the store is being dropped).
    pub(crate) fn abort(&mut self) {
        if let Some((_, Some(task))) = self.running.take() {
            task.abort();
        }
    }
}

/// The last read done, published to the callers waiting for it.
#[derive(Clone, Default)]
pub(crate) struct Done {
    pub(crate) read: u64,
    /// `None` before the first reload (the load's result is not kept).
    pub(crate) result: Option<Result<Reloaded, LoadError>>,
}

/// How a caller's request for a read is answered.
pub(crate) enum Ticket {
    /// By a read already done.
    Answered(Result<Reloaded, LoadError>),
    /// By read number `n`, running or queued.
    Wait(u64),
}

impl<C: Credential> Shared<C> {
    /// Asks for read number `wanted` or a later one, starting or queueing it as needed.
    pub(crate) fn ask(self: &Arc<Self>, wanted: u64, ask: Ask) -> Ticket {
        let mut guard = lock(&self.flight);
        let flight = &mut *guard;
        if let Some((running, _)) = &mut flight.running {
            if flight.started >= wanted {
                *running = running.merge(ask);
                return Ticket::Wait(flight.started);
            }
            flight.queued = Some(flight.queued.map_or(ask, |q| q.merge(ask)));
            return Ticket::Wait(flight.started + 1);
        }
        let done = self.done.borrow();
        if done.read >= wanted
            && let Some(result) = &done.result
        {
            return Ticket::Answered(result.clone());
        }
        drop(done);
        flight.started += 1;
        let n = flight.started;
        flight.running = Some((ask, Some(self.spawn_read(n, ask.trigger))));
        Ticket::Wait(n)
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

    /// Reads the source on the calling thread (the watcher's, for an event) when it can
    /// without blocking ([`TokenSource::fetch_now`](crate::source::TokenSource::fetch_now)) and no read is in flight, and installs
    /// the result as a read of the store's own would. Returns whether the source's token
    /// is now the store's (installed, or unchanged): `false` when nothing was read, or the
    /// read failed (quietly: the caller's usual read follows, with its retries).
    pub(crate) fn read_now(self: &Arc<Self>, trigger: Trigger) -> bool {
        let before = {
            let flight = lock(&self.flight);
            if flight.running.is_some() {
                return false;
            }
            flight.started
        };
        let cx = FetchContext::new(trigger, self.config.max_size).on(self.config.clock);
        let Some(fetched) = self.source.fetch_now_dyn(cx) else {
            return false;
        };
        let n = {
            let mut flight = lock(&self.flight);
            // A read that started meanwhile may have read an older file: ours would be
            // the later one, but a single flight never installs two reads at once.
            if flight.running.is_some() || flight.started != before {
                return false;
            }
            flight.started += 1;
            let report = OnFailure::Quiet;
            flight.running = Some((Ask { trigger, report }, None));
            flight.started
        };
        let (installed, next) = self.finish(n, trigger, Ok(fetched));
        if let Some((next, trigger)) = next {
            let task = self.spawn_read(next, trigger);
            if let Some((_, handle)) = &mut lock(&self.flight).running {
                *handle = Some(task);
            }
        }
        installed
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
        super::Counters::bump(&self.counters.reads);
        let result = fetched.and_then(|f| self.install(f, trigger));
        self.telemetry.reload(trigger, &result);
        let mut flight = lock(&self.flight);
        let report = flight.running.as_ref().map(|(a, _)| a.report);
        if let (Err(error), Some(OnFailure::Report)) = (&result, report) {
            self.report_failure(error, trigger);
        }
        let installed = result.is_ok();
        self.done.send_replace(Done {
            read: n,
            result: Some(result),
        });
        self.check_expiry();
        let next = match flight.queued.take() {
            Some(next) => {
                flight.started += 1;
                if let Some((ask, _)) = &mut flight.running {
                    *ask = next;
                }
                Some((flight.started, next.trigger))
            }
            None => {
                flight.running = None;
                None
            }
        };
        (installed, next)
    }
}

/// Fetches with a time limit, and wraps the source's error with its origin.
pub(crate) async fn fetch(
    source: &dyn DynSource,
    origin: &Arc<str>,
    config: &Config,
    cx: FetchContext,
) -> Result<Fetched, LoadError> {
    match tokio::time::timeout(config.fetch_timeout, source.fetch_dyn(cx)).await {
        Ok(Ok(fetched)) => Ok(fetched),
        Ok(Err(error)) => Err(LoadError::Fetch {
            origin: origin.clone(),
            error: Arc::from(error),
        }),
        Err(_) => Err(LoadError::Timeout {
            origin: origin.clone(),
            after: config.fetch_timeout,
        }),
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
        let fetched = fetch(&*source, &origin, &config, cx).await;
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
        shared.report_failure(&error, self.trigger);
        let mut flight = lock(&shared.flight);
        // The queued read cannot run either: it ends with the same error, and the next
        // caller starts anew.
        if flight.queued.take().is_some() {
            flight.started += 1;
        }
        flight.running = None;
        shared.done.send_replace(Done {
            read: flight.started,
            result: Some(Err(error)),
        });
    }
}

#[cfg(test)]
impl Flight {
    /// Marks a read as running, or none, as the read task does (tests of what waits).
    #[cfg(all(target_os = "linux", not(bearer_reload_portable)))]
    pub(crate) fn pretend_running(&mut self, running: bool) {
        let ask = Ask {
            trigger: Trigger::Call,
            report: OnFailure::Quiet,
        };
        self.running = running.then_some((ask, None));
    }
}
