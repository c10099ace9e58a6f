//! The directory watcher: one `notify` watcher per process, one watch per directory.
//!
//! A token file is watched through its **parent directory**, non-recursively: the kubelet
//! replaces `..data`, not `token`, and a watch on the file itself would follow the symlink
//! to an inode that dies at the first rotation. Any create, modify, remove or rename in the
//! directory (whatever the file name), an overflow, or a watcher error wakes every store
//! subscribed to that directory.
//!
//! # Design
//! - A process-wide [`Registry`] maps each canonical directory to its subscribers. It owns
//!   at most one `notify` watcher, created with the first watched directory and dropped
//!   with the last one, so an idle process holds no inotify descriptor (inotify instances
//!   are limited to 128 per user by default, shared with every container of that user).
//! - Two locks, always taken in this order: `control` (the watcher, held across its
//!   `watch`/`unwatch` calls) and `table` (directories and subscribers, held briefly). The
//!   event handler runs on notify's thread and takes only `table`: `watch`/`unwatch` block
//!   on a reply from that thread, so it must never wait for `control`.
//! - Each store has a task (aborted with the store) that owns its [`Subscription`]. It
//!   waits on a coalescing [`Notify`], then reads the file again; a read that fails right
//!   after an event is retried after 10, 50 and 250 ms before it counts as a failure.
//! - When the directory is removed or renamed away, or cannot be watched at all, the store
//!   reports [`WatchState::Degraded`] (the timer keeps working) and its task polls, with a
//!   backoff, until the directory can be watched again, then reloads.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecursiveMode};
use tokio::sync::Notify;

use crate::store::{TokenStore, Trigger, WatchState, WeakStore, lock};

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

/// How often a quiet store checks that its directory is still the one watched. An unmount
/// (notify does not report `IN_UNMOUNT`) or a renamed ancestor sends no event, yet leaves
/// the watch on an inode that is no longer at the path.
const VERIFY_EVERY: Duration = Duration::from_secs(5);

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
static GLOBAL: LazyLock<Arc<Registry>> =
    LazyLock::new(|| Registry::new(VERIFY_EVERY, notify_factory()));

