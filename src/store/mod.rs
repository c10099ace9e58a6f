//! [`TokenStore`]: the current token, shared by every request, and how it is replaced.
//!
//! One store serves every credential (a bearer token, and with feature `tls` a client
//! identity and a CA bundle); [`TokenStore`], `tls::IdentityStore` and `tls::RootStore`
//! are its handles. The store holds the current credential in an
//! [`ArcSwap`] and a generation counter that goes up by one each time a different one is
//! installed. Reading it is
//! lock-free. A reload reads the source once for all concurrent callers (single flight, in
//! a task the store owns: a caller that goes away does not cancel it), installs the result
//! only when it is valid, and otherwise keeps the last good token and reports the error.
//!
//! The store spawns only its reads. The timer and the watcher that keep it fresh are
//! started by the [builder](crate::StoreBuilder) and hold a weak reference: they stop
//! when the last `TokenStore` clone is dropped.
//!
//! Its files, by concern: `credential` (what each kind of credential says of itself),
//! `error` ([`LoadError`]), `status` ([`Status`] and the counters), `expiry` (warnings of a
//! stalled rotator), `telemetry` (metrics), `install` (the credential in use and replacing
//! it), `flight` (the single flight's books), `refused` (the rate limit of refusal reads),
//! `shared` (the state every handle shares, its reads and its restarts), `weak` (the weak
//! handle of background work), and this file: the handles and their refusal reloads.
//!
//! [`ArcSwap`]: https://docs.rs/arc-swap/1/arc_swap/type.ArcSwap.html
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::TokenStore;
//! use bearer_reload::source::FileSource;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("token");
//! std::fs::write(&path, "first\n")?;
//! let store = TokenStore::builder(FileSource::new(&path))
//!     .no_watch()
//!     .no_periodic_refresh()
//!     .load()
//!     .await?;
//! assert_eq!(store.generation(), 1);
//!
//! std::fs::write(&path, "second\n")?;
//! store.reload().await?;
//! assert_eq!(store.generation(), 2);
//! assert_eq!(store.current().header_value(), "Bearer second");
//!
//! // A bad file is reported and the last good token stays.
//! std::fs::write(&path, "")?;
//! assert!(store.reload().await.is_err());
//! assert_eq!(store.current().header_value(), "Bearer second");
//! assert!(store.status().last_error.is_some());
//! # Ok(()) }
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use tokio::sync::watch;

use crate::source::{DynSource, FetchContext, Trigger};
use crate::sync::lock;
use crate::token::Token;

mod credential;
mod error;
mod expiry;
mod flight;
mod install;
mod refused;
mod shared;
mod status;
mod telemetry;
mod weak;

pub(crate) use credential::{Credential, Kind, Stamp};
#[cfg(test)]
pub(crate) use error::Chain;
pub use error::LoadError;
pub use status::{Status, WatchState};

pub(crate) use flight::{OnFailure, ReadsDone, Recency};
pub(crate) use refused::Certainty;
pub(crate) use shared::Config;
pub(crate) use shared::Start;
pub(crate) use status::RetryOutcome;
pub(crate) use weak::WeakStore;

use credential::event;
use flight::{Ask, Ticket, fetch, wait};
use install::{credential_of, word};
use shared::Shared;
use status::{Counters, Reloaded};

/// The current token of one source, shared by every request: cheap to clone, lock-free to
/// read.
///
/// Built by [`TokenStore::builder`] on any [`TokenSource`](crate::source::TokenSource);
/// every clone is the same store, and cloning is how a store is shared (by several layers,
/// several clients, a health check). Nothing else shares it: two stores built on the same
/// file, plugin or service account are two stores.
///
/// The store's background work (its timer, and for a file its watcher) holds only a weak
/// reference: it stops when the last `TokenStore` clone, including those inside layers, is
/// dropped.
#[derive(Clone)]
pub struct TokenStore(pub(crate) Store<Token>);

impl fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

impl TokenStore {
    /// The handle of a token store just loaded.
    pub(crate) fn new(store: Store<Token>) -> Self {
        TokenStore(store)
    }

    /// The current token. Lock-free.
    pub fn current(&self) -> Arc<Token> {
        self.0.current()
    }

