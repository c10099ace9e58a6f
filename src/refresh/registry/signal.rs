//! [`Signal`]: how the registry wakes a subscriber, and how the subscriber tells the events
//! its read has answered from those that came after it.

use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Waker};

use tokio::sync::Notify;

/// A coalescing wake-up ([`Notify`]) with a count of the events behind it.
///
/// A writer's rotation is a burst of events for the names of one chain (a truncate, then
/// a write and its close; the kubelet's swap of `..data`, then the removal of the old
/// directory). The first wakes the subscriber; the others usually arrive before
/// it has started its read, which answers them too: [`settle`](Self::settle) then drops
/// the wake-up they left, so that the burst costs one read, not two.
#[derive(Debug, Default)]
pub(crate) struct Signal {
    notify: Notify,
    events: AtomicU64,
}

impl Signal {
    /// Counts an event and wakes the subscriber (or leaves it a wake-up).
    pub(crate) fn wake(&self) {
        self.events.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Waits for a wake-up.
    pub(crate) async fn notified(&self) {
        self.notify.notified().await;
    }

    /// The events counted so far: taken just before a read starts.
    pub(crate) fn events(&self) -> u64 {
        self.events.load(Ordering::SeqCst)
    }

    /// After a read that started once `seen` events had come: if none came since, drops
    /// the wake-up those events left, as the read answered them.
    pub(crate) fn settle(&self, seen: u64) {
        let mut notified = pin!(self.notify.notified());
        let taken = notified
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready();
        // Counted before the take, an event's wake-up may be the one taken: it goes back.
        // Counted after, it leaves its own.
        if taken && self.events() != seen {
            self.notify.notify_one();
        }
    }
}

#[cfg(test)]
mod tests;
