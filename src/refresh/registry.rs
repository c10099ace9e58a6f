//! The process-wide directory watch registry: one `notify` watcher per process, one watch
//! per directory, however many stores watch files there.
//!
//! A token file is watched through its **parent directory**, non-recursively: the kubelet
//! replaces `..data`, not `token`, and a watch on the file itself would follow the symlink
//! to an inode that dies at the first rotation. Any create, modify, remove or rename in the
//! directory (whatever the file name), an overflow, or a watcher error wakes every store
//! subscribed to that directory.
//!
//! - The [`Registry`] maps each canonical directory to its subscribers. It owns at most one
//!   `notify` watcher, created with the first watched directory and dropped with the last
//!   one, so an idle process holds no inotify descriptor (inotify instances are limited to
//!   128 per user by default, shared with every container of that user).
//! - Two locks, always taken in this order: `control` (the watcher, held across its
//!   `watch`/`unwatch` calls) and `table` (directories and subscribers, held briefly). The
//!   event handler runs on notify's thread and takes only `table`: `watch`/`unwatch` block
//!   on a reply from that thread, so it must never wait for `control`.
//! - A subscriber is woken through a coalescing [`Notify`]; what it does then is the watch
//!   loop's business (`super::watch`).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use notify::{Event, RecursiveMode};
use tokio::sync::Notify;

use crate::sync::lock;

/// How often a quiet store checks that its directory is still the one watched. An unmount
/// (notify does not report `IN_UNMOUNT`) or a renamed ancestor sends no event, yet leaves
/// the watch on an inode that is no longer at the path.
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

/// The registry every store uses.
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

/// One watched (or to-be-watched) directory.
struct Dir {
    subscribers: Vec<(u64, Arc<Notify>)>,
    /// The watcher holds a watch for this directory (maybe a stale one, after a rename).
    watched: bool,
    /// Events for this directory are flowing.
    armed: bool,
    /// Counts successful arms, so that a subscriber can tell a stale loss from a new one.
    epoch: u64,
    /// The watcher instance that holds the watch.
    instance: u64,
    /// Device and inode of the directory when it was armed.
    identity: Option<(u64, u64)>,
    /// The failure last logged for this directory: each is logged once.
    failure: Option<String>,
}

impl Dir {
    fn wake(&self) {
        for (_, signal) in &self.subscribers {
            signal.notify_one();
        }
    }
}

type Table = Mutex<HashMap<PathBuf, Dir>>;

struct Control {
    watcher: Option<Box<dyn DirWatcher>>,
    /// Numbers watcher instances, so that a dropped watcher's late events are told apart.
    instance: u64,
}

/// Directories, their subscribers, and the one watcher that serves them.
pub(crate) struct Registry {
    factory: Box<Factory>,
    control: Mutex<Control>,
    table: Arc<Table>,
    next_id: AtomicU64,
    pub(super) verify_every: Duration,
}

/// Counts for tests and debugging.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Directories the watcher holds a watch for.
    pub(crate) directories: usize,
    /// Stores subscribed, over all directories.
    pub(crate) subscribers: usize,
    /// Whether a watcher (an inotify instance and its thread) exists.
    pub(crate) watcher: bool,
}

/// The process-wide registry's counts.
#[cfg_attr(not(feature = "testing"), allow(dead_code))]
pub(crate) fn stats() -> Stats {
    GLOBAL.stats()
}

impl Registry {
    pub(crate) fn new(verify_every: Duration, factory: Box<Factory>) -> Arc<Self> {
        Arc::new(Self {
            factory,
            verify_every,
            control: Mutex::new(Control {
                watcher: None,
                instance: 0,
            }),
            table: Arc::default(),
            next_id: AtomicU64::new(0),
        })
    }

    pub(crate) fn stats(&self) -> Stats {
        let watcher = lock(&self.control).watcher.is_some();
        let table = lock(&self.table);
        Stats {
            directories: table.values().filter(|d| d.watched).count(),
            subscribers: table.values().map(|d| d.subscribers.len()).sum(),
            watcher,
        }
    }

    /// Subscribes to events in `dir` (a canonical path) and tries to watch it.
    pub(super) fn subscribe(self: &Arc<Self>, dir: PathBuf) -> (Subscription, Result<u64, String>) {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let signal = Arc::new(Notify::new());
        lock(&self.table)
            .entry(dir.clone())
            .or_insert_with(|| Dir {
                subscribers: Vec::new(),
                watched: false,
                armed: false,
                epoch: 0,
                instance: 0,
                identity: None,
                failure: None,
            })
            .subscribers
            .push((id, signal.clone()));
        let sub = Subscription {
            registry: self.clone(),
            dir,
            id,
            signal,
        };
        let armed = self.arm(&sub.dir);
        (sub, armed)
    }

