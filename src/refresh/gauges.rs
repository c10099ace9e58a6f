//! The process-wide task that keeps every store's time gauges current (feature
//! `metrics`): the `metrics` facade has no scrape-time callback, and "seconds until the
//! token expires" changes by itself.
//!
//! One task for the whole process, not one per store: it runs while stores live and
//! ends with the last one; the next store built starts it again.

use std::sync::LazyLock;
use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics::GAUGE_PERIOD;
use crate::store;

/// Publishes the gauges of every live store; `false` when none lives.
type Publish = Box<dyn Fn() -> bool + Send + Sync>;

static TASK: LazyLock<Task> = LazyLock::new(|| {
    Task::new(Box::new(|| {
        let stores = store::live();
        for store in &stores {
            store.publish_gauges();
        }
        !stores.is_empty()
    }))
});

/// Starts the task unless it runs. Must be called within a tokio runtime.
pub(crate) fn ensure_running() {
    TASK.ensure_running();
}

/// The task's running mark and what it does each period (a seam for tests).
struct Task {
    running: AtomicBool,
    publish: Publish,
}

impl Task {
    fn new(publish: Publish) -> Self {
        Self {
            running: AtomicBool::new(false),
            publish,
        }
    }

    fn ensure_running(&'static self) {
        if !self.running.swap(true, Ordering::AcqRel) {
            // Made before the spawn: a task dropped before its first poll clears it too.
            let owner = Owner {
                running: &self.running,
                owns: true,
            };
            tokio::spawn(self.run(owner));
        }
    }

    async fn run(&'static self, mut owner: Owner<'static>) {
        let mut tick = tokio::time::interval(GAUGE_PERIOD);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            if (self.publish)() {
                continue;
            }
            owner.owns = false;
            self.running.store(false, Ordering::Release);
            // A store built after the list was taken may have seen the task running and
            // not started one: take the task back up if so.
            if !(self.publish)() || self.running.swap(true, Ordering::AcqRel) {
                return;
            }
            owner.owns = true;
        }
    }
}

/// While it owns the running mark, clears it however the task ends (its runtime may shut
/// down under it).
struct Owner<'a> {
    running: &'a AtomicBool,
    owns: bool,
}

impl Drop for Owner<'_> {
    fn drop(&mut self) {
        if self.owns {
            self.running.store(false, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests;
