//! The watch loop of one store: reload when a name of its file's symlink chain changes.
//!
//! Each store watched has a task that owns its [`Subscriber`] to the process-wide
//! [`Registry`] and holds only a weak reference to the store,
//! so that it ends with the store. It subscribes to the names of its file's
//! [chain](super::chain) (the path as given, every symlink after it, the file at the end),
//! each in its directory, and waits on a coalescing [`Signal`](super::registry::Signal).
//! On each wake-up it resolves the chain again (a link re-pointed: the new directories are
//! watched and those no longer needed dropped), then reads the file with a read that
//! starts after the event. The events of one rotation (a truncate, then a write; a
//! temporary file's are for another name) cost one read: those that came before the read
//! started are answered by it.
//!
//! A read that fails
//! right after an event (a half-written file) is retried
//! after 10, 50 and 250 ms, or sooner on the next event, and only the last failure is
//! reported. Reads of the stores of one directory go through its
//! [`read_limit`](super::registry::Registry::read_limit), a few at a time, so an event that
//! wakes a crowded directory reads each file once without a blocking thread per store.
//!
//! When a directory of the chain is removed or renamed away, or cannot be watched at all,
//! or the chain loops, the store reports [`WatchState::Degraded`] (the timer keeps
//! working) and the task polls, with a backoff, until it can watch again, then reloads.

use std::collections::HashMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::Poll;
use std::time::Duration;

use tokio::sync::Semaphore;

use super::chain::{ChainError, Start};
use super::registry::{GLOBAL, Registry, Signal, Subscriber};
use crate::source::Trigger;
use crate::store::{Credential, OnFailure, Recency, WatchState, WeakStore};
use crate::sync::lock;

/// Delays before the retries of a read that failed right after an event; the last retry
/// reports its failure.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(250),
];

/// First and largest delay between two attempts to watch a directory again.
const REARM_FIRST: Duration = Duration::from_millis(20);
const REARM_MAX: Duration = Duration::from_secs(2);

/// Subscribes `handle`'s store to changes of each of `paths`' chains through the
/// process-wide registry, and returns the loops that reload it on each change (see the
/// module docs), run together. The store's watch state is theirs combined: degraded when
/// one is. Subscribing follows links and watches directories, on the blocking pool: a
/// mount that stops answering holds a blocking thread, never a runtime's worker.
pub(crate) async fn watch<C: Credential>(
    handle: WeakStore<C>,
    paths: &[PathBuf],
) -> impl Future<Output = ()> + Send + use<C> {
    let parts = Parts::new(paths.len());
    let mut loops = Vec::new();
    for (index, path) in paths.iter().enumerate() {
        let part = Part {
            parts: parts.clone(),
            index,
        };
        if let Some(watcher) = subscribe(&GLOBAL, handle.clone(), path, part).await {
            loops.push(Box::pin(watcher.run()));
        }
    }
    join_all(loops)
}

/// [`watch`] of one path through `registry`.
#[cfg(test)]
pub(crate) async fn watch_with<C: Credential>(
    registry: &Arc<Registry>,
    handle: WeakStore<C>,
    path: &Path,
) -> impl Future<Output = ()> + Send + use<C> {
    let part = Part {
        parts: Parts::new(1),
        index: 0,
    };
    let watcher = subscribe(registry, handle, path, part).await;
    async move {
        if let Some(watcher) = watcher {
            watcher.run().await;
        }
    }
}

/// A watcher of `path` for `handle`'s store, subscribed (its watch state said) before it
/// is handed back; `None` when the runtime shut down meanwhile.
async fn subscribe<C: Credential>(
    registry: &Arc<Registry>,
    handle: WeakStore<C>,
    path: &Path,
    part: Part,
) -> Option<Watcher<C>> {
    let (registry, path) = (registry.clone(), path.to_owned());
    let (watcher, _) = off_runtime(move || {
        let mut watcher = Watcher {
            // Replaced by the directory's own once subscribed.
            reads: Arc::new(Semaphore::new(1)),
            sub: Subscriber::new(&registry, Signal::default()),
            store: handle,
            start: Start::of(&path),
            seen: HashMap::new(),
            state: None,
            chain_error: None,
            part,
        };
        let update = watcher.update();
        watcher.reads = registry.read_limit(watcher.start.dir());
        (watcher, update)
    })
    .await?;
    Some(watcher)
}

/// Runs `work` on the blocking pool, with the caller's tracing subscriber, and says on the
/// calling task what it found of the watch: `None` when the runtime shut down meanwhile.
async fn off_runtime<C: Credential>(
    work: impl FnOnce() -> (Watcher<C>, Update) + Send + 'static,
) -> Option<(Watcher<C>, bool)> {
    let dispatch = tracing::dispatcher::get_default(Clone::clone);
    let (watcher, update) =
        tokio::task::spawn_blocking(move || tracing::dispatcher::with_default(&dispatch, work))
            .await
            .ok()?;
    // Said here, not on the blocking thread: the store's metrics are recorded where its
    // tasks run.
    if let Some(state) = update.state {
        watcher.store.set_watch_state(state);
    }
    Some((watcher, update.missed))
}

/// What an [`update`](Watcher::update) found.
struct Update {
    /// A directory was armed since it was last seen.
    missed: bool,
    /// The store's watch state, when it changed.
    state: Option<WatchState>,
}

