//! The process-wide directory watch registry: one `notify` watcher per process, one watch
//! per directory, and each event routed to the stores of the file it names.
//!
//! A token file is watched through names in **directories**, non-recursively: the names of
//! its symlink chain and of the file at its end ([`chain`](super::chain)). A watch on the
//! file itself would follow the symlink to an inode that dies at the first rotation.
//!
//! - The [`Registry`] maps each canonical directory to its subscribers, by file name: an
//!   event for `tenant-7` wakes the stores of `tenant-7` only, however many files the
//!   directory holds ([`dispatch`](mod@dispatch)). An event that can concern every file of
//!   a directory (the directory itself removed or replaced, an overflow of the event queue,
//!   an error) wakes all of its subscribers, whose reads then go through the directory's
//!   [`read_limit`](Registry::read_limit): each reads its own file once, a few at a time.
//! - It owns at most one `notify` watcher, created with the first watched directory and
//!   dropped with the last one, so an idle process holds no inotify descriptor (inotify
//!   instances are limited to 128 per user by default, shared with every container of that
//!   user); and with the watcher, one thread that checks every watched directory is still
//!   the one at its path ([`health`]), once per directory however many stores watch it.
//! - Two locks, always taken in this order: `control` (the watcher, held across its
//!   `watch`/`unwatch` calls) and `table` (directories and subscribers, held briefly). The
//!   event handler runs on notify's thread and takes only `table`: `watch`/`unwatch` block
//!   on a reply from that thread, so it must never wait for `control`.
//! - A store subscribes through a [`Subscriber`], the names of its chain, and is woken
//!   through a coalescing [`Signal`] that counts events; what it does then is the watch
//!   loop's business (`super::watch`).
//!
//! The submodules are the registry's parts, each used by it and none using it: the
//! [`Signal`], the `table` of directories and subscribers, `dispatch` (what an event means)
//! and `health` (the check that each directory is still the one at its path).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use notify::{Event, RecursiveMode};
use tokio::sync::Semaphore;

use super::chain::Entry;
use crate::sync::lock;

mod dispatch;
mod health;
mod signal;
mod table;

use dispatch::dispatch;
pub(super) use signal::Signal;
pub(super) use table::READS_PER_DIR;
use table::{Dir, Table, identity, lost_reason};

/// How often each watched directory is checked to be still the one at its path. An
/// unmount (notify does not report `IN_UNMOUNT`) or a renamed ancestor sends no event, yet
/// leaves the watch on an inode that is no longer at the path.
pub(super) const VERIFY_EVERY: Duration = Duration::from_secs(5);

/// What the registry needs from a watcher; implemented by every `notify` watcher.
pub(crate) trait DirWatcher: Send {
    fn watch(&mut self, dir: &Path) -> notify::Result<()>;
    fn unwatch(&mut self, dir: &Path) -> notify::Result<()>;
}

impl<W: notify::Watcher + Send> DirWatcher for W {
    fn watch(&mut self, dir: &Path) -> notify::Result<()> {
        notify::Watcher::watch(self, dir, RecursiveMode::NonRecursive)
    }
    fn unwatch(&mut self, dir: &Path) -> notify::Result<()> {
        notify::Watcher::unwatch(self, dir)
    }
}

/// The callback a watcher calls, on its own thread, for each event.
pub(crate) type Handler = Box<dyn FnMut(notify::Result<Event>) + Send>;

/// Creates a watcher that calls the handler (injectable for tests).
pub(crate) type Factory = dyn Fn(Handler) -> notify::Result<Box<dyn DirWatcher>> + Send + Sync;

/// The registry every store uses: the crate's one piece of process-wide state, forced by a
/// system limit. Each `notify` watcher is an inotify instance, and inotify allows 128
/// instances per user by default (`fs.inotify.max_user_instances`), shared by every process
/// and container of that user on the node: one watcher per store would fail at the 129th
/// store of a process (the `scale` example loads 10,000), and starve the node's other
/// workloads long before. One watcher per process, with one watch per directory however
/// many stores watch it, holds one instance. It exists only while a store watches a file.
pub(super) static GLOBAL: LazyLock<Arc<Registry>> =
    LazyLock::new(|| Registry::new(VERIFY_EVERY, notify_factory()));

/// Creates the platform's `notify` watcher (inotify on Linux).
pub(crate) fn notify_factory() -> Box<Factory> {
    Box::new(|handler| {
        let watcher = <notify::RecommendedWatcher as notify::Watcher>::new(
            handler,
            notify::Config::default(),
        )?;
        Ok(Box::new(watcher) as Box<dyn DirWatcher>)
    })
}

struct Control {
    watcher: Option<Box<dyn DirWatcher>>,
    /// Checks the watched directories while the watcher exists.
    health: Option<health::Health>,
    /// Numbers watcher instances, so that a dropped watcher's late events are told apart.
    instance: u64,
}

/// What `release_if_idle` took out, for the caller to drop after releasing the lock.
type Released = Option<(Box<dyn DirWatcher>, Option<health::Health>)>;

