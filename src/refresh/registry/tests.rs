//! The registry's bookkeeping, with a watcher that records its calls instead of inotify;
//! what an event means; the health check; the signal.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify::event::{CreateKind, DataChange, MetadataKind, RemoveKind};

use super::*;
use crate::test_support::DEADLINE;

/// Counts for tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stats {
    /// Directories the watcher holds a watch for.
    pub(crate) directories: usize,
    /// Stores subscribed (each to the names of its chains).
    pub(crate) subscribers: usize,
    /// Whether a watcher (an inotify instance and its thread) exists.
    pub(crate) watcher: bool,
}

impl Registry {
    pub(crate) fn stats(&self) -> Stats {
        let watcher = lock(&self.control).watcher.is_some();
        let table = lock(&self.table);
        let ids = table
            .dirs
            .values()
            .flat_map(|d| d.names.values().flat_map(HashMap::keys));
        Stats {
            directories: table.dirs.values().filter(|d| d.watched).count(),
            subscribers: ids.collect::<std::collections::HashSet<_>>().len(),
            watcher,
        }
    }

    /// The events routed so far to the subscribers of `name` in `dir`.
    pub(crate) fn events_for(&self, dir: &Path, name: &str) -> u64 {
        let table = lock(&self.table);
        let subscribers = table
            .dirs
            .get(dir)
            .and_then(|d| d.names.get(std::ffi::OsStr::new(name)));
        subscribers.map_or(0, |s| s.values().map(|s| s.events()).sum())
    }
}

/// A watcher's handler and the directories it was asked to watch.
#[derive(Clone, Default)]
struct Recorded {
    handlers: Arc<Mutex<Vec<Handler>>>,
    watches: Arc<Mutex<Vec<PathBuf>>>,
}

struct FakeWatcher(Recorded);

impl Watcher for FakeWatcher {
    fn new<F: notify::EventHandler>(_: F, _: notify::Config) -> notify::Result<Self> {
        Err(notify::Error::generic("made by the factory only"))
    }
    fn watch(&mut self, dir: &Path, _: RecursiveMode) -> notify::Result<()> {
        lock(&self.0.watches).push(dir.to_owned());
        Ok(())
    }
    fn unwatch(&mut self, _: &Path) -> notify::Result<()> {
        Ok(())
    }
    fn kind() -> notify::WatcherKind {
        notify::WatcherKind::NullWatcher
    }
}

fn registry() -> (Arc<Registry>, Recorded) {
    let recorded = Recorded::default();
    let keep = recorded.clone();
    let factory: Box<Factory> = Box::new(move |handler| {
        lock(&keep.handlers).push(handler);
        Ok(Box::new(FakeWatcher(keep.clone())))
    });
    (Registry::new(VERIFY_EVERY, factory), recorded)
}

/// What a watcher reports when the directory it watches is removed.
fn removed(dir: &Path) -> notify::Result<Event> {
    Ok(Event::new(EventKind::Remove(RemoveKind::Folder)).add_path(dir.to_owned()))
}

fn armed(registry: &Registry, dir: &Path) -> bool {
    lock(&registry.table)
        .dirs
        .get(dir)
        .is_some_and(|d| d.armed.is_some())
}

fn entry(dir: &Path) -> Entry {
    Entry {
        dir: dir.to_owned(),
        name: "token".into(),
    }
}

/// A registry whose one subscriber (1) watches `token` in a new directory, armed: the
/// registry, what its watcher recorded, the directory, and the epoch of its watch.
fn subscribed() -> (Arc<Registry>, Recorded, tempfile::TempDir, u64) {
    let (registry, recorded) = registry();
    let tmp = tempfile::tempdir().unwrap();
    registry.register(&entry(tmp.path()), 1, &Arc::default());
    let epoch = registry.arm(tmp.path()).unwrap();
    (registry, recorded, tmp, epoch)
}

#[test]
fn each_arm_of_a_directory_has_a_new_epoch() {
    let (registry, recorded, tmp, first) = subscribed();
    let dir = tmp.path();
    assert_eq!(
        registry.arm(dir),
        Ok(first),
        "armed already: the same watch"
    );

    (lock(&recorded.handlers)[0])(removed(dir));
    assert!(!armed(&registry, dir));
    let second = registry.arm(dir).unwrap();
    // A watcher that saw the first epoch can tell its events may have been missed.
    assert_ne!(first, second);
    assert_eq!(lock(&recorded.watches).len(), 2);
}

#[test]
fn a_dropped_watchers_late_events_do_not_touch_the_next_ones_watch() {
    let (registry, recorded, tmp, _) = subscribed();
    let dir = tmp.path();
    // The last subscriber goes: so does the watcher. The next one gets a new watcher.
    registry.unregister(&entry(dir), 1);
    assert!(!registry.stats().watcher);
    registry.register(&entry(dir), 2, &Arc::default());
    registry.arm(dir).unwrap();
    assert_eq!(lock(&recorded.handlers).len(), 2);

    // The first watcher's thread, still draining its queue.
    (lock(&recorded.handlers)[0])(removed(dir));
    assert!(
        armed(&registry, dir),
        "a stale watcher's loss is not this watch's"
    );
    (lock(&recorded.handlers)[1])(removed(dir));
    assert!(!armed(&registry, dir));
}