/// Runs every loop until all have ended.
async fn join_all(mut loops: Vec<Pin<Box<impl Future<Output = ()>>>>) {
    std::future::poll_fn(|cx| {
        loops.retain_mut(|l| l.as_mut().poll(cx).is_pending());
        if loops.is_empty() {
            Poll::Ready(())
        } else {
            Poll::Pending
        }
    })
    .await;
}

/// The watch states of the paths of one store, each as its loop last saw it.
struct Parts(Mutex<Vec<Option<WatchState>>>);

impl Parts {
    fn new(n: usize) -> Arc<Self> {
        Arc::new(Self(Mutex::new(vec![None; n])))
    }
}

/// One loop's place among [`Parts`].
struct Part {
    parts: Arc<Parts>,
    index: usize,
}

impl Part {
    /// Records this loop's state; returns the store's: the first problem of any loop,
    /// else active once every loop is.
    fn set(&self, state: WatchState) -> Option<WatchState> {
        let mut parts = lock(&self.parts.0);
        parts[self.index] = Some(state);
        if let Some(degraded) = parts
            .iter()
            .flatten()
            .find(|s| matches!(s, WatchState::Degraded { .. }))
        {
            return Some(degraded.clone());
        }
        parts
            .iter()
            .all(Option::is_some)
            .then_some(WatchState::Active)
    }
}

struct Watcher<C: Credential> {
    store: WeakStore<C>,
    start: Start,
    sub: Subscriber,
    reads: Arc<Semaphore>,
    /// The epoch of each directory's watch when last seen, `None` when it was not watched.
    seen: HashMap<PathBuf, Option<u64>>,
    /// The watch state last reported.
    state: Option<WatchState>,
    /// The chain's error last logged: each is logged once.
    chain_error: Option<ChainError>,
    /// Where this loop's state goes when the store watches several files.
    part: Part,
}

impl<C: Credential> Watcher<C> {
    /// The store's watch task: reload on each wake-up; while degraded, try to re-arm.
    async fn run(mut self) {
        let mut delay = REARM_FIRST;
        loop {
            let mut woken = if self.healthy() {
                self.sub.signal.notified().await;
                true
            } else {
                tokio::select! {
                    () = self.sub.signal.notified() => true,
                    () = tokio::time::sleep(delay) => false,
                }
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
                // The chain again: an event during the read's retries may have changed it.
                woken = false;
            }
            delay = if self.healthy() {
                REARM_FIRST
            } else {
                (delay * 2).min(REARM_MAX)
            };
        }
    }

    fn healthy(&self) -> bool {
        self.state == Some(WatchState::Active)
    }

    /// [`update`](Self::update), on the blocking pool (it touches the filesystem); `None`
    /// when the runtime shut down meanwhile.
    async fn updated(mut self) -> Option<(Self, bool)> {
        off_runtime(move || {
            let update = self.update();
            (self, update)
        })
        .await
    }

    /// Resolves the chain again, watches what it needs, and reports the watch state.
    /// Returns whether a directory was armed since it was last seen, again or for the
    /// first time (a link re-pointed into it): what was written there before is in no
    /// event, and no read on the event's thread saw it after the watch began.
    fn update(&mut self) -> Update {
        let chain = self.start.resolve();
        if chain.error.is_some() && chain.error != self.chain_error {
            let error = chain.error.as_ref().map(ToString::to_string);
            tracing::warn!(
                error = error.as_deref().unwrap_or_default(),
                "cannot follow the token file's symlinks; the timer still refreshes the token"
            );
        }
        self.chain_error = chain.error.clone();
        let mut problem = chain.error.map(|e| e.to_string());
        let mut missed = false;
        let mut seen = HashMap::new();
        for (dir, state) in self.sub.watch(chain.entries) {
            let epoch = state.as_ref().ok().copied();
            if let Some(now) = epoch {
                missed |= self.seen.get(&dir) != Some(&Some(now));
            }
            if let Err(reason) = state {
                problem.get_or_insert(reason);
            }
            seen.insert(dir, epoch);
        }
        self.seen = seen;
        let state = match problem {
            None => WatchState::Active,
            Some(reason) => WatchState::Degraded { reason },
        };
        let mut changed = None;
        if self.state.as_ref() != Some(&state) {
            self.state = Some(state.clone());
            changed = self.part.set(state);
        }
        Update {
            missed,
            state: changed,
        }
    }

    /// Reads the file again after an event. A failed read is retried after each delay in
    /// [`RETRY_DELAYS`], or sooner when another event comes; only the last failure is
    /// reported. Returns `false` when the store is gone.
    async fn read(&self) -> bool {
        let signal = &self.sub.signal;
        for attempt in 0..=RETRY_DELAYS.len() {
            if let Some(delay) = attempt.checked_sub(1).map(|i| RETRY_DELAYS[i]) {
                tokio::select! {
                    biased;
                    () = signal.notified() => {}
                    () = tokio::time::sleep(delay) => {}
                }
            }
            let report = if attempt == RETRY_DELAYS.len() {
                OnFailure::Report
            } else {
                OnFailure::Quiet
            };
            // Held for the read only, not across the retries' waits.
            let permit = self.reads.acquire().await;
            let seen = signal.events();
            let result = self
                .store
                .reload(Trigger::Watch, Recency::AfterNow, report)
                .await;
            drop(permit);
            signal.settle(seen);
            match result {
                None => return false,
                Some(Ok(_)) => break,
                Some(Err(_)) => {}
            }
        }
        true
    }
}

#[cfg(test)]
mod tests;