/// Directories, their subscribers, and the one watcher that serves them.
pub(crate) struct Registry {
    factory: Box<Factory>,
    control: Mutex<Control>,
    table: Arc<Mutex<Table>>,
    next_id: AtomicU64,
    /// Subscribers alive.
    live: AtomicUsize,
    verify_every: Duration,
}

/// Counts for tests.
#[cfg(test)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Directories the watcher holds a watch for.
    pub(crate) directories: usize,
    /// Stores subscribed (each to the names of its chain).
    pub(crate) subscribers: usize,
    /// Whether a watcher (an inotify instance and its thread) exists.
    pub(crate) watcher: bool,
}

impl Registry {
    pub(crate) fn new(verify_every: Duration, factory: Box<Factory>) -> Arc<Self> {
        Arc::new(Self {
            factory,
            verify_every,
            control: Mutex::new(Control {
                watcher: None,
                health: None,
                instance: 0,
            }),
            table: Arc::default(),
            next_id: AtomicU64::new(0),
            live: AtomicUsize::new(0),
        })
    }

    #[cfg(test)]
    pub(crate) fn stats(&self) -> Stats {
        let watcher = lock(&self.control).watcher.is_some();
        Stats {
            directories: lock(&self.table).watched,
            subscribers: self.live.load(Ordering::Relaxed),
            watcher,
        }
    }

    /// The events routed so far to the subscribers of `name` in `dir`.
    #[cfg(test)]
    pub(crate) fn events_for(&self, dir: &Path, name: &str) -> u64 {
        let table = lock(&self.table);
        table
            .dirs
            .get(dir)
            .and_then(|d| d.names.get(std::ffi::OsStr::new(name)))
            .map_or(0, |subscribers| {
                subscribers.values().map(|s| s.events()).sum()
            })
    }

    /// Routes events for `entry` to `signal`, under subscriber `id`.
    fn register(&self, entry: &Entry, id: u64, signal: &Arc<Signal>) {
        let mut table = lock(&self.table);
        let d = table.dirs.entry(entry.dir.clone()).or_insert_with(Dir::new);
        let fresh = d
            .names
            .entry(entry.name.clone())
            .or_default()
            .insert(id, signal.clone())
            .is_none();
        if fresh {
            d.count += 1;
        }
    }

    /// Stops routing `entry`'s events to subscriber `id`; the directory's last entry takes
    /// its watch with it. O(1) in the number of subscribers.
    fn unregister(&self, entry: &Entry, id: u64) {
        {
            let mut table = lock(&self.table);
            let Some(d) = table.dirs.get_mut(&entry.dir) else {
                return;
            };
            if let Some(subscribers) = d.names.get_mut(&entry.name)
                && subscribers.remove(&id).is_some()
            {
                d.count -= 1;
                if subscribers.is_empty() {
                    d.names.remove(&entry.name);
                }
            }
            if d.count > 0 {
                return;
            }
        }
        // The last one: drop the directory and its watch, under `control` (lock order).
        let mut control = lock(&self.control);
        let unwatch = {
            let mut table = lock(&self.table);
            match table.dirs.get(&entry.dir) {
                Some(d) if d.count == 0 => table.remove(&entry.dir).is_some_and(|d| d.watched),
                _ => false,
            }
        };
        if unwatch {
            if let Some(watcher) = control.watcher.as_mut() {
                let _ = watcher.unwatch(&entry.dir);
            }
            tracing::debug!(dir = %entry.dir.display(), "stopped watching token directory");
        }
        let released = self.release_if_idle(&mut control);
        drop(control);
        drop(released);
    }

    /// The semaphore that bounds the reads of `dir`'s stores (a fresh one if `dir` has no
    /// subscriber).
    pub(super) fn read_limit(&self, dir: &Path) -> Arc<Semaphore> {
        lock(&self.table).dirs.get(dir).map_or_else(
            || Arc::new(Semaphore::new(READS_PER_DIR)),
            |d| d.reads.clone(),
        )
    }

