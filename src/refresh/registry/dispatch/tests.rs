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
        ev_dir(EventKind::Remove(notify::event::RemoveKind::Folder), "/w/a"),
    );
    assert!(woken(&plain));
}

fn ev_dir(kind: EventKind, path: &str) -> notify::Result<Event> {
    Ok(Event::new(kind).add_path(PathBuf::from(path)))
}
