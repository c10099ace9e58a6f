//! The registry's bookkeeping, with a watcher that records its calls instead of inotify.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use notify::event::{EventKind, RemoveKind};

use super::*;

/// A watcher's handler and the directories it was asked to watch.
#[derive(Clone, Default)]
struct Recorded {
    handlers: Arc<Mutex<Vec<Handler>>>,
    watches: Arc<Mutex<Vec<PathBuf>>>,
}

struct FakeWatcher(Recorded);

impl DirWatcher for FakeWatcher {
    fn watch(&mut self, dir: &Path) -> notify::Result<()> {
        lock(&self.0.watches).push(dir.to_owned());
        Ok(())
    }
    fn unwatch(&mut self, _: &Path) -> notify::Result<()> {
        Ok(())
    }
}

fn registry() -> (Arc<Registry>, Recorded) {
    let recorded = Recorded::default();
    let keep = recorded.clone();
    let factory: Box<Factory> = Box::new(move |handler| {
        lock(&keep.handlers).push(handler);
        Ok(Box::new(FakeWatcher(keep.clone())) as Box<dyn DirWatcher>)
    });
    (Registry::new(VERIFY_EVERY, factory), recorded)
}

/// What a watcher reports when the directory it watches is removed.
fn removed(dir: &Path) -> notify::Result<Event> {
    Ok(Event::new(EventKind::Remove(RemoveKind::Folder)).add_path(dir.to_owned()))
}

fn armed(registry: &Registry, dir: &Path) -> bool {
    lock(&registry.table).dirs.get(dir).is_some_and(|d| d.armed)
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
    let deadline = Instant::now() + Duration::from_secs(10);
    while lock(&registry.table)
        .dirs
        .get(&dir)
        .is_some_and(|d| d.count > 0)
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
