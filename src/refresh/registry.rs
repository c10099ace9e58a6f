//! The process-wide directory watch registry: one `notify` watcher per process, one watch
//! per directory, and each event routed to the stores of the file it names.
//!
//! A file is watched through names in its directories, non-recursively
//! ([`chain`](super::chain)): a watch on the file itself would follow the symlink to an
//! inode that dies at the first rotation. The watcher exists only while a directory is
//! subscribed, with a thread that checks each watched directory is still the one at its
//! path ([`health`]).
//!
//! Two locks, always taken in this order: `control` (the watcher, held across its
//! `watch`/`unwatch` calls) and `table` (held briefly). The event handler runs on notify's
//! thread and takes only `table`: `watch`/`unwatch` wait for that thread.

use std::collections::HashMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, LazyLock, Mutex, Weak};
use std::task::{Context, Waker};
use std::time::Duration;

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind, RecursiveMode, Watcher};
use tokio::sync::{Notify, Semaphore};

use super::chain::Entry;
use crate::sync::lock;

/// How often each watched directory is checked to be still the one at its path.
pub(super) const VERIFY_EVERY: Duration = Duration::from_secs(5);

/// How many reads woken by a directory's events run at once: a crowded directory's stores
/// read without a blocking thread each.
pub(crate) const READS_PER_DIR: usize = 4;

/// What a watcher calls, on its own thread, for each event.
pub(crate) type Handler = Box<dyn FnMut(notify::Result<Event>) + Send>;

/// Creates a watcher that calls the handler (a test's own, or notify's).
pub(crate) type Factory = dyn Fn(Handler) -> notify::Result<Box<dyn Watcher + Send>> + Send + Sync;

/// The registry every store uses, and the crate's one piece of process-wide state: each
/// `notify` watcher is an inotify instance, and inotify allows 128 per user by default
/// (`fs.inotify.max_user_instances`), so one watcher per store would not scale.
pub(super) static GLOBAL: LazyLock<Arc<Registry>> =
    LazyLock::new(|| Registry::new(VERIFY_EVERY, notify_factory()));

pub(crate) fn notify_factory() -> Box<Factory> {
    Box::new(|handler| Ok(Box::new(notify::recommended_watcher(handler)?)))
}

/// Directories, their subscribers, and their watcher.
pub(crate) struct Registry {
    factory: Box<Factory>,
    verify_every: Duration,
    control: Mutex<Control>,
    table: Arc<Mutex<Table>>,
    pub(super) next_id: AtomicU64,
}

#[derive(Default)]
struct Control {
    /// The watcher, and the health check's stop: its thread ends when this is dropped.
    watcher: Option<(Box<dyn Watcher + Send>, mpsc::Sender<()>)>,
    /// Numbers watchers, so that a dropped one's late events are told apart.
    instance: u64,
}

#[derive(Default)]
struct Table {
    dirs: HashMap<PathBuf, Dir>,
    /// The tracker of the last rename's "to" event, which its "both" event repeats.
    last_rename: Option<usize>,
}

/// What tells a directory from another made at the same path.
type FileId = (u64, u64);

struct Dir {
    /// Subscribers by the file name they watch, then by id.
    names: HashMap<OsString, HashMap<u64, Arc<Signal>>>,
    /// The watcher holds a watch for it (maybe stale, after a rename).
    watched: bool,
    /// While its events flow: the watcher instance, and the directory's id when armed.
    armed: Option<(u64, FileId)>,
    /// Counts arms, so that a subscriber can tell it may have missed events.
    epoch: u64,
    /// The failure last logged: each is logged once.
    failure: Option<String>,
    reads: Arc<Semaphore>,
}

impl Dir {
    fn new() -> Self {
        Self {
            names: HashMap::new(),
            watched: false,
            armed: None,
            epoch: 0,
            failure: None,
            reads: Arc::new(Semaphore::new(READS_PER_DIR)),
        }
    }