    /// Makes sure `dir` is watched; returns the epoch of its watch or why it is not.
    pub(super) fn arm(&self, dir: &Path) -> Result<u64, String> {
        let not_subscribed = || format!("{} is not subscribed", dir.display());
        match lock(&self.table).dirs.get(dir) {
            None => return Err(not_subscribed()),
            Some(d) if d.armed => return Ok(d.epoch),
            Some(_) => {}
        }
        // Taken before the watch (and outside `control`: a directory that stops answering
        // holds this thread, not the other stores' watches): if the directory is replaced
        // in between, the next check sees a change and re-arms, rather than missing one.
        let identity = identity(dir);
        let mut control = lock(&self.control);
        let (stale, failure) = match lock(&self.table).dirs.get(dir) {
            None => return Err(not_subscribed()),
            Some(d) if d.armed => return Ok(d.epoch),
            Some(d) => (d.watched, d.failure.clone()),
        };
        if stale {
            // A directory renamed away keeps its watch: drop it before watching the path.
            if let Some(watcher) = control.watcher.as_mut() {
                let _ = watcher.unwatch(dir);
            }
            lock(&self.table).set_watched(dir, false);
        }
        let result = match identity {
            Some(_) => self.watch(&mut control, dir),
            // Lost (and said so) before: the same reason, not a second warning.
            None => Err(failure
                .filter(|f| *f == lost_reason(dir))
                .unwrap_or_else(|| format!("directory {} does not exist", dir.display()))),
        };
        let result = result.and_then(|()| {
            let mut table = lock(&self.table);
            table.set_watched(dir, true);
            let d = table.dirs.get_mut(dir).ok_or_else(not_subscribed)?;
            d.armed = true;
            d.epoch += 1;
            d.instance = control.instance;
            d.identity = identity;
            if let Some(reason) = d.failure.take() {
                tracing::info!(dir = %dir.display(), %reason, "token directory watch re-armed");
            } else {
                tracing::info!(dir = %dir.display(), "watching token directory");
            }
            Ok(d.epoch)
        });
        if let Err(reason) = &result {
            if let Some(d) = lock(&self.table).dirs.get_mut(dir)
                && d.failure.as_ref() != Some(reason)
            {
                tracing::warn!(
                    dir = %dir.display(),
                    %reason,
                    "cannot watch the token directory; the timer still refreshes the token"
                );
                d.failure = Some(reason.clone());
            }
            let released = self.release_if_idle(&mut control);
            drop(control);
            drop(released);
        }
        result
    }

    /// Adds a watch for `dir`, creating the watcher (and its health check) first if there
    /// is none.
    fn watch(&self, control: &mut Control, dir: &Path) -> Result<(), String> {
        if control.watcher.is_none() {
            let instance = control.instance + 1;
            let table = self.table.clone();
            let handler: Handler = Box::new(move |event| dispatch(&table, instance, event));
            let watcher =
                (self.factory)(handler).map_err(|e| format!("cannot start a file watcher: {e}"))?;
            control.instance = instance;
            control.watcher = Some(watcher);
            control.health = health::start(Arc::downgrade(&self.table), self.verify_every);
            tracing::debug!(instance, "file watcher started");
        }
        let watcher = control.watcher.as_mut().expect("created above");
        watcher
            .watch(dir)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))
    }

    /// Takes the watcher out when no directory is watched, for the caller to drop after
    /// releasing the lock (its thread then closes the inotify descriptor and exits).
    fn release_if_idle(&self, control: &mut Control) -> Released {
        if lock(&self.table).watched > 0 {
            return None;
        }
        let watcher = control.watcher.take()?;
        tracing::debug!(instance = control.instance, "file watcher stopped");
        Some((watcher, control.health.take()))
    }
}

/// A store's interest in the names of its chain; unsubscribes from all when dropped.
pub(crate) struct Subscriber {
    registry: Arc<Registry>,
    id: u64,
    pub(crate) signal: Arc<Signal>,
    entries: Vec<Entry>,
}

impl Subscriber {
    /// A subscriber woken through `signal`, subscribed to nothing yet.
    pub(crate) fn new(registry: &Arc<Registry>, signal: Signal) -> Self {
        registry.live.fetch_add(1, Ordering::Relaxed);
        Self {
            registry: registry.clone(),
            id: registry.next_id.fetch_add(1, Ordering::Relaxed),
            signal: Arc::new(signal),
            entries: Vec::new(),
        }
    }

    /// Watches exactly `entries` (new ones are added before old ones go, so that a
    /// directory that stays is not unwatched in between), and returns the state of each
    /// directory: the epoch of its watch, or why it is not watched.
    pub(crate) fn watch(&mut self, entries: Vec<Entry>) -> Vec<(PathBuf, Result<u64, String>)> {
        if entries != self.entries {
            for entry in entries.iter().filter(|e| !self.entries.contains(e)) {
                self.registry.register(entry, self.id, &self.signal);
            }
            for entry in self.entries.iter().filter(|e| !entries.contains(e)) {
                self.registry.unregister(entry, self.id);
            }
            self.entries = entries;
        }
        let mut states: Vec<(PathBuf, Result<u64, String>)> = Vec::new();
        for entry in &self.entries {
            if !states.iter().any(|(dir, _)| *dir == entry.dir) {
                states.push((entry.dir.clone(), self.registry.arm(&entry.dir)));
            }
        }
        states
    }
}

impl Drop for Subscriber {
    /// Unsubscribes on the blocking pool when dropped in a runtime: the last subscriber of
    /// a directory unwatches it, under the lock that a watch of a directory that stops
    /// answering may hold.
    fn drop(&mut self) {
        let (registry, id) = (self.registry.clone(), self.id);
        let entries = std::mem::take(&mut self.entries);
        let unsubscribe = move || {
            for entry in &entries {
                registry.unregister(entry, id);
            }
            registry.live.fetch_sub(1, Ordering::Relaxed);
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => drop(runtime.spawn_blocking(unsubscribe)),
            Err(_) => unsubscribe(),
        }
    }
}

#[cfg(test)]
mod tests;
