//! The reads of a store, run: the task that runs the reads its
//! [`Flight`](super::flight::Flight) numbers, the
//! read on the caller's thread, and the end of each (install or keep the last good one,
//! report, publish).

use std::sync::{Arc, Weak};

use tokio::task::AbortHandle;

use super::credential::Credential;
use super::error::LoadError;
use super::flight::{Ask, OnFailure, Ticket, fetch};
use super::install::credential_of;
use super::shared::Shared;
use super::status::Counters;
use crate::source::{DynSource, FetchContext, Fetched, Trigger};
use crate::sync::lock;

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
            let token = credential_of(f, &self.origin, self.config.clock, self.config.max_size)?;
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