    fn wake_all(&self) {
        for signal in self.names.values().flat_map(HashMap::values) {
            signal.wake();
        }
    }

    /// Marks the directory as no longer the one watched at its path.
    fn lose(&mut self, dir: &Path) {
        self.armed = None;
        tracing::warn!(
            dir = %dir.display(),
            "token directory disappeared; the timer still refreshes the token and the watch \
             re-arms when it comes back"
        );
        self.failure = Some(lost(dir));
    }
}

fn lost(dir: &Path) -> String {
    format!(
        "directory {} was removed, renamed or unmounted",
        dir.display()
    )
}

impl Registry {
    pub(crate) fn new(verify_every: Duration, factory: Box<Factory>) -> Arc<Self> {
        Arc::new(Self {
            factory,
            verify_every,
            control: Mutex::default(),
            table: Arc::default(),
            next_id: AtomicU64::new(0),
        })
    }

    pub(super) fn reads(&self, dir: &Path) -> Option<Arc<Semaphore>> {
        Some(lock(&self.table).dirs.get(dir)?.reads.clone())
    }

    pub(super) fn register(&self, entry: &Entry, id: u64, signal: &Arc<Signal>) {
        let mut table = lock(&self.table);
        let d = table.dirs.entry(entry.dir.clone()).or_insert_with(Dir::new);
        d.names
            .entry(entry.name.clone())
            .or_default()
            .insert(id, signal.clone());
    }

    /// Stops routing `entry`'s events to subscriber `id`, unwatching what is left unused.
    pub(super) fn unregister(&self, entry: &Entry, id: u64) {
        let emptied = |table: &mut Table| {
            let d = table.dirs.get_mut(&entry.dir)?;
            if let Some(subscribers) = d.names.get_mut(&entry.name) {
                subscribers.remove(&id);
            }
            d.names.retain(|_, subscribers| !subscribers.is_empty());
            d.names.is_empty().then_some(())
        };
        if emptied(&mut lock(&self.table)).is_none() {
            return;
        }
        // Under `control` (lock order), unless a subscriber came in between.
        let mut control = lock(&self.control);
        let mut table = lock(&self.table);
        if emptied(&mut table).is_none() {
            return;
        }
        let watched = table.dirs.remove(&entry.dir).is_some_and(|d| d.watched);
        let idle = table.dirs.is_empty();
        drop(table);
        if let Some((watcher, _)) = control.watcher.as_mut()
            && watched
        {
            let _ = watcher.unwatch(&entry.dir);
            tracing::debug!(dir = %entry.dir.display(), "stopped watching token directory");
        }
        if idle && control.watcher.take().is_some() {
            tracing::debug!(instance = control.instance, "file watcher stopped");
        }
    }

    /// Makes sure `dir` (subscribed by the caller) is watched: the epoch of its watch, or
    /// why it is not watched.
    pub(super) fn arm(&self, dir: &Path) -> Result<u64, String> {
        if let Some(d) = lock(&self.table).dirs.get(dir)
            && d.armed.is_some()
        {
            return Ok(d.epoch);
        }
        // Taken before the watch, and outside `control` (a directory that stops answering
        // holds this thread, not the other stores' watches): if the directory is replaced
        // in between, the next check sees it.
        let id = identity(dir);
        let mut control = lock(&self.control);
        let (stale, failure) = match lock(&self.table).dirs.get(dir) {
            Some(d) if d.armed.is_some() => return Ok(d.epoch),
            Some(d) => (d.watched, d.failure.clone()),
            None => (false, None),
        };
        // A directory renamed away keeps its watch: dropped before the path is watched.
        if let Some((watcher, _)) = control.watcher.as_mut()
            && stale
        {
            let _ = watcher.unwatch(dir);
        }
        let result = match id {
            Some(id) => self.watch(&mut control, dir).map(|instance| (instance, id)),
            // Lost (and said so) before: the same reason, not a second warning.
            None => Err(failure
                .filter(|f| *f == lost(dir))
                .unwrap_or_else(|| format!("directory {} does not exist", dir.display()))),
        };
        let mut table = lock(&self.table);
        let d = (table.dirs.get_mut(dir))
            .ok_or_else(|| format!("{} is unsubscribed", dir.display()))?;
        d.watched = result.is_ok();
        match result {
            Ok(armed) => {
                d.armed = Some(armed);
                d.epoch += 1;
                match d.failure.take() {
                    Some(reason) => {
                        tracing::info!(dir = %dir.display(), %reason, "token directory watch re-armed");
                    }
                    None => tracing::info!(dir = %dir.display(), "watching token directory"),
                }
                Ok(d.epoch)
            }
            Err(reason) => {
                if d.failure.as_ref() != Some(&reason) {
                    tracing::warn!(
                        dir = %dir.display(),
                        %reason,
                        "cannot watch the token directory; the timer still refreshes the token"
                    );
                    d.failure = Some(reason.clone());
                }
                Err(reason)
            }
        }
    }