    /// The current token's generation: 1 for the first token, one more for each new one.
    pub fn generation(&self) -> u64 {
        self.0.generation()
    }

    /// Reads the source again and installs its token if it is valid and new; returns the
    /// token current after the read.
    ///
    /// Callers that arrive while a read is in flight share its result (a read that may have
    /// started before the caller's own last write; the watcher, the timer and 401s always
    /// ask for a read that starts after their trigger). The read belongs to the store:
    /// dropping this future does not cancel it. On failure the last good token stays in
    /// use and the error is returned (and shown in [`status`]).
    ///
    /// Called from a tokio runtime, it also starts the store's refresher again if the
    /// runtime that ran it shut down (see [`WatchState::Stopped`]).
    ///
    /// # Errors
    ///
    /// The [`LoadError`] of the read: the source failed (its error is the source), took
    /// longer than the store's time limit, or gave bytes that are not a valid token.
    ///
    /// [`status`]: TokenStore::status
    pub async fn reload(&self) -> Result<Arc<Token>, LoadError> {
        self.0.reload().await
    }

    /// A receiver of generation numbers, updated each time a new token is installed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.subscribe()
    }

    /// A snapshot of the store's state.
    pub fn status(&self) -> Status {
        self.0.status()
    }
}

/// A store of `C`, as the crate holds it: cheap to clone, every clone the same store.
pub(crate) struct Store<C: Credential> {
    shared: Arc<Shared<C>>,
}

impl<C: Credential> Clone for Store<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

/// As its handle shows it: `TokenStore`, `IdentityStore` or `RootStore`.
impl<C: Credential> fmt::Debug for Store<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(C::KIND.handle)
            .field("source", &self.shared.origin)
            .field(
                "current",
                &format_args!("{:?}", Shown(&**self.shared.current.load())),
            )
            .finish_non_exhaustive()
    }
}

impl<C: Credential> Store<C> {
    /// Fetches the first credential from `source` and builds the store on it. Must be called
    /// within a tokio runtime with its time driver: the store's reads run there.
    pub(crate) async fn load(
        source: Arc<dyn DynSource>,
        parser: C::Parser,
        origin: String,
        config: Config,
    ) -> Result<Self, LoadError> {
        let origin: Arc<str> = origin.into();
        let cx = FetchContext::new(Trigger::Load, config.max_size).on(config.clock);
        let fetched = fetch(&*source, &origin, config.fetch_timeout, cx).await?;
        let first: C = credential_of(fetched, &parser, &origin, config.clock, config.max_size)?;
        let stamp = Stamp {
            generation: 1,
            ..*first.stamp()
        };
        let first = first.stamped(stamp);
        event!(C::KIND, info, { source = %origin, token = %first, }, "token loaded", "loaded");
        let label = config
            .name
            .as_deref()
            .map_or_else(|| origin.clone(), Arc::from);
        let store = Store {
            shared: Arc::new(Shared::new(first, source, parser, origin, config, label)),
        };
        store
            .shared
            .telemetry
            .reload(Trigger::Load, &Ok(Reloaded::Unchanged));
        store.shared.telemetry.watch_state(&WatchState::Off);
        store.shared.check_expiry();
        Ok(store)
    }

    /// A weak reference, for background work that must not keep the store alive.
    pub(crate) fn downgrade(&self) -> WeakStore<C> {
        WeakStore::new(Arc::downgrade(&self.shared))
    }

    /// A number of this store's own while it lives, for drawing its timer's jitter.
    pub(crate) fn jitter_key(&self) -> u64 {
        Arc::as_ptr(&self.shared) as usize as u64
    }

    /// How the current token stands now, on the store's clock (tests).
    #[cfg(test)]
    pub(crate) fn freshness(&self) -> crate::token::Freshness {
        self.current().freshness_at(self.shared.config.clock.now())
    }

    /// Whether both are clones of the same store.
    #[cfg(test)]
    pub(crate) fn ptr_eq(&self, other: &Store<C>) -> bool {
        Arc::ptr_eq(&self.shared, &other.shared)
    }

