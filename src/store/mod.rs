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
//! `error` ([`LoadError`]), `status` ([`Status`], the counters, warnings of a stalled
//! rotator), `flight` (the single flight's books), `shared` (the state every handle
//! shares: the credential in use, its reads and its restarts), and this file: the handles
//! (strong and weak) and their refusal reloads.
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
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::source::{DynSource, Trigger};
use crate::sync::lock;
use crate::token::Token;

mod credential;
mod error;
mod flight;
mod shared;
mod status;
mod word;

pub(crate) use credential::{Credential, Kind, Stamp};
#[cfg(test)]
pub(crate) use error::Chain;
pub use error::LoadError;
pub(crate) use flight::{OnFailure, ReadsDone, Recency};
pub(crate) use shared::{Config, Restart, Running};
pub use status::{Status, WatchState};

use credential::event;
use flight::{Ask, Flight, ReadId, fetch, wait};
use shared::{LastRefusal, Shared, credential_of};
use status::{Counters, ExpiryWarnings, Reloaded};

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
pub(crate) struct Store<C: Credential>(Arc<Shared<C>>);

impl<C: Credential> Clone for Store<C> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

/// As its handle shows it: `TokenStore`, `IdentityStore` or `RootStore`.
impl<C: Credential> fmt::Debug for Store<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct(C::KIND.handle)
            .field("source", &self.0.origin)
            .field(
                "current",
                &format_args!("{}", self.0.credential.load().shown()),
            )
            .finish_non_exhaustive()
    }
}

impl<C: Credential> Store<C> {
    /// Fetches the first credential from `source` and builds the store on it, which starts
    /// its refresher again with `restart` when it stops (see `shared`). Must be called
    /// within a tokio runtime with its time driver: the store's reads run there.
    pub(crate) async fn load(
        source: Arc<dyn DynSource>,
        parser: C::Parser,
        origin: Arc<str>,
        config: Config,
        restart: Option<Restart<C>>,
    ) -> Result<Self, LoadError> {
        let fetched = fetch(&*source, &origin, &config, Trigger::Load).await?;
        let first: C = credential_of(fetched, &parser, &origin, &config, 1)?;
        event!(C::KIND, info, { source = %origin, token = %first, }, "token loaded", "loaded");
        crate::metrics::describe();
        let shared = Shared {
            credential: ArcSwap::from_pointee(first),
            word: word::Word::new(),
            generations: watch::Sender::new(1),
            last_error: Mutex::default(),
            source,
            parser,
            label: (config.name.as_deref()).map_or_else(|| origin.clone(), Arc::from),
            origin,
            config,
            runtime: Mutex::new(tokio::runtime::Handle::current()),
            flight: Flight::default(),
            counters: Counters::default(),
            refusals: Mutex::default(),
            watch_state: Mutex::new(WatchState::Off),
            expiry: ExpiryWarnings::default(),
            restart,
        };
        crate::metrics::reload(&shared.label, Trigger::Load.as_str(), "unchanged");
        crate::metrics::watch_state(&shared.label, WatchState::Off.metric());
        shared.check_expiry();
        // The load is a read.
        Counters::bump(&shared.counters.reads);
        Ok(Store(Arc::new(shared)))
    }

    /// A weak reference, for background work that must not keep the store alive.
    pub(crate) fn downgrade(&self) -> WeakStore<C> {
        WeakStore(Arc::downgrade(&self.0))
    }

    /// A number of this store's own while it lives, for drawing its timer's jitter.
    pub(crate) fn jitter_key(&self) -> u64 {
        Arc::as_ptr(&self.0) as usize as u64
    }

    /// The store's wall clock.
    pub(crate) fn clock(&self) -> crate::clock::Clock {
        self.0.config.clock
    }

    /// The current credential. Lock-free.
    pub(crate) fn current(&self) -> Arc<C> {
        self.0.credential.load_full()
    }

    /// The current credential's generation: 1 for the first, one more for each new one.
    pub(crate) fn generation(&self) -> u64 {
        self.0.word.generation()
    }

