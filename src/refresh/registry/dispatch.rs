//! What an event means: which subscribers it wakes, and whether it says a watched
//! directory is gone. Runs on notify's thread.
//!
//! An event names a path: a file name in a watched directory wakes the subscribers of that
//! name only; the directory itself (removed, renamed away, its attributes changed) wakes
//! all of its subscribers. An overflow of the event queue, or an error that names no
//! watched directory, wakes every subscriber: events may have been lost.

use std::sync::{Arc, Mutex};

use notify::event::{AccessKind, AccessMode, ModifyKind, RenameMode};
use notify::{Event, EventKind};

use super::signal::Signal;
use super::table::{Dir, Table, mark_lost};
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
///
/// The subscribers of a name the event names are woken after the table's lock is released.
pub(super) fn dispatch(table: &Mutex<Table>, instance: u64, event: notify::Result<Event>) {
    let mut named = Vec::new();
    {
        let mut table = lock(table);
        route(&mut table, instance, event, &mut named);
    }
    named.iter().for_each(|s| s.wake());
}

/// Wakes the subscribers an event concerns as a whole directory, and collects in `named`
/// those of the names it concerns.
fn route(
    table: &mut Table,
    instance: u64,
    event: notify::Result<Event>,
    named: &mut Vec<Arc<Signal>>,
) {
    let wake_everyone = |table: &Table| table.dirs.values().for_each(Dir::wake_all);
    match event {
        Ok(event) if event.need_rescan() => {
            tracing::debug!("file watcher overflow; re-reading every watched token");
            wake_everyone(table);
        }
        Ok(event) => {
            if !relevant(&event.kind) || repeated_rename(table, &event) {
                return;
            }
            if event.paths.is_empty() {
                wake_everyone(table);
                return;
            }
            for path in &event.paths {
                // The watched directory itself.
                if let Some(d) = table.dirs.get_mut(path.as_path()) {
                    if gone(&event.kind) && d.armed && d.instance == instance {
                        mark_lost(path, d);
                    }
                    d.wake_all();
                }
                // A name in a watched directory.
                if let (Some(dir), Some(name)) = (path.parent(), path.file_name())
                    && let Some(d) = table.dirs.get(dir)
                {
                    named.extend(d.subscribers_of(name).cloned());
                }
            }
        }
        Err(error) => {
            tracing::debug!(%error, "file watcher error; re-reading the tokens it concerns");
            let mut matched = false;
            for path in &error.paths {
                for key in [Some(path.as_path()), path.parent()].into_iter().flatten() {
                    if let Some(d) = table.dirs.get(key) {
                        d.wake_all();
                        matched = true;
                    }
                }
            }
            if !matched {
                wake_everyone(table);
            }
        }
    }
}

/// Whether `event` is the "both" event of a rename whose "from" and "to" came just before
/// it (notify's inotify backend sends all three): it names nothing they did not, and would
/// only cost each woken store a second read.
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

#[cfg(test)]
mod tests;
