//! [`Subscriber`]: one store's subscriptions, the names of its chain.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{Registry, Signal};
use crate::refresh::chain::Entry;

/// A store's interest in the names of its chain; unsubscribes from all when dropped.
pub(crate) struct Subscriber {
    registry: Arc<Registry>,
    id: u64,
    pub(crate) signal: Arc<Signal>,
    entries: Vec<Entry>,
}

impl Subscriber {
    /// A subscriber woken through `signal`, subscribed to nothing yet.
    pub(crate) fn new(registry: &Arc<Registry>, signal: Signal) -> Self {
        registry.live.fetch_add(1, Ordering::Relaxed);
        Self {
            registry: registry.clone(),
            id: registry.next_id.fetch_add(1, Ordering::Relaxed),
            signal: Arc::new(signal),
            entries: Vec::new(),
        }
    }

    /// Watches exactly `entries` (new ones are added before old ones go, so that a
    /// directory that stays is not unwatched in between), and returns the state of each
    /// directory: the epoch of its watch, or why it is not watched.
    pub(crate) fn watch(&mut self, entries: Vec<Entry>) -> Vec<(PathBuf, Result<u64, String>)> {
        if entries != self.entries {
            for entry in entries.iter().filter(|e| !self.entries.contains(e)) {
                self.registry.register(entry, self.id, &self.signal);
            }
            for entry in self.entries.iter().filter(|e| !entries.contains(e)) {
                self.registry.unregister(entry, self.id);
            }
            self.entries = entries;
        }
        let mut states: Vec<(PathBuf, Result<u64, String>)> = Vec::new();
        for entry in &self.entries {
            if !states.iter().any(|(dir, _)| *dir == entry.dir) {
                states.push((entry.dir.clone(), self.registry.arm(&entry.dir)));
            }
        }
        states
    }
}

impl Drop for Subscriber {
    fn drop(&mut self) {
        for entry in &self.entries {
            self.registry.unregister(entry, self.id);
        }
        self.registry.live.fetch_sub(1, Ordering::Relaxed);
    }
}