    /// Whether `cached` is still the current token and the store needs nothing of the
    /// request path. One atomic load.
    #[inline]
    pub(crate) fn is_current(&self, cached: &C) -> bool {
        self.0.word.is(cached.generation())
    }

    /// The request path's slow path, when [`is_current`](Self::is_current) said no: the
    /// current token if `cached` is not it, and the refresher started again if it stopped.
    #[cold]
    #[inline(never)]
    pub(crate) fn catch_up(&self, cached: &mut Arc<C>) {
        if self.generation() != cached.generation() {
            *cached = self.current();
        }
        self.revive_if_stopped();
    }

    /// Starts the store's refresher again if it stopped: for a reload, for a client that
    /// reads the current token at each send (the reqwest middleware), as the layer's slow
    /// path does, and for a kubeconfig's part, which reads the file's store.
    pub(crate) fn revive_if_stopped(&self) {
        if self.0.word.stopped() {
            self.0.revive();
        }
    }

    /// Reads the source again and installs what it holds if it is valid and new; returns
    /// the credential current after the read (see [`TokenStore::reload`]).
    pub(crate) async fn reload(&self) -> Result<Arc<C>, LoadError> {
        self.revive_if_stopped();
        (self
            .downgrade()
            .reload(Trigger::Call, Recency::InFlight, OnFailure::Report))
        .await
        .expect("the store outlives the call")
        .map(|_| self.current())
    }

    /// A receiver of generation numbers, updated each time a new credential is installed.
    pub(crate) fn subscribe(&self) -> watch::Receiver<u64> {
        self.0.generations.subscribe()
    }

    /// A snapshot of the store's state.
    pub(crate) fn status(&self) -> Status {
        let s = &self.0;
        let current = s.credential.load();
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
            last_error: lock(&s.last_error).clone(),
            watch: lock(&s.watch_state).clone(),
            unauthorized: get(&c.unauthorized_seen),
            unauthorized_reloads: get(&c.unauthorized_reloads),
            retries: get(&c.retries),
            retries_succeeded: get(&c.retries_succeeded),
            stalled_since: s.expiry.stalled_since(&**current),
            skipped_certificates: current.skipped(),
        }
    }

    /// After a refusal of a request sent with generation `sent`: `None` if a newer token
    /// is installed, else the read that may bring one (started now, joined, or the one asked
    /// for by an earlier refusal of the same certainty to the same token within the rate
    /// limit). Only certain refusals count as unauthorized responses in the status.
    fn refused(&self, sent: u64, certainty: Certainty) -> Option<ReadId> {
        let (s, certain) = (&self.0, certainty == Certainty::Certain);
        if certain {
            Counters::bump(&s.counters.unauthorized_seen);
            crate::metrics::unauthorized(&s.label);
        }
        // Reads started before this response arrived may have started before the server
        // revoked the token, and before its successor was written: they do not count.
        let arrived = lock(&s.flight.reads).started;
        if self.newer_than(sent).is_some() {
            return None;
        }
        let mut refusals = lock(&s.refusals);
        let last = refusals.of(certainty);
        let at = Instant::now();
        let wanted = match *last {
            // This generation was refused before, and a read was asked for then, within
            // the rate limit: that read started after the server had revoked the token,
            // so its answer (or a later read's) holds for this response too. A token
            // that is simply wrong costs one read per interval, however many requests.
            Some(refused)
                if refused.generation >= sent
                    && at.duration_since(refused.at) < s.config.unauthorized_interval =>
            {
                refused.read
            }
            // Else the first read to start after the response arrived.
            _ => {
                if certain {
                    Counters::bump(&s.counters.unauthorized_reloads);
                }
                let (generation, read) = (sent, arrived.next());
                last.insert(LastRefusal {
                    at,
                    generation,
                    read,
                })
                .read
            }
        };
        drop(refusals);
        let (trigger, report) = (Trigger::Unauthorized, OnFailure::Report);
        Some(s.ask(wanted, Ask { trigger, report }))
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
        if let Some(ticket) = self.refused(sent, certainty) {
            wait(self.0.flight.done.subscribe(), ticket).await;
        }
        self.newer_than(sent)
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

    /// Counts a request sent again after a refusal (with a newer token, or for a client
    /// certificate's refusal, which needs no header).
    pub(crate) fn count_retried(&self) {
        Counters::bump(&self.0.counters.retries);
    }

    /// Counts how a request sent again went: `refused` when it met a 401 too.
    pub(crate) fn count_resent(&self, refused: bool) {
        let s = &self.0;
        if !refused {
            Counters::bump(&s.counters.retries_succeeded);
        }
        crate::metrics::retry(&s.label, if refused { "refused" } else { "succeeded" });
    }

    /// Counts a request that kept its own `Authorization` (metrics only).
    #[inline]
    pub(crate) fn count_kept_authorization(&self) {
        crate::metrics::kept_authorization(&self.0.label);
    }

    /// The error of the last read, if it failed and was reported; `None` once a read
    /// succeeds again.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn last_error(&self) -> Option<LoadError> {
        lock(&self.0.last_error).clone()
    }
}