/// Creates the platform's `notify` watcher (inotify on Linux).
fn notify_factory() -> Box<Factory> {
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
    verify_every: Duration,
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
    fn subscribe(self: &Arc<Self>, dir: PathBuf) -> (Subscription, Result<u64, String>) {
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
    fn arm(&self, dir: &Path) -> Result<u64, String> {
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
    fn disarm(&self, dir: &Path, epoch: u64) {
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
    fn verify(&self, dir: &Path) {
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
    fn armed(&self, dir: &Path) -> Option<u64> {
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

/// Whether an event can mean that the token file changed. Opening or reading a file (our
/// own reads included) cannot; a writer closing it can.
fn relevant(kind: &EventKind) -> bool {
    match kind {
        EventKind::Access(AccessKind::Close(AccessMode::Write)) => true,
        EventKind::Access(_) => false,
        EventKind::Any
        | EventKind::Create(_)
        | EventKind::Modify(_)
        | EventKind::Remove(_)
        | EventKind::Other => true,
    }
}

/// Whether an event on the watched directory itself means it is gone from its path.
fn gone(kind: &EventKind) -> bool {
    matches!(
        kind,
        EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(RenameMode::From))
    )
}

/// The event handler: wakes the subscribers an event concerns. Runs on notify's thread.
fn dispatch(table: &Table, instance: u64, event: notify::Result<Event>) {
    let mut table = lock(table);
    let wake_all = |table: &HashMap<PathBuf, Dir>| table.values().for_each(Dir::wake);
    match event {
        Ok(event) if event.need_rescan() => {
            tracing::debug!("file watcher overflow; re-reading every watched token");
            wake_all(&table);
        }
        Ok(event) => {
            if !relevant(&event.kind) {
                return;
            }
            if event.paths.is_empty() {
                wake_all(&table);
                return;
            }
            for path in &event.paths {
                if let Some(d) = table.get_mut(path.as_path()) {
                    if gone(&event.kind) && d.armed && d.instance == instance {
                        mark_lost(path, d);
                    }
                    d.wake();
                }
                if let Some(d) = path.parent().and_then(|p| table.get(p)) {
                    d.wake();
                }
            }
        }
        Err(error) => {
            tracing::debug!(%error, "file watcher error; re-reading the tokens it concerns");
            let mut matched = false;
            for path in &error.paths {
                for key in [Some(path.as_path()), path.parent()].into_iter().flatten() {
                    if let Some(d) = table.get(key) {
                        d.wake();
                        matched = true;
                    }
                }
            }
            if !matched {
                wake_all(&table);
            }
        }
    }
}

/// Marks `dir` as no longer watched at its path, with one warning.
fn mark_lost(dir: &Path, d: &mut Dir) {
    d.armed = false;
    tracing::warn!(
        dir = %dir.display(),
        "token directory disappeared; the timer still refreshes the token and the watch \
         re-arms when it comes back"
    );
    d.failure = Some(lost_reason(dir));
}

fn lost_reason(dir: &Path) -> String {
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
struct Subscription {
    registry: Arc<Registry>,
    dir: PathBuf,
    id: u64,
    signal: Arc<Notify>,
}

impl Drop for Subscription {
    fn drop(&mut self) {
        self.registry.unsubscribe(&self.dir, self.id);
    }
}

/// The directory watched for `file`: its parent, canonicalized (the file itself is often a
/// symlink, which must not be followed).
fn directory_of(file: &Path) -> PathBuf {
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::canonicalize(parent)
        .or_else(|_| std::path::absolute(parent))
        .unwrap_or_else(|_| parent.to_owned())
}

/// Starts watching `path`'s directory for `store`, through the process-wide registry.
pub(crate) fn start(store: &TokenStore, path: &Path) {
    start_with(&GLOBAL, store, path);
}

/// Starts watching `path`'s directory for `store` through `registry`. Must be called
/// within a tokio runtime.
pub(crate) fn start_with(registry: &Arc<Registry>, store: &TokenStore, path: &Path) {
    let dir = directory_of(path);
    let (sub, armed) = registry.subscribe(dir);
    match &armed {
        Ok(_) => store.set_watch_state(WatchState::Active),
        Err(reason) => store.set_watch_state(WatchState::Degraded {
            reason: reason.clone(),
        }),
    }
    let task = tokio::spawn(run(store.downgrade(), sub, armed));
    store.add_task(task.abort_handle());
}

/// The store's watch task: reload on each wake-up; while degraded, try to re-arm.
async fn run(store: WeakStore, sub: Subscription, mut armed: Result<u64, String>) {
    loop {
        armed = match armed {
            // Checked before each wait, not only after a wake-up: the event that marked the
            // directory lost may have been consumed by a retry's wait.
            Ok(epoch) => match sub.registry.armed(&sub.dir) {
                // Another store of this directory re-armed it while this task was busy: the
                // file may have changed while nobody watched.
                Some(now) if now != epoch => {
                    if let Some(s) = store.upgrade() {
                        s.set_watch_state(WatchState::Active);
                    }
                    if !reload_after_event(&store, &sub.signal).await {
                        return;
                    }
                    Ok(now)
                }
                Some(epoch) => {
                    let woken = tokio::select! {
                        () = sub.signal.notified() => true,
                        () = tokio::time::sleep(sub.registry.verify_every) => false,
                    };
                    if !woken {
                        sub.registry.verify(&sub.dir);
                    } else if sub.registry.armed(&sub.dir).is_some()
                        && !reload_after_event(&store, &sub.signal).await
                    {
                        return;
                    }
                    Ok(epoch)
                }
                None => {
                    sub.registry.disarm(&sub.dir, epoch);
                    let reason = lost_reason(&sub.dir);
                    let Some(s) = store.upgrade() else { return };
                    s.set_watch_state(WatchState::Degraded {
                        reason: reason.clone(),
                    });
                    Err(reason)
                }
            },
            Err(reason) => match rearm(&store, &sub, reason).await {
                Some(epoch) => {
                    if !reload_after_event(&store, &sub.signal).await {
                        return;
                    }
                    Ok(epoch)
                }
                None => return,
            },
        };
    }
}

/// Waits, with a backoff, until the directory can be watched again; `None` when the store
/// is gone.
async fn rearm(store: &WeakStore, sub: &Subscription, mut reason: String) -> Option<u64> {
    let mut delay = REARM_FIRST;
    loop {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(REARM_MAX);
        let exists = sub.dir.is_dir();
        let store = store.upgrade()?;
        if !exists {
            continue;
        }
        match sub.registry.arm(&sub.dir) {
            Ok(epoch) => {
                store.set_watch_state(WatchState::Active);
                return Some(epoch);
            }
            Err(now) if now != reason => {
                store.set_watch_state(WatchState::Degraded {
                    reason: now.clone(),
                });
                reason = now;
            }
            Err(_) => {}
        }
    }
}

/// Reads the file again after an event. A failed read is retried after each delay in
/// [`RETRY_DELAYS`], or sooner when another event comes; only the last failure is reported.
/// Returns `false` when the store is gone.
async fn reload_after_event(store: &WeakStore, signal: &Notify) -> bool {
    for attempt in 0..=RETRY_DELAYS.len() {
        if let Some(delay) = attempt.checked_sub(1).map(|i| RETRY_DELAYS[i]) {
            tokio::select! {
                biased;
                () = signal.notified() => {}
                () = tokio::time::sleep(delay) => {}
            }
        }
        let Some(store) = store.upgrade() else {
            return false;
        };
        let last = attempt == RETRY_DELAYS.len();
        if store.reload_as(Trigger::Watch, true, last).await.is_ok() {
            break;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::TokenFile;
    use futures_util::FutureExt;
    use std::sync::atomic::AtomicBool;
    use std::time::Instant;

    const DEADLINE: Duration = Duration::from_secs(5);

    /// A factory that fails like `inotify_init` with its instances exhausted while `fail`
    /// is set.
    fn flaky_factory(fail: Arc<AtomicBool>) -> Box<Factory> {
        let real = notify_factory();
        Box::new(move |handler| {
            if fail.load(Ordering::SeqCst) {
                Err(notify::Error::io(std::io::Error::from_raw_os_error(24)))
            } else {
                real(handler)
            }
        })
    }

    async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
        let start = Instant::now();
        while !cond() {
            assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    async fn store_with(
        registry: &Arc<Registry>,
        path: &Path,
        timer: Option<Duration>,
    ) -> TokenStore {
        let store = TokenFile::new(path)
            .watch(false)
            .refresh_interval(timer)
            .load()
            .await
            .unwrap();
        start_with(registry, &store, path);
        store
    }

    async fn wait_for_token(store: &TokenStore, token: &str) {
        let mut rx = store.subscribe();
        let want = format!("Bearer {token}");
        tokio::time::timeout(DEADLINE, async {
            while store.current().header_value() != want.as_str() {
                rx.changed().await.unwrap();
            }
        })
        .await
        .unwrap_or_else(|_| panic!("timed out waiting for {token}"));
    }

    fn degraded(store: &TokenStore) -> Option<String> {
        match store.status().watch {
            WatchState::Degraded { reason } => Some(reason),
            _ => None,
        }
    }

    #[test]
    fn dispatch_wakes_the_subscribers_an_event_concerns() {
        let table: Table = Mutex::default();
        let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
        for (dir, signal) in [("/w/a", &a), ("/w/b", &b)] {
            lock(&table).insert(
                PathBuf::from(dir),
                Dir {
                    subscribers: vec![(0, signal.clone())],
                    watched: true,
                    armed: true,
                    epoch: 1,
                    instance: 1,
                    identity: None,
                    failure: None,
                },
            );
        }
        let woken = |n: &Notify| n.notified().now_or_never().is_some();
        let ev = |kind, path: &str| Ok(Event::new(kind).add_path(PathBuf::from(path)));
        use notify::event::{CreateKind, DataChange, RemoveKind};

        for kind in [
            EventKind::Create(CreateKind::File),
            EventKind::Modify(ModifyKind::Data(DataChange::Any)),
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            EventKind::Remove(RemoveKind::Folder),
            EventKind::Access(AccessKind::Close(AccessMode::Write)),
        ] {
            dispatch(&table, 1, ev(kind, "/w/a/..data"));
            assert!(woken(&a), "{kind:?}");
            assert!(!woken(&b), "{kind:?}");
        }
        // Reads (ours included) and events elsewhere wake nobody.
        for kind in [
            EventKind::Access(AccessKind::Open(AccessMode::Any)),
            EventKind::Access(AccessKind::Close(AccessMode::Read)),
        ] {
            dispatch(&table, 1, ev(kind, "/w/a/token"));
        }
        dispatch(&table, 1, ev(EventKind::Create(CreateKind::File), "/w/c/x"));
        dispatch(
            &table,
            1,
            ev(EventKind::Create(CreateKind::File), "/w/a/sub/x"),
        );
        assert!(!woken(&a) && !woken(&b));

        // Overflow, errors without a path, and errors naming a directory.
        dispatch(
            &table,
            1,
            Ok(Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan)),
        );
        assert!(woken(&a) && woken(&b));
        dispatch(&table, 1, Err(notify::Error::generic("boom")));
        assert!(woken(&a) && woken(&b));
        dispatch(
            &table,
            1,
            Err(notify::Error::generic("boom").add_path(PathBuf::from("/w/b/token"))),
        );
        assert!(!woken(&a) && woken(&b));

        // The directory itself removed or renamed away: lost, once, and only for the
        // watcher instance that holds its watch.
        dispatch(&table, 2, ev(EventKind::Remove(RemoveKind::Folder), "/w/a"));
        assert!(woken(&a));
        assert!(lock(&table)[Path::new("/w/a")].armed, "a stale instance");
        dispatch(
            &table,
            1,
            ev(
                EventKind::Modify(ModifyKind::Name(RenameMode::From)),
                "/w/a",
            ),
        );
        assert!(woken(&a) && !woken(&b));
        assert!(!lock(&table)[Path::new("/w/a")].armed);
        assert!(lock(&table)[Path::new("/w/b")].armed);
    }

    #[test]
    fn the_watched_directory_is_the_canonical_parent() {
        let tmp = tempfile::tempdir().unwrap();
        let real = tmp.path().canonicalize().unwrap().join("real");
        std::fs::create_dir(&real).unwrap();
        std::os::unix::fs::symlink(&real, tmp.path().join("link")).unwrap();
        std::os::unix::fs::symlink("elsewhere", real.join("token")).unwrap();
        assert_eq!(directory_of(&tmp.path().join("link/token")), real);
        assert_eq!(directory_of(&tmp.path().join("link/./token")), real);
        assert_eq!(directory_of(&real.join("token")), real, "file not followed");
        assert_eq!(
            directory_of(Path::new("token")),
            std::env::current_dir().unwrap().canonicalize().unwrap()
        );
    }

    /// Collects formatted log lines.
    #[derive(Clone, Default)]
    struct Logs(Arc<Mutex<Vec<u8>>>);

    impl std::io::Write for Logs {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            lock(&self.0).extend_from_slice(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Logs {
        fn count(&self, needle: &str) -> usize {
            String::from_utf8_lossy(&lock(&self.0))
                .matches(needle)
                .count()
        }
    }

    #[tokio::test]
    async fn a_watcher_that_cannot_start_degrades_and_the_timer_still_refreshes() {
        let logs = Logs::default();
        let writer = logs.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || writer.clone())
            .with_ansi(false)
            .with_max_level(tracing::Level::DEBUG)
            .finish();
        let _guard = tracing::subscriber::set_default(subscriber);

        let registry = Registry::new(VERIFY_EVERY, flaky_factory(Arc::new(AtomicBool::new(true))));
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("token");
        std::fs::write(&path, "secret-one").unwrap();
        let store = store_with(&registry, &path, Some(Duration::from_millis(100))).await;
        let reason = degraded(&store).expect("degraded");
        assert!(reason.contains("cannot start a file watcher"), "{reason}");
        assert_eq!(
            registry.stats(),
            Stats {
                directories: 0,
                subscribers: 1,
                watcher: false
            }
        );

        std::fs::write(&path, "secret-two").unwrap();
        wait_for_token(&store, "secret-two").await;
        // Several re-arm attempts later: still one warning, still degraded.
        tokio::time::sleep(Duration::from_millis(700)).await;
        assert!(degraded(&store).is_some());
        assert_eq!(logs.count("WARN"), 1, "one warning, not one per attempt");
        assert_eq!(logs.count("secret-"), 0, "no token in the logs");

        drop(store);
        eventually("unsubscribed", || registry.stats().subscribers == 0).await;
    }

    #[tokio::test]
    async fn the_watch_re_arms_when_the_watcher_can_start_again() {
        let fail = Arc::new(AtomicBool::new(true));
        let registry = Registry::new(VERIFY_EVERY, flaky_factory(fail.clone()));
        let tmp = tempfile::tempdir().unwrap();
        let path = tmp.path().join("token");
        std::fs::write(&path, "one").unwrap();
        let store = store_with(&registry, &path, None).await;
        assert!(degraded(&store).is_some());

        fail.store(false, Ordering::SeqCst);
        eventually("re-armed", || store.status().watch == WatchState::Active).await;
        assert_eq!(registry.stats().directories, 1);
        std::fs::write(&path, "two").unwrap();
        wait_for_token(&store, "two").await;
    }

    #[tokio::test]
    async fn stores_share_one_watch_per_directory_and_release_it() {
        let registry = Registry::new(VERIFY_EVERY, notify_factory());
        let tmp = tempfile::tempdir().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        for dir in [&a, &b] {
            std::fs::create_dir(dir).unwrap();
            std::fs::write(dir.join("t1"), "x").unwrap();
            std::fs::write(dir.join("t2"), "y").unwrap();
        }
        let stores = vec![
            store_with(&registry, &a.join("t1"), None).await,
            store_with(&registry, &a.join("t1"), None).await,
            store_with(&registry, &a.join("./t2"), None).await,
            store_with(&registry, &b.join("t1"), None).await,
        ];
        assert_eq!(
            registry.stats(),
            Stats {
                directories: 2,
                subscribers: 4,
                watcher: true
            }
        );
        std::fs::write(a.join("t2"), "z").unwrap();
        wait_for_token(&stores[2], "z").await;

        let mut stores = stores;
        stores.truncate(1);
        eventually("3 unsubscribed", || registry.stats().subscribers == 1).await;
        assert_eq!(registry.stats().directories, 1);
        drop(stores);
        eventually("all released", || {
            registry.stats()
                == Stats {
                    directories: 0,
                    subscribers: 0,
                    watcher: false,
                }
        })
        .await;
    }

    #[tokio::test]
    async fn a_directory_renamed_away_degrades_then_re_arms() {
        let registry = Registry::new(VERIFY_EVERY, notify_factory());
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("d");
        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("token"), "one").unwrap();
        let store = store_with(&registry, &dir.join("token"), None).await;
        assert_eq!(store.status().watch, WatchState::Active);

        std::fs::rename(&dir, tmp.path().join("moved")).unwrap();
        eventually("degraded", || degraded(&store).is_some()).await;
        // The moved directory's watch is dropped at once.
        eventually("unwatched", || registry.stats().directories == 0).await;

        std::fs::create_dir(&dir).unwrap();
        std::fs::write(dir.join("token"), "two").unwrap();
        wait_for_token(&store, "two").await;
        eventually("re-armed", || store.status().watch == WatchState::Active).await;
        assert_eq!(registry.stats().directories, 1);
        // Events flow from the new directory.
        std::fs::write(dir.join("token"), "three").unwrap();
        wait_for_token(&store, "three").await;
    }

    #[tokio::test]
    async fn a_renamed_ancestor_sends_no_event_but_is_noticed() {
        let registry = Registry::new(Duration::from_millis(50), notify_factory());
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("a/d");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "one").unwrap();
        let store = store_with(&registry, &dir.join("token"), None).await;

        // The watch stays on the moved inode: only the periodic check can tell.
        std::fs::rename(tmp.path().join("a"), tmp.path().join("b")).unwrap();
        eventually("degraded", || degraded(&store).is_some()).await;
        let reason = degraded(&store).unwrap();
        assert!(reason.contains("unmounted"), "{reason}");

        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("token"), "two").unwrap();
        wait_for_token(&store, "two").await;
        eventually("re-armed", || store.status().watch == WatchState::Active).await;
        std::fs::write(dir.join("token"), "three").unwrap();
        wait_for_token(&store, "three").await;
        // Writes in the moved directory are not the token's any more.
        std::fs::write(tmp.path().join("b/d/token"), "moved").unwrap();
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(store.current().header_value(), "Bearer three");
    }
}