    /// The current credential. Lock-free.
    pub(crate) fn current(&self) -> Arc<C> {
        self.shared.current.load_full()
    }

    /// The current credential's generation: 1 for the first, one more for each new one.
    pub(crate) fn generation(&self) -> u64 {
        self.shared.current.word() & word::GENERATION
    }

    /// Whether `cached` is still the current token and the store needs nothing of the
    /// request path. One atomic load.
    #[inline]
    pub(crate) fn is_current(&self, cached: &C) -> bool {
        self.shared.current.word() == cached.generation()
    }

    /// The request path's slow path, when [`is_current`](Self::is_current) said no: the
    /// current token if `cached` is not it, and the refresher started again if it stopped.
    #[cold]
    #[inline(never)]
    pub(crate) fn catch_up(&self, cached: &mut Arc<C>) {
        let word = self.shared.current.word();
        if word & word::GENERATION != cached.generation() {
            *cached = self.current();
        }
        if word & word::STOPPED != 0 {
            self.shared.revive();
        }
    }

    /// Starts the store's refresher again if it stopped: for a client that reads the
    /// current token at each send (the reqwest middleware), as the layer's slow path does,
    /// and for a kubeconfig's part, which reads the file's store.
    #[cfg(any(feature = "reqwest", feature = "kube"))]
    pub(crate) fn revive_if_stopped(&self) {
        if self.shared.current.word() & word::STOPPED != 0 {
            self.shared.revive();
        }
    }

    /// Makes `start` the way to start the store's refresher again (a store whose refresher
    /// the crate spawned).
    pub(crate) fn restart_with(&self, start: Start<C>) {
        self.shared.restart_with(start);
    }

    /// Reads the source again and installs what it holds if it is valid and new; returns
    /// the credential current after the read (see [`TokenStore::reload`]).
    pub(crate) async fn reload(&self) -> Result<Arc<C>, LoadError> {
        if self.shared.current.word() & word::STOPPED != 0 {
            self.shared.revive();
        }
        let result = self
            .downgrade()
            .reload(Trigger::Call, Recency::InFlight, OnFailure::Report)
            .await;
        result
            .expect("the store outlives the call")
            .map(|_| self.current())
    }

