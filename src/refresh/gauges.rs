//! The process-wide task that keeps every store's time gauges current (feature
//! `metrics`): the `metrics` facade has no scrape-time callback, and "seconds until the
//! token expires" changes by itself.
//!
//! One task for the whole process, not one per store: it runs while stores live and
//! ends with the last one; the next store built starts it again.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::metrics::GAUGE_PERIOD;
use crate::store;

static RUNNING: AtomicBool = AtomicBool::new(false);

/// Starts the task unless it runs. Must be called within a tokio runtime.
pub(crate) fn ensure_running() {
    if !RUNNING.swap(true, Ordering::AcqRel) {
        tokio::spawn(run());
    }
}

/// While it owns the running mark, clears it however the task ends (its runtime may shut
/// down under it).
struct Owner(bool);

impl Drop for Owner {
    fn drop(&mut self) {
        if self.0 {
            RUNNING.store(false, Ordering::Release);
        }
    }
}

async fn run() {
    let mut owner = Owner(true);
    let mut tick = tokio::time::interval(GAUGE_PERIOD);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let stores = store::live();
        if stores.is_empty() {
            owner.0 = false;
            RUNNING.store(false, Ordering::Release);
            // A store built after the list was taken may have seen the task running and
            // not started one: take the task back up if so.
            if store::live().is_empty() || RUNNING.swap(true, Ordering::AcqRel) {
                return;
            }
            owner.0 = true;
            continue;
        }
        for store in stores {
            store.publish_gauges();
        }
    }
}
