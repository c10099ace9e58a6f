//! [`Word`]: a store's generation and its one flag in an atomic word, so that a request's
//! one load tells whether its cached credential is current and nothing needs the layer.

use std::sync::atomic::{AtomicU64, Ordering};

/// The top bit: the store's refresher stopped while the store lives (its runtime shut
/// down), and the next request (or `reload`) from a live runtime starts it again.
const STOPPED: u64 = 1 << 63;

/// The current generation (the low 63 bits), and [`STOPPED`].
pub(super) struct Word(AtomicU64);

impl Word {
    /// Generation 1, the refresher running.
    pub(super) fn new() -> Self {
        Self(AtomicU64::new(1))
    }

    /// Whether `generation` is current and the refresher runs.
    #[inline]
    pub(super) fn is(&self, generation: u64) -> bool {
        self.0.load(Ordering::Acquire) == generation
    }

    pub(super) fn generation(&self) -> u64 {
        self.0.load(Ordering::Acquire) & !STOPPED
    }

    pub(super) fn stopped(&self) -> bool {
        self.0.load(Ordering::Acquire) & STOPPED != 0
    }

    /// Sets the generation, keeping the flag.
    pub(super) fn set_generation(&self, generation: u64) {
        let set = |word| Some(word & STOPPED | generation);
        let _ = self
            .0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, set);
    }

    pub(super) fn stop(&self) {
        self.0.fetch_or(STOPPED, Ordering::AcqRel);
    }

    /// Clears the flag: whether it was set (of callers racing, one wins).
    pub(super) fn restart(&self) -> bool {
        self.0.fetch_and(!STOPPED, Ordering::AcqRel) & STOPPED != 0
    }
}