#[test]
fn a_subscriber_that_comes_while_the_last_one_leaves_keeps_the_watch() {
    let (registry, _recorded, tmp, _) = subscribed();
    let dir = tmp.path().to_owned();

    // The leaving one finds the directory empty, then waits for `control` to drop it.
    let control = lock(&registry.control);
    let leaving = {
        let (registry, dir) = (registry.clone(), dir.clone());
        std::thread::spawn(move || registry.unregister(&entry(&dir), 1))
    };
    let deadline = Instant::now() + DEADLINE;
    while lock(&registry.table)
        .dirs
        .get(&dir)
        .is_some_and(|d| !d.names.is_empty())
    {
        assert!(Instant::now() < deadline, "the subscriber never left");
        std::thread::yield_now();
    }
    // A new subscriber, before the leaving one gets `control`.
    registry.register(&entry(&dir), 2, &Arc::default());
    drop(control);
    leaving.join().unwrap();

    assert!(armed(&registry, &dir), "the directory and its watch stay");
    assert_eq!(registry.stats().directories, 1);
}

/// Whether `signal` was woken since the last look, taking the wake-up.
fn woken(signal: &Signal) -> bool {
    let mut notified = std::pin::pin!(signal.notified());
    notified
        .as_mut()
        .poll(&mut std::task::Context::from_waker(std::task::Waker::noop()))
        .is_ready()
}

fn table(entries: &[(&str, &str, &Arc<Signal>)]) -> Mutex<Table> {
    let mut table = Table::default();
    for (id, (dir, name, signal)) in entries.iter().enumerate() {
        let entry = Entry {
            dir: PathBuf::from(dir),
            name: (*name).into(),
        };
        let d = table.dirs.entry(entry.dir).or_insert_with(|| {
            let mut d = Dir::new();
            (d.watched, d.armed, d.epoch) = (true, Some((1, (0, 0))), 1);
            d
        });
        d.names
            .entry(entry.name)
            .or_default()
            .insert(id as u64, (*signal).clone());
    }
    Mutex::new(table)
}

#[test]
fn events_wake_the_subscribers_of_the_name_they_concern() {
    let (a, a2, b) = (Arc::default(), Arc::default(), Arc::default());
    let table = table(&[
        ("/w/a", "token", &a),
        ("/w/a", "..data", &a),
        ("/w/a", "other", &a2),
        ("/w/b", "token", &b),
    ]);
    let ev = |kind, path: &str| Ok(Event::new(kind).add_path(PathBuf::from(path)));

    for kind in [
        EventKind::Create(CreateKind::File),
        EventKind::Modify(ModifyKind::Data(DataChange::Any)),
        EventKind::Modify(ModifyKind::Name(RenameMode::To)),
        EventKind::Remove(RemoveKind::File),
        EventKind::Access(AccessKind::Close(AccessMode::Write)),
    ] {
        dispatch(&table, 1, ev(kind, "/w/a/token"));
        assert!(woken(&a), "{kind:?}");
        assert!(!woken(&a2) && !woken(&b), "{kind:?}");
    }
    // The kubelet's swap wakes the chains that go through `..data`; its other steps
    // (the timestamped directories, `..data_tmp`) and a temporary file wake nobody.
    dispatch(
        &table,
        1,
        ev(
            EventKind::Modify(ModifyKind::Name(RenameMode::To)),
            "/w/a/..data",
        ),
    );
    assert!(woken(&a) && !woken(&a2));
    for path in [
        "/w/a/..2026_11_29_12_00_00.1",
        "/w/a/..data_tmp",
        "/w/a/.token.tmp",
    ] {
        dispatch(&table, 1, ev(EventKind::Create(CreateKind::Any), path));
    }
    // Both paths of a rename: the temporary name wakes nobody, the token its stores.
    dispatch(
        &table,
        1,
        Ok(
            Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::Both)))
                .add_path(PathBuf::from("/w/b/.token.tmp"))
                .add_path(PathBuf::from("/w/b/token")),
        ),
    );
    assert!(!woken(&a) && !woken(&a2) && woken(&b));
    // Reads (ours included) and events elsewhere wake nobody.
    for kind in [
        EventKind::Access(AccessKind::Open(AccessMode::Any)),
        EventKind::Access(AccessKind::Close(AccessMode::Read)),
    ] {
        dispatch(&table, 1, ev(kind, "/w/a/token"));
    }
    dispatch(
        &table,
        1,
        ev(EventKind::Create(CreateKind::File), "/w/c/token"),
    );
    dispatch(
        &table,
        1,
        ev(EventKind::Create(CreateKind::File), "/w/a/sub/token"),
    );
    assert!(!woken(&a) && !woken(&a2) && !woken(&b));

    // Overflow, errors without a path, and errors naming a directory or a file in it.
    dispatch(
        &table,
        1,
        Ok(Event::new(EventKind::Other).set_flag(notify::event::Flag::Rescan)),
    );
    assert!(woken(&a) && woken(&a2) && woken(&b));
    // Events were lost: everyone, whatever the event names.
    dispatch(
        &table,
        1,
        ev(EventKind::Create(CreateKind::File), "/w/a/token")
            .map(|e| e.set_flag(notify::event::Flag::Rescan)),
    );
    assert!(woken(&a) && woken(&a2) && woken(&b));
    dispatch(&table, 1, Err(notify::Error::generic("boom")));
    assert!(woken(&a) && woken(&a2) && woken(&b));
    dispatch(
        &table,
        1,
        Err(notify::Error::generic("boom").add_path(PathBuf::from("/w/a/x"))),
    );
    assert!(woken(&a) && woken(&a2) && !woken(&b));

    // The directory itself: every subscriber of it. Removed or renamed away: lost,
    // once, and only for the watcher instance that holds its watch.
    dispatch(
        &table,
        1,
        ev(
            EventKind::Modify(ModifyKind::Metadata(MetadataKind::Any)),
            "/w/a",
        ),
    );
    assert!(woken(&a) && woken(&a2) && !woken(&b));
    assert!(lock(&table).dirs[Path::new("/w/a")].armed.is_some());
    dispatch(&table, 2, ev(EventKind::Remove(RemoveKind::Folder), "/w/a"));
    assert!(woken(&a) && woken(&a2));
    assert!(
        lock(&table).dirs[Path::new("/w/a")].armed.is_some(),
        "a stale instance"
    );
    dispatch(
        &table,
        1,
        ev(
            EventKind::Modify(ModifyKind::Name(RenameMode::From)),
            "/w/a",
        ),
    );
    assert!(woken(&a) && woken(&a2) && !woken(&b));
    assert!(lock(&table).dirs[Path::new("/w/a")].armed.is_none());
    assert!(lock(&table).dirs[Path::new("/w/b")].armed.is_some());
}

