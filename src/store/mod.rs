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
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::source::{DynSource, FetchContext, Trigger};
use crate::sync::lock;
use crate::token::Token;

mod background;
mod credential;
mod error;
mod expiry;
mod flight;
mod install;
mod live;
mod refused;
mod status;
mod telemetry;
mod weak;

pub(crate) use credential::{Credential, Kind, Stamp};
pub(crate) use error::Chain;
pub use error::LoadError;
pub use status::{Status, WatchState};

pub(crate) use background::Start;
pub(crate) use flight::{OnFailure, Recency};
pub(crate) use live::StoreId;
pub(crate) use status::RetryOutcome;
pub(crate) use weak::WeakStore;

use expiry::ExpiryWarnings;
use flight::{Done, Flight, Ticket};
use install::credential_of;
pub(crate) use refused::Certainty;
use refused::RefusalReads;
use status::Counters;
use telemetry::Telemetry;

/// The store's word: the current generation, and a flag that sends every request through
/// the layer's slow path while it is set.
///
/// A request's one atomic load compares the word with its cached token's generation: equal
/// means "the cached token is current and nothing needs the layer's attention".
mod word {
    /// The store's refresher stopped while the store lives (its runtime shut down): the
    /// next request (or `reload`) from a live runtime starts it again.
    pub(super) const STOPPED: u64 = 1 << 63;
    /// The generation's bits.
    pub(super) const GENERATION: u64 = STOPPED - 1;
}

/// Logs one event of a store: with message `$token` for a token store, and for a store of
/// another credential with `$other` and the credential named.
macro_rules! event {
    ($credential:expr, $level:ident, { $($fields:tt)* }, $token:literal, $other:literal) => {
        match $credential {
            $crate::store::Kind::Token => tracing::$level!($($fields)* $token),
            other => tracing::$level!(credential = %other, $($fields)* $other),
        }
    };
}
use event;

/// What the store needs to know of its options.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The `source` label of the store's metrics; its source's description when `None`.
    pub(crate) name: Option<String>,
    pub(crate) max_size: usize,
    pub(crate) fetch_timeout: Duration,
    pub(crate) unauthorized_interval: Duration,
    pub(crate) clock: Clock,
}

/// What a successful read did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reloaded {
    /// The source holds the same token as before; the generation is unchanged.
    Unchanged,
    /// A new token was installed.
    Rotated,
}

/// A store of `C`: what every handle of it shares.
pub(crate) struct Shared<C: Credential> {
    /// This store's number in the table of live stores.
    id: StoreId,
    current: ArcSwap<C>,
    /// The generation of `current` and the flags of [`word`], written after `current`.
    word: AtomicU64,
    source: Arc<dyn DynSource>,
    origin: Arc<str>,
    config: Config,
    /// Where the store's reads run when the caller is outside any runtime: the runtime it
    /// was built in, or the one that last restarted its refresher.
    runtime: Mutex<tokio::runtime::Handle>,
    flight: Mutex<Flight>,
    done: watch::Sender<Done>,
    generations: watch::Sender<u64>,
    counters: Counters,
    last_error: Mutex<Option<LoadError>>,
    last_refusal_reads: Mutex<RefusalReads>,
    watch_state: Mutex<WatchState>,
    expiry: ExpiryWarnings,
    telemetry: Telemetry,
    /// How to start the refresher again when it stops while the store lives; unset for a
    /// store whose refresher the caller runs ([`StoreBuilder::pair`](crate::StoreBuilder::pair)).
    restart: OnceLock<Start<C>>,
}

