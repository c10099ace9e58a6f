//! The timer: re-read the source every period, whatever else happens.

use std::time::Duration;

use tokio::time::{Instant, MissedTickBehavior};

use crate::store::{Trigger, WeakStore};

/// Re-reads the store's source every `period` until the store is dropped.
pub(crate) async fn run(store: WeakStore, period: Duration) {
    let mut ticks = tokio::time::interval_at(Instant::now() + period, period);
    // A suspended process wakes up to one re-read, not a burst.
    ticks.set_missed_tick_behavior(MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        let Some(store) = store.upgrade() else {
            return;
        };
        // Failures are reported by the store; the next tick tries again.
        let _ = store.reload_as(Trigger::Timer, true, true).await;
    }
}
