//! [`Signal`]: how the registry wakes a subscriber, and how the subscriber tells the events
//! its read has answered from those that came after it.

use std::fmt;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Waker};

use tokio::sync::Notify;

/// Reads the subscriber's file at once, on the thread that reports the event, when that
/// cannot block ([`TokenSource::fetch_now`](crate::source::TokenSource::fetch_now)); `true`
/// when the store then holds the file's token.
pub(crate) type ReadNow = Box<dyn Fn() -> bool + Send + Sync>;

/// A coalescing wake-up ([`Notify`]) with a count of the events behind it.
///
/// A writer's rotation is a burst of events for the names of one chain (a truncate, then
/// a write and its close; the kubelet's swap of `..data`, then the removal of the old
/// directory). The first wakes the subscriber; the others usually arrive before
/// it has started its read, which answers them too: [`settle`](Self::settle) then drops
/// the wake-up they left, so that the burst costs one read, not two.
///
/// A subscriber that can read its file without blocking ([`ReadNow`]) reads it on the
/// event's own thread, before the wake-up: its task, when it runs, finds the event
/// [`answered`](Self::answered) and has no read left to make.
#[derive(Default)]
pub(crate) struct Signal {
    notify: Notify,
    events: AtomicU64,
    /// Every event up to this count was answered by a read made as it came.
    answered: AtomicU64,
    read_now: Option<ReadNow>,
}

impl fmt::Debug for Signal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut f = f.debug_struct("Signal");
        f.field("events", &self.events)
            .field("answered", &self.answered)
            .field("read_now", &self.read_now.is_some())
            .finish_non_exhaustive()
    }
}

impl Signal {
    /// A signal whose events for the file's own names are read at once by `read_now`.
    pub(crate) fn reading(read_now: ReadNow) -> Self {
        Self {
            read_now: Some(read_now),
            ..Self::default()
        }
    }

    /// Counts an event and wakes the subscriber (or leaves it a wake-up).
    pub(crate) fn wake(&self) {
        self.events.fetch_add(1, Ordering::SeqCst);
        self.notify.notify_one();
    }

    /// Counts an event for one of the subscriber's names, reads the file at once if the
    /// subscriber can ([`ReadNow`], on the calling thread), and wakes the subscriber,
    /// which still follows the file's links again.
    pub(crate) fn wake_reading(&self) {
        let n = self.events.fetch_add(1, Ordering::SeqCst) + 1;
        if self.read_now.as_ref().is_some_and(|read| read()) {
            self.answered.fetch_max(n, Ordering::SeqCst);
        }
        self.notify.notify_one();
    }

    /// Whether every event so far was answered by a read made as it came.
    pub(crate) fn answered(&self) -> bool {
        self.answered.load(Ordering::SeqCst) == self.events()
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
mod tests {
    use super::*;

    fn pending(signal: &Signal) -> bool {
        let mut notified = pin!(signal.notified());
        notified
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()))
            .is_ready()
    }

    #[test]
    fn a_read_answers_the_events_before_it_not_those_after() {
        let signal = Signal::default();
        signal.wake();
        signal.wake();
        // Before the read: two events, one wake-up left.
        let seen = signal.events();
        signal.settle(seen);
        assert!(!pending(&signal), "answered by the read");

        signal.wake();
        let seen = signal.events();
        signal.wake(); // after the read started
        signal.settle(seen);
        assert!(pending(&signal), "a later event keeps its wake-up");
        assert!(!pending(&signal));

        // A later event whose wake-up was already taken (by the read's own retries):
        // nothing to give back.
        let seen = signal.events();
        signal.wake();
        assert!(pending(&signal));
        signal.settle(seen);
        assert!(!pending(&signal));
    }

    #[test]
    fn debug_shows_the_counts_and_whether_it_reads_on_the_spot() {
        let signal = Signal::reading(Box::new(|| true));
        signal.wake();
        assert_eq!(
            format!("{signal:?}"),
            "Signal { events: 1, answered: 0, read_now: true, .. }"
        );
        assert_eq!(
            format!("{:?}", Signal::default()),
            "Signal { events: 0, answered: 0, read_now: false, .. }"
        );
    }
}
