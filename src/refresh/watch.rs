//! The watch loop of one store: reload when a name of its files' symlink chains changes.
//!
//! The loop owns the store's subscription to the [`Registry`] for the names of each file's
//! [chain](super::chain), and waits on a coalescing [`Signal`]. On each wake-up it resolves
//! the chains again, then reads with a read that starts after the event.
//!
//! While a directory of a chain cannot be watched, or a chain loops, the store reports
//! [`WatchState::Degraded`] and the loop tries again with a backoff. Resolving and watching
//! run on the blocking pool: a mount that stops answering holds no runtime worker.

use std::collections::HashMap;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::chain::{ChainError, Entry, Start};
use super::registry::{READS_PER_DIR, Registry, Signal};
use crate::source::Trigger;
use crate::store::{Credential, OnFailure, Recency, WatchState, WeakStore};

/// Delays before the retries of a read that failed right after an event (a half-written
/// file); the last retry reports its failure.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(250),
];

/// First and largest delay between two attempts to watch a directory again.
const REARM_FIRST: Duration = Duration::from_millis(20);
const REARM_MAX: Duration = Duration::from_secs(2);

/// Subscribes the store to changes of `paths`' chains (its watch state said before this
/// returns), and returns the loop that reloads it on each change.
pub(crate) async fn watch<C: Credential>(
    registry: &Arc<Registry>,
    store: WeakStore<C>,
    paths: &[PathBuf],
) -> impl Future<Output = ()> + Send + use<C> {
    let watcher = Watcher {
        store,
        paths: paths.to_vec(),
        starts: Vec::new(),
        registry: registry.clone(),
        id: registry.next_id.fetch_add(1, Ordering::Relaxed),
        signal: Arc::default(),
        entries: Vec::new(),
        reads: Arc::new(Semaphore::new(READS_PER_DIR)),
        seen: HashMap::new(),
        state: None,
        errors: Vec::new(),
    };
    let watcher = watcher.updated().await;
    async move {
        if let Some((watcher, _)) = watcher {
            watcher.run().await;
        }
    }
}

struct Watcher<C: Credential> {
    store: WeakStore<C>,
    paths: Vec<PathBuf>,
    /// Their directories are canonicalized once, at the first update.
    starts: Vec<Start>,
    /// Its subscription: the names it watches under `id`, and what the registry wakes.
    registry: Arc<Registry>,
    id: u64,
    signal: Arc<Signal>,
    entries: Vec<Entry>,
    /// The read limit of the path's own directory.
    reads: Arc<Semaphore>,
    /// The epoch of each directory's watch when last seen, `None` when it was not watched.
    seen: HashMap<PathBuf, Option<u64>>,
    state: Option<WatchState>,
    /// The chains' errors last logged: each is logged once.
    errors: Vec<ChainError>,
}

impl<C: Credential> Watcher<C> {
    /// Reloads on each wake-up; while degraded, tries to re-arm with a backoff.
    async fn run(mut self) {
        let mut delay = REARM_FIRST;
        loop {
            let degraded = self.state != Some(WatchState::Active);
            let mut woken = tokio::select! {
                () = self.signal.notified() => true,
                () = tokio::time::sleep(delay), if degraded => false,
            };
            loop {
                let Some((watcher, missed)) = self.updated().await else {
                    return;
                };
                self = watcher;
                // Nothing to read: no event, or every event was read as it came.
                if !missed && !woken {
                    break;
                }
                if !self.read().await {
                    return;
                }
                // The chains again: an event during the read's retries may have changed them.
                woken = false;
            }
            delay = match self.state == Some(WatchState::Active) {
                true => REARM_FIRST,
                false => (delay * 2).min(REARM_MAX),
            };
        }
    }

    /// [`update`](Self::update) on the blocking pool, with the caller's tracing subscriber.
    /// `None` when the runtime shut down meanwhile.
    async fn updated(mut self) -> Option<(Self, bool)> {
        let dispatch = tracing::dispatcher::get_default(Clone::clone);
        let (this, missed, state) = tokio::task::spawn_blocking(move || {
            let (missed, state) = tracing::dispatcher::with_default(&dispatch, || self.update());
            (self, missed, state)
        })
        .await
        .ok()?;
        if let Some(state) = state {
            this.store.set_watch_state(state);
        }
        Some((this, missed))
    }

