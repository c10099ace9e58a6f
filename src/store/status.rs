//! What a store tells about itself: [`Status`], [`WatchState`], and the counters behind
//! them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::LoadError;
use crate::token::{Fingerprint, Freshness, TokenKind};

/// Whether the store learns of changes to its file as they happen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchState {
    /// Not watching: a source that is not a file, or watching turned off.
    Off,
    /// Watching the file's directory (and those of the symlinks leading to it).
    Active,
    /// Watching was asked for but is not working; the timer still refreshes the token.
    Degraded {
        /// Why watching is not working.
        reason: String,
    },
    /// Nothing refreshes the store in the background: neither its watch nor its timer
    /// runs, because its refresher stopped while the store lives (the tokio runtime that
    /// ran it shut down). Requests still get the last token, and a 401 still reloads it.
    /// For a store from [`load`](crate::StoreBuilder::load), the next request through a
    /// layer, or the next [`reload`](crate::TokenStore::reload), made from a live runtime
    /// starts the refresher again there; a refresher from
    /// [`pair`](crate::StoreBuilder::pair) is the caller's to run.
    Stopped {
        /// What stopped.
        reason: String,
    },
}

/// A snapshot of a store's state, for health checks and debugging. Holds no secret.
///
/// From [`TokenStore::status`](crate::TokenStore::status).
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Status {
    /// Where the token comes from ([`TokenSource::describe`]: a path, a loader's name).
    ///
    /// [`TokenSource::describe`]: crate::source::TokenSource::describe
    pub source: String,
    /// The current token's generation (1 for the first token).
    pub generation: u64,
    /// The current token's fingerprint.
    pub fingerprint: Fingerprint,
    /// When the current token was read.
    pub loaded_at: SystemTime,
    /// What the current token is: a JWT and its claims, a bootstrap token and its id, or
    /// opaque.
    pub kind: TokenKind,
    /// When the current token expires: the source's word, else a JWT's `exp`.
    pub expires_at: Option<SystemTime>,
    /// When the current token is due to be replaced: a JWT's `warnafter`, else its `exp`.
    pub rotate_hint: Option<SystemTime>,
    /// How the current token stands against its dates now; [`Freshness::is_stale`] says
    /// whether it is overdue for replacement or expired.
    pub freshness: Freshness,
    /// Reads of the source, successful or not.
    pub reads: u64,
    /// Tokens installed after the first.
    pub rotations: u64,
    /// Reads that failed and were reported.
    pub failures: u64,
    /// The error of the last read, if it failed; `None` once a read succeeds again.
    pub last_error: Option<LoadError>,
    /// Whether changes to the file are watched, and whether anything refreshes the store
    /// in the background at all ([`WatchState::Stopped`]).
    pub watch: WatchState,
    /// Responses classified as unauthorized, to requests that carried the store's token.
    pub unauthorized: u64,
    /// Reads of the source those responses asked for.
    pub unauthorized_reloads: u64,
    /// Requests sent again with a newer token after an unauthorized response.
    pub retries: u64,
    /// Requests sent again whose second response was not unauthorized.
    pub retries_succeeded: u64,
    /// Since when the rotator has stalled, if it has: the token in use is past the point at
    /// which its writer should have replaced it (80% of `iat..exp` plus a minute, and past
    /// `warnafter`), or has expired, and the last read of the source found nothing newer.
    /// Cleared when a new token is installed. Logged once per token; with the `metrics`
    /// feature, the gauge `bearer_reload_rotation_stalled`.
    pub stalled_since: Option<SystemTime>,
}

/// How a retry went, for the counters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RetryOutcome {
    /// The request was sent again with a newer token.
    Sent,
    /// The second response was not unauthorized.
    Succeeded,
    /// The second response was unauthorized too.
    Refused,
}

#[derive(Default)]
pub(crate) struct Counters {
    pub(crate) reads: AtomicU64,
    pub(crate) rotations: AtomicU64,
    pub(crate) failures: AtomicU64,
    pub(crate) unauthorized_seen: AtomicU64,
    pub(crate) unauthorized_reloads: AtomicU64,
    pub(crate) retries: AtomicU64,
    pub(crate) retries_succeeded: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn retry(&self, outcome: RetryOutcome) {
        match outcome {
            RetryOutcome::Sent => Self::bump(&self.retries),
            RetryOutcome::Succeeded => Self::bump(&self.retries_succeeded),
            RetryOutcome::Refused => {}
        }
    }
}