    /// A receiver of generation numbers, updated each time a new credential is installed.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.current.subscribe()
    }

    /// A snapshot of the store's state.
    pub(crate) fn status(&self) -> Status {
        let s = &self.shared;
        let current = s.current.load();
        let c = &s.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Status {
            source: s.origin.to_string(),
            generation: current.generation(),
            subject: current.subject().map(str::to_owned),
            fingerprint: current.fingerprint(),
            loaded_at: current.loaded_at(),
            expires_at: current.expires_at(),
            refresh_at: current.refresh_at(),
            expired: current.is_expired_at(s.config.clock.now()),
            reads: get(&c.reads),
            rotations: get(&c.rotations),
            failures: get(&c.failures),
            last_error: s.current.last_error(),
            watch: lock(&s.watch_state).clone(),
            unauthorized: get(&c.unauthorized_seen),
            unauthorized_reloads: get(&c.unauthorized_reloads),
            retries: get(&c.retries),
            retries_succeeded: get(&c.retries_succeeded),
            stalled_since: s.expiry.stalled_since(&**current),
            skipped_certificates: current.skipped(),
        }
    }

    /// After a refusal of a request sent with generation `sent`: a newer token if one is
    /// installed, else the read that may bring one (started now, joined, or the one asked
    /// for by an earlier refusal of the same certainty to the same token within the rate
    /// limit). Only certain refusals count as unauthorized responses in the status.
    fn refused(&self, sent: u64, certainty: Certainty) -> Refused<C> {
        let s = &self.shared;
        if certainty == Certainty::Certain {
            Counters::bump(&s.counters.unauthorized_seen);
            s.telemetry.unauthorized();
        }
        // Reads started before this response arrived may have started before the server
        // revoked the token, and before its successor was written: they do not count.
        let arrived = s.flight.started();
        if let Some(token) = self.newer_than(sent) {
            return Refused::Newer(token);
        }
        let wanted = s.refusals.read_for(
            certainty,
            sent,
            arrived,
            s.config.unauthorized_interval,
            &s.counters,
        );
        let ask = Ask {
            trigger: Trigger::Unauthorized,
            report: OnFailure::Report,
        };
        Refused::Reading(s.ask(wanted, ask))
    }

    /// After a refusal: a token newer than `sent`, installed already or read now, or
    /// `None` when the source still holds the same token (or was read less than the rate
    /// limit ago). The read is the store's: dropping this future leaves it running for the
    /// requests that follow.
    pub(crate) async fn refresh_after_refusal(
        &self,
        sent: u64,
        certainty: Certainty,
    ) -> Option<Arc<C>> {
        match self.refused(sent, certainty) {
            Refused::Newer(token) => Some(token),
            Refused::Reading(ticket) => {
                let done = self.shared.flight.subscribe();
                wait(done, ticket).await;
                self.newer_than(sent)
            }
        }
    }

    /// After a refusal of a request sent with generation `sent`, without waiting: starts
    /// (or joins) the read that may bring a newer token, for the requests that follow.
    pub(crate) fn reload_after_refusal(&self, sent: u64, certainty: Certainty) {
        let _ = self.refused(sent, certainty);
    }

    /// The current credential, if it is newer than generation `sent`.
    fn newer_than(&self, sent: u64) -> Option<Arc<C>> {
        Some(self.current()).filter(|t| t.generation() > sent)
    }

    /// Counts a request sent again after a refusal that needs no header (a client
    /// certificate's).
    #[cfg(feature = "tls")]
    pub(crate) fn count_retried(&self) {
        self.count_retry(RetryOutcome::Sent);
    }

    /// Counts how a request sent again went: `refused` when it met a 401 too.
    pub(crate) fn count_resent(&self, refused: bool) {
        self.count_retry(if refused {
            RetryOutcome::Refused
        } else {
            RetryOutcome::Succeeded
        });
    }

    pub(crate) fn count_retry(&self, outcome: RetryOutcome) {
        self.shared.counters.retry(outcome);
        self.shared.telemetry.retry(outcome);
    }

    /// Counts a request that kept its own `Authorization` (metrics only).
    #[inline]
    pub(crate) fn count_kept_authorization(&self) {
        self.shared.telemetry.kept_authorization();
    }
}

/// What a store that follows this one reads of it (the credentials of a kubeconfig follow
/// the store of the file).
impl<C: Credential> Store<C> {
    /// A receiver that changes as each read of the source completes, whatever its result.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn reads_done(&self) -> ReadsDone {
        ReadsDone::new(self.shared.flight.subscribe())
    }

    /// The error of the last read, if it failed and was reported; `None` once a read
    /// succeeds again.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn last_error(&self) -> Option<LoadError> {
        self.shared.current.last_error()
    }

    /// Whether the store learns of changes to its files as they happen.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn watch_state(&self) -> WatchState {
        lock(&self.shared.watch_state).clone()
    }

    /// Sets what the store says of its watch (a follower says its leader's).
    pub(crate) fn follow_watch_state(&self, state: WatchState) {
        if *lock(&self.shared.watch_state) != state {
            self.shared.set_watch_state(state);
        }
    }
}

impl Store<Token> {
    /// Puts the newest token on a request about to be sent again after a 401, and counts
    /// the retry. The newest now, not the one the reload brought: the drain and the wait
    /// for the service may outlast another rotation, and a server that revokes at
    /// rotation would refuse the older one.
    pub(crate) fn resend(&self, headers: &mut http::HeaderMap) {
        let token = self.current();
        headers.insert(http::header::AUTHORIZATION, token.header_value().clone());
        self.count_retry(RetryOutcome::Sent);
    }
}

/// The store's answer to a refusal.
enum Refused<C> {
    /// A token newer than the refused one is already installed.
    Newer(Arc<C>),
    /// A read that starts after the response arrived will answer.
    Reading(Ticket),
}

/// A credential in a store's `Debug`: a token's own `Debug` (its kind, fingerprint and
/// claims, never its secret), another credential's `Display`.
struct Shown<'a, C>(&'a C);

impl<C: Credential> fmt::Debug for Shown<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.debug(f)
    }
}

#[cfg(test)]
mod tests;
