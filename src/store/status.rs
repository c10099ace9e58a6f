//! What a store tells about itself: [`Status`], [`WatchState`], the counters behind them,
//! what a read did ([`Reloaded`]), and the warnings of a stalled
//! rotator ([`ExpiryWarnings`]).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use super::credential::Credential;
use super::error::LoadError;

/// Whether the store learns of changes to its files as they happen.
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

impl WatchState {
    /// The `state` label of its metric.
    pub(super) fn metric(&self) -> &'static str {
        match self {
            WatchState::Active => "active",
            WatchState::Degraded { .. } => "degraded",
            WatchState::Off => "off",
            WatchState::Stopped { .. } => "stopped",
        }
    }
}

/// A snapshot of a store's state, for health checks and debugging. Holds no secret.
///
/// From [`TokenStore::status`](crate::TokenStore::status), and (feature `tls`) from the
/// `status` of a client-certificate or CA-bundle store, whose fields say the same of the
/// credential it holds.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Status {
    /// Where the credential comes from ([`TokenSource::describe`]: a path, a loader's
    /// name, a command).
    ///
    /// [`TokenSource::describe`]: crate::source::TokenSource::describe
    pub source: String,
    /// The current credential's generation (1 for the first).
    pub generation: u64,
    /// Whom the current credential names, never a secret: a JWT's `sub`, a bootstrap
    /// token's user (`system:bootstrap:<id>`), a client certificate's subject; `None` for
    /// an opaque token and a CA bundle.
    pub subject: Option<String>,
    /// The current credential's fingerprint: a token's first 8 hex digits of its SHA-256,
    /// a client certificate's SHA-256 as `openssl x509 -fingerprint -sha256` prints it; for
    /// a CA bundle, a short one of the certificates it trusts, which changes when any of
    /// them does.
    pub fingerprint: String,
    /// When the current credential was read.
    pub loaded_at: SystemTime,
    /// When the current credential expires: for a token the source's word, else a JWT's
    /// `exp`; for a client certificate the earlier of its `notAfter` and the source's
    /// word; `None` when nothing says (an opaque token, a CA bundle). The store reads its
    /// source again before then, whatever [`refresh_at`](Self::refresh_at) says.
    pub expires_at: Option<SystemTime>,
    /// When the current credential is due to be replaced, as it or its source says: when
    /// its source asked to be fetched again, else a JWT's `warnafter`, else its `exp`
    /// ([`Token::refresh_at`](crate::Token::refresh_at)); for a certificate or a bundle,
    /// only the source's word.
    pub refresh_at: Option<SystemTime>,
    /// Whether the credential in use has expired (for a CA bundle: every authority in it)
    /// because nothing newer came: servers will refuse it.
    pub expired: bool,
    /// Reads of the source, successful or not.
    pub reads: u64,
    /// Credentials installed after the first.
    pub rotations: u64,
    /// Reads that failed and were reported.
    pub failures: u64,
    /// The error of the last read, if it failed; `None` once a read succeeds again.
    pub last_error: Option<LoadError>,
    /// Whether changes to the files are watched, and whether anything refreshes the store
    /// in the background at all ([`WatchState::Stopped`]).
    pub watch: WatchState,
    /// Refusals of the current credential seen: responses classified as unauthorized to
    /// requests that carried the store's token; for a client certificate, handshakes the
    /// server refused and 401s; for a CA bundle, server certificates it did not verify.
    pub unauthorized: u64,
    /// Reads of the source those refusals asked for.
    pub unauthorized_reloads: u64,
    /// Requests sent again with a newer credential after a refusal.
    pub retries: u64,
    /// Requests sent again that were not refused the second time.
    pub retries_succeeded: u64,
    /// Since when the rotator has stalled, if it has: the credential in use is past the
    /// point at which its writer should have replaced it (for a projected token: 80% of
    /// `iat..exp` plus a minute, and past `warnafter`), or has expired, and the last read
    /// of the source found nothing newer. Cleared when a new one is installed. Logged once
    /// per credential; with the `metrics` feature, the gauge
    /// `bearer_reload_rotation_stalled`.
    pub stalled_since: Option<SystemTime>,
    /// Certificates of the current CA bundle left out because they cannot be used (each
    /// warned about, with its place in the bundle, when read); 0 for any other credential.
    pub skipped_certificates: u64,
}

/// What a successful read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reloaded {
    /// It installed a new credential, of the next generation.
    New,
    /// The source holds the same credential as before.
    Same,
}

/// What a store counts, for its status.
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
}

/// Warnings about a token that the source should have replaced by now: checked after each
/// read of the source (never on the request path), so that "the file has not changed" is
/// something the store has just seen, not a guess. Each is logged once per token.
///
/// Holds the generations already warned about, one counter per warning, and the generation of
/// a token found stale (overdue or expired) by a read that found nothing newer: a stalled
/// rotator.
#[derive(Debug, Default)]
pub(crate) struct ExpiryWarnings {
    pub(super) expired: AtomicU64,
    pub(super) overdue: AtomicU64,
    pub(super) stalled: AtomicU64,
}

impl ExpiryWarnings {
    /// Since when `token` (the one in use) has been stalled: the point at which it became
    /// overdue, if a check found it stale; `None` for a token never found stale (a newer
    /// token clears the signal by being another generation).
    pub(crate) fn stalled_since<C: Credential>(&self, token: &C) -> Option<SystemTime> {
        if self.stalled.load(Ordering::Acquire) != token.generation() {
            return None;
        }
        token.overdue_at().or(token.expires_at())
    }
}