    /// Makes sure `dir` is watched; returns the epoch of its watch or why it is not.
    pub(super) fn arm(&self, dir: &Path) -> Result<u64, String> {
        let mut control = lock(&self.control);
        let stale = match lock(&self.table).get(dir) {
            None => return Err(format!("{} is not subscribed", dir.display())),
            Some(d) if d.armed => return Ok(d.epoch),
            Some(d) => d.watched,
        };
        if stale {
            // A directory renamed away keeps its watch: drop it before watching the path.
            if let Some(watcher) = control.watcher.as_mut() {
                let _ = watcher.unwatch(dir);
            }
            if let Some(d) = lock(&self.table).get_mut(dir) {
                d.watched = false;
            }
        }
        // Taken before the watch: if the directory is replaced in between, the next check
        // sees a change and re-arms, rather than missing one.
        let identity = identity(dir);
        let result = match identity {
            Some(_) => self.watch(&mut control, dir),
            None => Err(format!("directory {} does not exist", dir.display())),
        };
        match result {
            Ok(()) => {
                let mut table = lock(&self.table);
                let Some(d) = table.get_mut(dir) else {
                    // Unsubscribed meanwhile (cannot happen under `control`); undo.
                    drop(table);
                    if let Some(watcher) = control.watcher.as_mut() {
                        let _ = watcher.unwatch(dir);
                    }
                    return Err(format!("{} is not subscribed", dir.display()));
                };
                d.watched = true;
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
            }
            Err(reason) => {
                if let Some(d) = lock(&self.table).get_mut(dir)
                    && d.failure.as_ref() != Some(&reason)
                {
                    tracing::warn!(
                        dir = %dir.display(),
                        %reason,
                        "cannot watch the token directory; the timer still refreshes the token"
                    );
                    d.failure = Some(reason.clone());
                }
                let idle = self.release_if_idle(&mut control);
                drop(control);
                drop(idle);
                Err(reason)
            }
        }
    }

    /// Adds a watch for `dir`, creating the watcher first if there is none.
    fn watch(&self, control: &mut Control, dir: &Path) -> Result<(), String> {
        if control.watcher.is_none() {
            let instance = control.instance + 1;
            let table = self.table.clone();
            let handler: Handler = Box::new(move |event| dispatch(&table, instance, event));
            let watcher =
                (self.factory)(handler).map_err(|e| format!("cannot start a file watcher: {e}"))?;
            control.instance = instance;
            control.watcher = Some(watcher);
            tracing::debug!(instance, "file watcher started");
        }
        let watcher = control.watcher.as_mut().expect("created above");
        watcher
            .watch(dir)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))
    }

    /// After `dir` was found lost at `epoch`: drops its (possibly stale) watch unless it
    /// was re-armed since.
    pub(super) fn disarm(&self, dir: &Path, epoch: u64) {
        let mut control = lock(&self.control);
        let unwatch = match lock(&self.table).get_mut(dir) {
            Some(d) if !d.armed && d.epoch == epoch && d.watched => {
                d.watched = false;
                true
            }
            _ => false,
        };
        if unwatch && let Some(watcher) = control.watcher.as_mut() {
            // WatchNotFound when the directory was deleted: its watch is already gone.
            let _ = watcher.unwatch(dir);
        }
        let idle = self.release_if_idle(&mut control);
        drop(control);
        drop(idle);
    }

    /// Checks that `dir` is still the directory that was armed; marks it lost otherwise.
    pub(super) fn verify(&self, dir: &Path) {
        let now = identity(dir);
        let mut table = lock(&self.table);
        if let Some(d) = table.get_mut(dir)
            && d.armed
            && d.identity != now
        {
            mark_lost(dir, d);
            d.wake();
        }
    }

    /// Whether `dir` is armed, and at which epoch.
    pub(super) fn armed(&self, dir: &Path) -> Option<u64> {
        lock(&self.table)
            .get(dir)
            .filter(|d| d.armed)
            .map(|d| d.epoch)
    }

    fn unsubscribe(&self, dir: &Path, id: u64) {
        let mut control = lock(&self.control);
        let unwatch = {
            let mut table = lock(&self.table);
            let Some(d) = table.get_mut(dir) else {
                return;
            };
            d.subscribers.retain(|(sid, _)| *sid != id);
            if d.subscribers.is_empty() {
                let watched = d.watched;
                table.remove(dir);
                watched
            } else {
                false
            }
        };
        if unwatch {
            if let Some(watcher) = control.watcher.as_mut() {
                let _ = watcher.unwatch(dir);
            }
            tracing::debug!(dir = %dir.display(), "stopped watching token directory");
        }
        let idle = self.release_if_idle(&mut control);
        drop(control);
        drop(idle);
    }

    /// Takes the watcher out when no directory is watched, for the caller to drop after
    /// releasing the lock (its thread then closes the inotify descriptor and exits).
    fn release_if_idle(&self, control: &mut Control) -> Option<Box<dyn DirWatcher>> {
        if control.watcher.is_some() && !lock(&self.table).values().any(|d| d.watched) {
            tracing::debug!(instance = control.instance, "file watcher stopped");
            control.watcher.take()
        } else {
            None
        }
    }
}

pub(super) fn lost_reason(dir: &Path) -> String {
    format!(
        "directory {} was removed, renamed or unmounted",
        dir.display()
    )
}

/// Device and inode of a directory, or `None` when there is no directory at `dir`.
fn identity(dir: &Path) -> Option<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata(dir)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| (m.dev(), m.ino()))
}

/// A store's interest in one directory; unsubscribes when dropped.
pub(super) struct Subscription {
    pub(super) registry: Arc<Registry>,
    pub(super) dir: PathBuf,
    id: u64,
    pub(super) signal: Arc<Notify>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.registry.unsubscribe(&self.dir, self.id);
    }
}

mod dispatch;

use dispatch::{dispatch, mark_lost};
