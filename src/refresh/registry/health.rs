//! The directories' health check: while the watcher exists, one thread checks every few
//! seconds that each watched directory is still the one at its path, once per directory
//! however many stores watch it, and wakes the stores of one that is not.
//!
//! An unmount (notify does not report `IN_UNMOUNT`) or a renamed ancestor sends no event,
//! yet leaves the watch on an inode that is no longer at the path. One `stat` per
//! directory per period finds it; the stores themselves never wake while nothing happens.

use std::path::PathBuf;
use std::sync::{Arc, Condvar, Mutex, Weak};
use std::time::Duration;

use super::table::{Table, identity, mark_lost};
use crate::sync::lock;

/// The running check; stops its thread when dropped.
pub(super) struct Health {
    stop: Arc<(Mutex<bool>, Condvar)>,
}

impl Drop for Health {
    fn drop(&mut self) {
        *lock(&self.stop.0) = true;
        self.stop.1.notify_all();
    }
}

/// Starts checking the directories of `table` every `every`. Without a thread (the
/// process is out of them), a directory lost without an event waits for the timer.
pub(super) fn start(table: Weak<Mutex<Table>>, every: Duration) -> Option<Health> {
    let stop = Arc::new((Mutex::new(false), Condvar::new()));
    let theirs = stop.clone();
    let spawned = std::thread::Builder::new()
        .name("token-dir-check".into())
        .spawn(move || run(&table, every, &theirs));
    match spawned {
        Ok(_) => Some(Health { stop }),
        Err(error) => {
            tracing::warn!(
                %error,
                "cannot start the token directory check; a directory unmounted or renamed \
                 without an event is noticed by the timer only"
            );
            None
        }
    }
}

fn run(table: &Weak<Mutex<Table>>, every: Duration, stop: &(Mutex<bool>, Condvar)) {
    let (stopped, wake) = stop;
    loop {
        let guard = lock(stopped);
        let (guard, _) = wake
            .wait_timeout_while(guard, every, |stopped| !*stopped)
            .unwrap_or_else(|e| e.into_inner());
        if *guard {
            return;
        }
        drop(guard);
        let Some(table) = table.upgrade() else {
            return;
        };
        check(&table);
    }
}

/// Marks lost, and wakes the subscribers of, each armed directory that is no longer the
/// one that was armed. The `stat`s run outside the lock.
pub(super) fn check(table: &Mutex<Table>) {
    type Armed = (PathBuf, u64, Option<(u64, u64)>);
    let armed: Vec<Armed> = lock(table)
        .dirs
        .iter()
        .filter(|(_, d)| d.armed)
        .map(|(dir, d)| (dir.clone(), d.epoch, d.identity))
        .collect();
    for (dir, epoch, was) in armed {
        let now = identity(&dir);
        if now == was {
            continue;
        }
        let mut table = lock(table);
        if let Some(d) = table.dirs.get_mut(&dir)
            && d.armed
            && d.epoch == epoch
        {
            mark_lost(&dir, d);
            d.wake_all();
        }
    }
}

#[cfg(test)]
mod tests;
