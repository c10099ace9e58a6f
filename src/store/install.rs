//! The credential in use ([`Current`]) and how a read replaces it: validate it, keep the
//! last good one, bump the generation.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use arc_swap::{ArcSwap, Guard};
use tokio::sync::watch;

use super::credential::{Credential, Stamp, event};
use super::error::{Chain, LoadError};
use super::status::{Counters, Reloaded};
use crate::clock::Clock;
use crate::source::{Fetched, Trigger};
use crate::sync::lock;

/// The store's word: the current generation, and a flag that sends every request through
/// the layer's slow path while it is set.
///
/// A request's one atomic load compares the word with its cached token's generation: equal
/// means "the cached token is current and nothing needs the layer's attention".
pub(super) mod word {
    /// The store's refresher stopped while the store lives (its runtime shut down): the
    /// next request (or `reload`) from a live runtime starts it again.
    pub(in crate::store) const STOPPED: u64 = 1 << 63;
    /// The generation's bits.
    pub(in crate::store) const GENERATION: u64 = STOPPED - 1;
}

/// The credential in use, its [`word`], the channel that announces each new generation,
/// and the error of the last read: what a read changes and every request reads.
pub(super) struct Current<C> {
    credential: ArcSwap<C>,
    /// The generation of `credential` and the flags of [`word`], written after `credential`.
    word: AtomicU64,
    generations: watch::Sender<u64>,
    last_error: Mutex<Option<LoadError>>,
}

impl<C: Credential> Current<C> {
    /// The first credential, generation 1.
    pub(super) fn new(first: C) -> Self {
        Self {
            credential: ArcSwap::from_pointee(first),
            word: AtomicU64::new(1),
            generations: watch::Sender::new(1),
            last_error: Mutex::new(None),
        }
    }

    /// The credential in use, for a look. Lock-free.
    #[inline]
    pub(super) fn load(&self) -> Guard<Arc<C>> {
        self.credential.load()
    }

    /// The credential in use. Lock-free.
    #[inline]
    pub(super) fn load_full(&self) -> Arc<C> {
        self.credential.load_full()
    }

    /// The word: the generation and the flags. One atomic load.
    #[inline]
    pub(super) fn word(&self) -> u64 {
        self.word.load(Ordering::Acquire)
    }

    /// Sets [`word::STOPPED`].
    pub(super) fn stop(&self) {
        self.word.fetch_or(word::STOPPED, Ordering::AcqRel);
    }

    /// Clears [`word::STOPPED`]; whether it was set (one caller of several wins).
    pub(super) fn resume(&self) -> bool {
        self.word.fetch_and(!word::STOPPED, Ordering::AcqRel) & word::STOPPED != 0
    }

    /// A receiver of generation numbers, updated each time a new credential is installed.
    pub(super) fn subscribe(&self) -> watch::Receiver<u64> {
        self.generations.subscribe()
    }

    /// The error of the last read, if it failed.
    pub(super) fn last_error(&self) -> Option<LoadError> {
        lock(&self.last_error).clone()
    }

    /// Installs `token`, a valid read, if it is new.
    pub(super) fn install(&self, token: C, trigger: Trigger, counters: &Counters) -> Reloaded {
        *lock(&self.last_error) = None;
        let old = self.credential.load_full();
        if old.same(&token) {
            event!(
                C::KIND,
                trace,
                { trigger = trigger.as_str(), token = %old.logged(), },
                "token unchanged",
                "unchanged"
            );
            return Reloaded::Unchanged;
        }
        let from = old.generation();
        let to = from + 1;
        let stamp = Stamp {
            generation: to,
            ..*token.stamp()
        };
        let token = token.stamped(stamp);
        event!(
            C::KIND,
            info,
            {
                trigger = trigger.as_str(),
                old = %old.logged(),
                new = %token,
                generation = to,
            },
            "token rotated",
            "rotated"
        );
        // Counted before it is published: whoever sees the new credential sees its
        // rotation counted in `status()`.
        Counters::bump(&counters.rotations);
        self.credential.store(Arc::new(token));
        self.set_generation(to);
        self.generations.send_replace(to);
        Reloaded::Rotated
    }

    /// Counts, logs and keeps a failed read's error; the credential in use stays.
    pub(super) fn report_failure(&self, error: &LoadError, trigger: Trigger, counters: &Counters) {
        Counters::bump(&counters.failures);
        let current = self.credential.load();
        event!(
            C::KIND,
            warn,
            {
                trigger = trigger.as_str(),
                token = %current.logged(),
                error = %Chain(error),
            },
            "token reload failed; keeping the last good token",
            "reload failed; keeping the last good one"
        );
        *lock(&self.last_error) = Some(error.clone());
    }

    /// Installs `to` as the generation, keeping the flags.
    fn set_generation(&self, to: u64) {
        let _ = self
            .word
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |w| {
                Some((w & !word::GENERATION) | to)
            });
    }
}

/// A fetched read as a store's credential, stamped with the time of the read on `clock`
/// and the source's dates (generation 0 until it is installed).
pub(super) fn credential_of<C: Credential>(
    fetched: Fetched,
    parser: &C::Parser,
    origin: &Arc<str>,
    clock: Clock,
    max_size: usize,
) -> Result<C, LoadError> {
    let stamp = Stamp {
        generation: 0,
        loaded_at: clock.now(),
        source_expiry: fetched.expires_at(),
        refresh_at: fetched.refresh_at(),
    };
    Ok(C::from_fetched(fetched, parser, origin, max_size, stamp.loaded_at)?.stamped(stamp))
}