/// What a store that follows this one reads of it (the credentials of a kubeconfig follow
/// the store of the file): `refresh::Leader`.
impl<C: Credential> Store<C> {
    pub(crate) fn reads_done(&self) -> ReadsDone {
        self.0.flight.done.subscribe()
    }

    pub(crate) fn watch_state(&self) -> WatchState {
        lock(&self.0.watch_state).clone()
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
        self.count_retried();
    }
}

/// A weak reference to a [`Store`](super::Store), held by background work (the timer, the
/// watcher) so that it never keeps the store alive.
pub(crate) struct WeakStore<C: Credential>(pub(super) Weak<Shared<C>>);

impl<C: Credential> fmt::Debug for WeakStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = self.0.upgrade().map(|s| s.origin.clone());
        f.debug_struct("WeakStore")
            .field("source", &origin)
            .finish()
    }
}

impl<C: Credential> Clone for WeakStore<C> {
    fn clone(&self) -> Self {
        Self(self.0.clone())
    }
}

impl<C: Credential> WeakStore<C> {
    /// Resolves when the store is dropped.
    pub(crate) async fn closed(&self) {
        if let Some(mut generations) = self.0.upgrade().map(|s| s.generations.subscribe()) {
            while generations.changed().await.is_ok() {}
        }
    }

    /// Reloads on behalf of `trigger`; `None` when the store is gone. The wait for the
    /// read does not keep the store alive.
    pub(crate) async fn reload(
        &self,
        trigger: Trigger,
        recency: Recency,
        report: OnFailure,
    ) -> Option<Result<Reloaded, LoadError>> {
        let shared = self.0.upgrade()?;
        let done = shared.flight.done.subscribe();
        let ticket = shared.ask(shared.flight.wanted(recency), Ask { trigger, report });
        drop(shared);
        wait(done, ticket).await
    }

    /// Records whether the store's file is watched (a follower says its leader's).
    pub(crate) fn set_watch_state(&self, state: WatchState) {
        if let Some(shared) = self.0.upgrade() {
            shared.set_watch_state(state);
        }
    }

    /// The refresher was dropped before the store: report it, and let the next use start
    /// it again (see `shared`).
    pub(crate) fn refresher_stopped(&self) {
        if let Some(shared) = self.0.upgrade() {
            shared.refresher_stopped();
        }
    }

    /// The store, unless every `TokenStore` clone has been dropped.
    pub(crate) fn upgrade(&self) -> Option<Store<C>> {
        self.0.upgrade().map(Store)
    }
}

/// How sure a refusal is that the server refused the credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Certainty {
    /// The server said so: a 401, a certificate alert; or our verifier refused the
    /// server's certificate.
    Certain,
    /// A connection that ended without an answer, as one whose certificate the server
    /// refused after a TLS 1.3 handshake may: or for any other reason.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Possible,
}

#[cfg(test)]
mod tests;