impl<C: Credential> Drop for Shared<C> {
    fn drop(&mut self) {
        self.flight
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .abort();
        self.id.forget();
    }
}

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
    /// The handle of a token store just loaded: it joins the table of live stores, where
    /// the plain layer's response future finds it after a refusal.
    pub(crate) fn new(store: Store<Token>) -> Self {
        StoreId::register(&store.shared);
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
        let name = match C::KIND {
            Kind::Token => "TokenStore",
            Kind::ClientCertificate => "IdentityStore",
            Kind::CaBundle => "RootStore",
            Kind::Kubeconfig => "KubeconfigStore",
        };
        f.debug_struct(name)
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
        origin: String,
        config: Config,
    ) -> Result<Self, LoadError> {
        let origin: Arc<str> = origin.into();
        let cx = FetchContext::new(Trigger::Load, config.max_size).on(config.clock);
        let fetched = flight::fetch(&*source, &origin, &config, cx).await?;
        let first: C = credential_of(fetched, &origin, &config)?;
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
            shared: Arc::new(Shared {
                id: StoreId::next(),
                current: ArcSwap::from_pointee(first),
                word: AtomicU64::new(1),
                source,
                origin,
                config,
                runtime: Mutex::new(tokio::runtime::Handle::current()),
                flight: Mutex::new(Flight::new()),
                done: watch::Sender::new(Done {
                    read: 1,
                    result: None,
                }),
                generations: watch::Sender::new(1),
                counters: Counters {
                    reads: AtomicU64::new(1),
                    ..Counters::default()
                },
                last_error: Mutex::new(None),
                last_refusal_reads: Mutex::default(),
                watch_state: Mutex::new(WatchState::Off),
                expiry: ExpiryWarnings::default(),
                telemetry: Telemetry::new(label),
                restart: OnceLock::new(),
            }),
        };
        store
            .shared
            .telemetry
            .reload(Trigger::Load, &Ok(Reloaded::Unchanged));
        store.shared.telemetry.watch_state(&WatchState::Off);
        store.shared.check_expiry();
        Ok(store)
    }

    /// The store's number, to find it again after a 401 without holding it.
    #[inline]
    pub(crate) fn id(&self) -> StoreId {
        self.shared.id
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
        self.shared.word.load(Ordering::Acquire) & word::GENERATION
    }

    /// Whether `cached` is still the current token and the store needs nothing of the
    /// request path. One atomic load.
    #[inline]
    pub(crate) fn is_current(&self, cached: &C) -> bool {
        self.shared.word.load(Ordering::Acquire) == cached.generation()
    }

    /// The request path's slow path, when [`is_current`](Self::is_current) said no: the
    /// current token if `cached` is not it, and the refresher started again if it stopped.
    #[cold]
    #[inline(never)]
    pub(crate) fn catch_up(&self, cached: &mut Arc<C>) {
        let word = self.shared.word.load(Ordering::Acquire);
        if word & word::GENERATION != cached.generation() {
            *cached = self.current();
        }
        if word & word::STOPPED != 0 {
            self.revive();
        }
    }

    /// Reads the source again and installs what it holds if it is valid and new; returns
    /// the credential current after the read (see [`TokenStore::reload`]).
    pub(crate) async fn reload(&self) -> Result<Arc<C>, LoadError> {
        if self.shared.word.load(Ordering::Acquire) & word::STOPPED != 0 {
            self.revive();
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
        self.shared.generations.subscribe()
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
        ReadsDone(self.shared.done.subscribe())
    }

    /// The error of the last read, if it failed and was reported; `None` once a read
    /// succeeds again.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn last_error(&self) -> Option<LoadError> {
        lock(&self.shared.last_error).clone()
    }

    /// Whether the store learns of changes to its files as they happen.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn watch_state(&self) -> WatchState {
        lock(&self.shared.watch_state).clone()
    }

    /// Sets what the store says of its watch (a follower says its leader's).
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn follow_watch_state(&self, state: WatchState) {
        if *lock(&self.shared.watch_state) != state {
            self.shared.set_watch_state(state);
        }
    }
}

/// The reads of a store, as they complete ([`Store::reads_done`]).
pub(crate) struct ReadsDone(watch::Receiver<Done>);

impl ReadsDone {
    /// Waits for the next read to complete; `false` once the store is gone.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) async fn next(&mut self) -> bool {
        self.0.changed().await.is_ok()
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

impl<C: Credential> Shared<C> {
    /// Warns (once per token) when the current token, just confirmed by a read of the
    /// source, has expired or is overdue for rotation: the rotator has stalled; and
    /// publishes the token's gauges.
    fn check_expiry(&self) {
        let current = self.current.load();
        self.expiry
            .check(&**current, self.config.clock.now(), &self.origin);
        let stalled = self.expiry.stalled_since(&**current).is_some();
        self.telemetry.token(&**current, stalled);
    }

    fn report_failure(&self, error: &LoadError, trigger: Trigger) {
        Counters::bump(&self.counters.failures);
        let current = self.current.load();
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

/// A credential in a store's `Debug`: a token's own `Debug` (its kind, fingerprint and
/// claims, never its secret), another credential's `Display`.
struct Shown<'a, C>(&'a C);

impl<C: Credential> fmt::Debug for Shown<'_, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.debug(f)
    }
}

/// Waits until read `n` is done; `None` when the store was dropped first.
async fn wait(
    mut done: watch::Receiver<Done>,
    ticket: Ticket,
) -> Option<Result<Reloaded, LoadError>> {
    match ticket {
        Ticket::Answered(result) => Some(result),
        Ticket::Wait(n) => {
            let done = done.wait_for(|d| d.read >= n).await.ok()?;
            done.result.clone()
        }
    }
}

#[cfg(test)]
mod tests;