    /// Watches `dir`, starting the watcher first if there is none: its instance.
    fn watch(&self, control: &mut Control, dir: &Path) -> Result<u64, String> {
        if control.watcher.is_none() {
            let (instance, table) = (control.instance + 1, self.table.clone());
            let watcher = (self.factory)(Box::new(move |event| dispatch(&table, instance, event)))
                .map_err(|e| format!("cannot start a file watcher: {e}"))?;
            let health = health(Arc::downgrade(&self.table), self.verify_every);
            (control.instance, control.watcher) = (instance, Some((watcher, health)));
            tracing::debug!(instance, "file watcher started");
        }
        let (watcher, _) = control.watcher.as_mut().expect("started above");
        watcher
            .watch(dir, RecursiveMode::NonRecursive)
            .map_err(|e| format!("cannot watch {}: {e}", dir.display()))?;
        Ok(control.instance)
    }
}

/// Routes an event, on notify's thread: to a name's subscribers; for the directory itself
/// (lost if removed or renamed away), to all of its subscribers; for an overflow, or an
/// error naming no watched directory, to everyone.
fn dispatch(table: &Mutex<Table>, instance: u64, event: notify::Result<Event>) {
    let table = &mut *lock(table);
    let mut routed = false;
    match event {
        Ok(event) if event.need_rescan() => {
            tracing::debug!("file watcher overflow; re-reading every watched token");
        }
        Ok(event) => {
            // Opening or reading a file (our own reads included) cannot change it; a writer
            // closing it can.
            let read = matches!(
                event.kind,
                EventKind::Access(a) if a != AccessKind::Close(AccessMode::Write)
            );
            if read || repeated_rename(table, &event) {
                return;
            }
            let gone = matches!(
                event.kind,
                EventKind::Remove(_) | EventKind::Modify(ModifyKind::Name(RenameMode::From))
            );
            for path in &event.paths {
                if let Some(d) = table.dirs.get_mut(path) {
                    if gone && d.armed.is_some_and(|(i, _)| i == instance) {
                        d.lose(path);
                    }
                    d.wake_all();
                }
                if let (Some(dir), Some(name)) = (path.parent(), path.file_name())
                    && let Some(subscribers) = table.dirs.get(dir).and_then(|d| d.names.get(name))
                {
                    subscribers.values().for_each(|s| s.wake());
                }
            }
            routed = !event.paths.is_empty();
        }
        Err(error) => {
            tracing::debug!(%error, "file watcher error; re-reading the tokens it concerns");
            let dirs = error
                .paths
                .iter()
                .flat_map(|p| [Some(p.as_path()), p.parent()]);
            for d in dirs.flatten().filter_map(|dir| table.dirs.get(dir)) {
                d.wake_all();
                routed = true;
            }
        }
    }
    if !routed {
        table.dirs.values().for_each(Dir::wake_all);
    }
}