    /// Resolves the chains again and watches exactly what they need (new names added
    /// before old ones go, so that a directory that stays is not unwatched in between).
    /// Returns whether a directory was armed since it was last seen (what was written there
    /// before is in no event), and the watch state when it changed.
    fn update(&mut self) -> (bool, Option<WatchState>) {
        if self.starts.is_empty() {
            self.starts = self.paths.iter().map(|p| Start::of(p)).collect();
        }
        let (mut entries, mut errors) = (Vec::new(), Vec::new());
        for chain in self.starts.iter().map(Start::resolve) {
            for entry in chain.entries {
                if !entries.contains(&entry) {
                    entries.push(entry);
                }
            }
            errors.extend(chain.error);
        }
        for error in errors.iter().filter(|e| !self.errors.contains(e)) {
            tracing::warn!(
                %error,
                "cannot follow the token file's symlinks; the timer still refreshes the token"
            );
        }
        let mut problem = errors.first().map(ToString::to_string);
        self.errors = errors;
        if entries != self.entries {
            for entry in entries.iter().filter(|e| !self.entries.contains(e)) {
                self.registry.register(entry, self.id, &self.signal);
            }
            for entry in self.entries.iter().filter(|e| !entries.contains(e)) {
                self.registry.unregister(entry, self.id);
            }
            if let Some(reads) = entries.first().and_then(|e| self.registry.reads(&e.dir)) {
                self.reads = reads;
            }
            self.entries = entries;
        }
        let (mut missed, mut seen) = (false, HashMap::new());
        for entry in &self.entries {
            if seen.contains_key(&entry.dir) {
                continue;
            }
            let state = self.registry.arm(&entry.dir);
            let epoch = state.as_ref().ok().copied();
            missed |= epoch.is_some() && self.seen.get(&entry.dir) != Some(&epoch);
            problem = problem.or(state.err());
            seen.insert(entry.dir.clone(), epoch);
        }
        self.seen = seen;
        let state = problem.map_or(WatchState::Active, |reason| WatchState::Degraded { reason });
        let changed = (self.state.as_ref() != Some(&state)).then(|| state.clone());
        self.state = Some(state);
        (missed, changed)
    }

    /// Reads again after an event, retrying after each of [`RETRY_DELAYS`] or sooner on
    /// another event. Returns `false` when the store is gone.
    async fn read(&self) -> bool {
        let signal = &self.signal;
        let mut delays = RETRY_DELAYS.into_iter();
        loop {
            let report = match delays.len() {
                0 => OnFailure::Report,
                _ => OnFailure::Quiet,
            };
            // Held for the read only, not across the retries' waits.
            let permit = self.reads.acquire().await;
            let seen = signal.events();
            let result = (self.store)
                .reload(Trigger::Watch, Recency::AfterNow, report)
                .await;
            drop(permit);
            signal.settle(seen);
            match (result, delays.next()) {
                (None, _) => return false,
                (Some(Ok(_)), _) | (_, None) => return true,
                (Some(Err(_)), Some(delay)) => tokio::select! {
                    biased;
                    () = signal.notified() => {}
                    () = tokio::time::sleep(delay) => {}
                },
            }
        }
    }
}

impl<C: Credential> Drop for Watcher<C> {
    /// Unsubscribes on the blocking pool when in a runtime: unwatching may wait on the lock
    /// a watch of a hung directory holds.
    fn drop(&mut self) {
        let (registry, id) = (self.registry.clone(), self.id);
        let entries = std::mem::take(&mut self.entries);
        let unsubscribe = move || entries.iter().for_each(|e| registry.unregister(e, id));
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(unsubscribe)),
            Err(_) => unsubscribe(),
        }
    }
}

#[cfg(test)]
mod tests;
