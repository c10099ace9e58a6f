//! What an event means: which subscribers it wakes, and whether it says a watched
//! directory is gone. Runs on notify's thread.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind};

use super::{Dir, Table, lost_reason};
use crate::sync::lock;

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
pub(super) fn dispatch(table: &Table, instance: u64, event: notify::Result<Event>) {
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
pub(super) fn mark_lost(dir: &Path, d: &mut Dir) {
    d.armed = false;
    tracing::warn!(
        dir = %dir.display(),
        "token directory disappeared; the timer still refreshes the token and the watch \
         re-arms when it comes back"
    );
    d.failure = Some(lost_reason(dir));
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures_util::FutureExt;

    use std::sync::{Arc, Mutex};
    use tokio::sync::Notify;

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
}