/// Whether `event` is the "both" event of a rename whose "to" came just before it: a
/// second read for nothing.
fn repeated_rename(table: &mut Table, event: &Event) -> bool {
    match event.kind {
        EventKind::Modify(ModifyKind::Name(RenameMode::To)) => {
            table.last_rename = event.tracker();
            false
        }
        EventKind::Modify(ModifyKind::Name(RenameMode::Both))
            if event.tracker().is_some() && table.last_rename == event.tracker() =>
        {
            table.last_rename = None;
            true
        }
        _ => false,
    }
}

/// Checks every `every`, on a thread of its own, that each armed directory is still the
/// one at its path: an unmount (notify does not report `IN_UNMOUNT`) or a renamed ancestor
/// sends no event. Ends when the returned sender is dropped.
fn health(table: Weak<Mutex<Table>>, every: Duration) -> mpsc::Sender<()> {
    let (stop, stopped) = mpsc::channel::<()>();
    let spawned = std::thread::Builder::new()
        .name("token-dir-check".into())
        .spawn(move || {
            while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(every) {
                let Some(table) = table.upgrade() else { return };
                check(&table);
            }
        });
    if let Err(error) = spawned {
        tracing::warn!(
            %error,
            "cannot start the token directory check; a directory unmounted or renamed \
             without an event is noticed by the timer only"
        );
    }
    stop
}

/// Marks lost, and wakes the subscribers of, each armed directory no longer at its path.
fn check(table: &Mutex<Table>) {
    let armed: Vec<(PathBuf, u64, FileId)> = lock(table)
        .dirs
        .iter()
        .filter_map(|(dir, d)| Some((dir.clone(), d.epoch, d.armed?.1)))
        .collect();
    for (dir, epoch, id) in armed {
        if identity(&dir) != Some(id)
            && let Some(d) = lock(table).dirs.get_mut(&dir)
            && d.armed.is_some()
            && d.epoch == epoch
        {
            d.lose(&dir);
            d.wake_all();
        }
    }
}

fn identity(dir: &Path) -> Option<FileId> {
    let meta = std::fs::metadata(dir).ok().filter(|m| m.is_dir())?;
    #[cfg(unix)]
    let id = {
        use std::os::unix::fs::MetadataExt;
        (meta.dev(), meta.ino())
    };
    // std has no stable file id elsewhere. A directory made again within seconds may get
    // its old creation time back (NTFS name tunnelling): then only the timer notices.
    #[cfg(not(unix))]
    let id = (meta.created().ok())
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or((0, 0), |d| {
            (0, u64::try_from(d.as_nanos()).unwrap_or(u64::MAX))
        });
    Some(id)
}

/// A coalescing wake-up ([`Notify`]) with a count of the events behind it.
///
/// A rotation is a burst of events (a truncate, then a write and its close; the kubelet's
/// swap of `..data`, then the removal of the old directory). The first wakes the
/// subscriber; [`settle`](Self::settle) drops the wake-up the others left if they came
/// before its read started, so that the burst costs one read.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    notify: Notify,
    events: AtomicU64,
}

impl Signal {
    /// Counts an event and wakes the subscriber (or leaves it a wake-up).
    pub(crate) fn wake(&self) {
        self.events.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_one();
    }

    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The events counted so far: taken just before a read starts.
    pub(crate) fn events(&self) -> u64 {
        self.events.load(Ordering::SeqCst)
    }

    /// After a read that started once `seen` events had come: if none came since, drops
    /// the wake-up those events left, as the read answered them.
    pub(crate) fn settle(&self, seen: u64) {
        let mut notified = pin!(self.notify.notified());
        let taken = (notified.as_mut())
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready();
        // An event counted before the take may have left the wake-up taken: it goes back.
        if taken && self.events() != seen {
            self.notify.notify_one();
        }
    }
}

#[cfg(test)]
pub(crate) mod tests;
