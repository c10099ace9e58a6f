use super::*;
use crate::refresh::chain::Entry;
use crate::refresh::registry::Signal;

use std::path::{Path, PathBuf};
use std::sync::Arc;

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
            (d.watched, d.armed, d.epoch, d.instance) = (true, true, 1, 1);
            d
        });
        d.names
            .entry(entry.name)
            .or_default()
            .insert(id as u64, (*signal).clone());
        d.count += 1;
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
    use notify::event::{CreateKind, DataChange, RemoveKind};

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
            EventKind::Modify(ModifyKind::Metadata(notify::event::MetadataKind::Any)),
            "/w/a",
        ),
    );
    assert!(woken(&a) && woken(&a2) && !woken(&b));
    assert!(lock(&table).dirs[Path::new("/w/a")].armed);
    dispatch(&table, 2, ev(EventKind::Remove(RemoveKind::Folder), "/w/a"));
    assert!(woken(&a) && woken(&a2));
    assert!(
        lock(&table).dirs[Path::new("/w/a")].armed,
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
    assert!(!lock(&table).dirs[Path::new("/w/a")].armed);
    assert!(lock(&table).dirs[Path::new("/w/b")].armed);
}

#[cfg(all(target_os = "linux", not(bearer_reload_portable)))]
#[test]
fn a_rename_counts_once_and_is_read_on_the_spot_for_the_names_it_concerns() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    let reads = Arc::new(AtomicUsize::new(0));
    let reader = |reads: &Arc<AtomicUsize>| {
        let reads = reads.clone();
        Arc::new(Signal::reading(Box::new(move || {
            reads.fetch_add(1, Ordering::SeqCst);
            true
        })))
    };
    let (a, b) = (reader(&reads), reader(&reads));
    let table = table(&[("/w/a", "token", &a), ("/w/b", "token", &b)]);
    let rename = |mode, tracker, paths: &[&str]| {
        let mut event = Event::new(EventKind::Modify(ModifyKind::Name(mode))).set_tracker(tracker);
        for path in paths {
            event = event.add_path(PathBuf::from(path));
        }
        Ok(event)
    };

    // A writer's temporary file renamed over the token: "from", "to", then "both".
    dispatch(&table, 1, rename(RenameMode::From, 7, &["/w/a/.tmp"]));
    dispatch(&table, 1, rename(RenameMode::To, 7, &["/w/a/token"]));
    assert_eq!(reads.load(Ordering::SeqCst), 1, "read on the spot");
    assert!(
        a.answered() && woken(&a),
        "answered, and the loop woken to follow links"
    );
    dispatch(
        &table,
        1,
        rename(RenameMode::Both, 7, &["/w/a/.tmp", "/w/a/token"]),
    );
    assert_eq!(
        reads.load(Ordering::SeqCst),
        1,
        "the same rename, not read again"
    );
    assert!(a.answered() && !woken(&a));
    assert_eq!(a.events(), 1);

    // A "both" of another rename than the last "to" is an event of its own.
    dispatch(
        &table,
        1,
        rename(RenameMode::Both, 8, &["/w/b/.tmp", "/w/b/token"]),
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert!(b.answered() && woken(&b));

    // An event for the whole directory wakes without reading: it may concern thousands
    // of files, read a few at a time by their loops. Not answered, so the loop reads.
    dispatch(
        &table,
        1,
        ev_dir(EventKind::Remove(notify::event::RemoveKind::Folder), "/w/a"),
    );
    assert_eq!(reads.load(Ordering::SeqCst), 2);
    assert!(!a.answered() && woken(&a));
}

#[cfg(all(target_os = "linux", not(bearer_reload_portable)))]
#[test]
fn a_read_on_the_spot_that_fails_leaves_the_event_to_the_loop() {
    let signal = Signal::reading(Box::new(|| false));
    signal.wake_reading();
    assert!(!signal.answered());
    assert!(woken(&signal));
}

/// A signal with no reader (every signal, off Linux): each event for its names is counted,
/// left unanswered and wakes the loop, which reads on the blocking pool.
#[test]
fn without_a_read_on_the_spot_the_loop_reads_for_each_event() {
    let plain = Arc::new(Signal::default());
    plain.wake_reading();
    assert!(!plain.answered() && woken(&plain));
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
    assert!(!plain.answered() && woken(&plain));
    // An event for the whole directory, the same way.
    dispatch(
        &table,
        1,
        ev_dir(EventKind::Remove(notify::event::RemoveKind::Folder), "/w/a"),
    );
    assert!(!plain.answered() && woken(&plain));
}

fn ev_dir(kind: EventKind, path: &str) -> notify::Result<Event> {
    Ok(Event::new(kind).add_path(PathBuf::from(path)))
}