/// Each event for a subscriber's names is counted and wakes its loop, which reads on the
/// blocking pool; the "both" of a rename whose "to" came just before is not counted again.
#[test]
fn the_loop_reads_for_each_event_and_a_rename_counts_once() {
    let plain = Arc::new(Signal::default());
    plain.wake();
    assert!(woken(&plain));
    let table = table(&[("/w/a", "token", &plain)]);
    dispatch(
        &table,
        1,
        Ok(
            Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::To)))
                .set_tracker(7)
                .add_path(PathBuf::from("/w/a/token")),
        ),
    );
    assert_eq!(plain.events(), 2);
    assert!(woken(&plain));
    dispatch(
        &table,
        1,
        Ok(
            Event::new(EventKind::Modify(ModifyKind::Name(RenameMode::Both)))
                .set_tracker(7)
                .add_path(PathBuf::from("/w/a/.tmp"))
                .add_path(PathBuf::from("/w/a/token")),
        ),
    );
    assert_eq!(plain.events(), 2, "the same rename, not counted again");
    assert!(!woken(&plain));
    // An event for the whole directory, the same way.
    dispatch(
        &table,
        1,
        ev_dir(EventKind::Remove(RemoveKind::Folder), "/w/a"),
    );
    assert!(woken(&plain));
}

fn ev_dir(kind: EventKind, path: &str) -> notify::Result<Event> {
    Ok(Event::new(kind).add_path(PathBuf::from(path)))
}

#[test]
fn the_checks_thread_ends_as_soon_as_it_is_dropped() {
    let table = Arc::new(Mutex::new(Table::default()));
    // An hour between checks: the thread would outlive the test but for the drop.
    let stop = health(Arc::downgrade(&table), Duration::from_secs(3600));
    // The thread holds its own weak handle on the table while it runs.
    assert_eq!(Arc::weak_count(&table), 1);
    drop(stop);
    let deadline = Instant::now() + DEADLINE;
    while Arc::weak_count(&table) > 0 {
        assert!(
            Instant::now() < deadline,
            "the check's thread still runs after its handle was dropped"
        );
        std::thread::yield_now();
    }
}

#[test]
fn a_read_answers_the_events_before_it_not_those_after() {
    let signal = Signal::default();
    signal.wake();
    signal.wake();
    // Before the read: two events, one wake-up left.
    let seen = signal.events();
    signal.settle(seen);
    assert!(!woken(&signal), "answered by the read");

    signal.wake();
    let seen = signal.events();
    signal.wake(); // after the read started
    signal.settle(seen);
    assert!(woken(&signal), "a later event keeps its wake-up");
    assert!(!woken(&signal));

    // A later event whose wake-up was already taken (by the read's own retries):
    // nothing to give back.
    let seen = signal.events();
    signal.wake();
    assert!(woken(&signal));
    signal.settle(seen);
    assert!(!woken(&signal));
}
