//! [`TokenStore`]: the current token, shared by every request, and how it is replaced.
//!
//! The store holds the current [`Token`] in an [`ArcSwap`] and a generation counter that
//! goes up by one each time a token with a different secret is installed. Reading it is
//! lock-free. A reload reads the source once for all concurrent callers (single flight),
//! installs the result only when it is valid, and otherwise keeps the last good token and
//! reports the error.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::TokenFile;
//!
//! let dir = tempfile::tempdir()?;
//! let path = dir.path().join("token");
//! std::fs::write(&path, "first\n")?;
//! let store = TokenFile::new(&path).watch(false).refresh_interval(None).load().await?;
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
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant, SystemTime};

use arc_swap::ArcSwap;
use tokio::sync::watch;

use crate::clock::Clock;
use crate::refresh;
use crate::refresh::expiry::ExpiryWarnings;
use crate::source::{LoadError, Source};
use crate::token::{Fingerprint, Freshness, Token, TokenKind};

/// Options shared by every kind of source.
#[derive(Debug, Clone)]
pub(crate) struct StoreOptions {
    pub(crate) refresh_interval: Option<Duration>,
    pub(crate) unauthorized_interval: Duration,
    pub(crate) read_timeout: Duration,
    /// The wall clock that token dates are compared to.
    pub(crate) clock: Clock,
}

impl Default for StoreOptions {
    fn default() -> Self {
        Self {
            refresh_interval: Some(Duration::from_secs(60)),
            unauthorized_interval: Duration::from_secs(1),
            read_timeout: Duration::from_secs(10),
            clock: Clock::default(),
        }
    }
}

/// What a successful reload did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reloaded {
    /// The source holds the same token as before; the generation is unchanged.
    Unchanged {
        /// The current generation.
        generation: u64,
    },
    /// A new token was installed.
    Rotated {
        /// The generation it replaced.
        from: u64,
        /// The new generation.
        to: u64,
    },
}

impl Reloaded {
    /// The generation current after the reload.
    pub fn generation(&self) -> u64 {
        match *self {
            Reloaded::Unchanged { generation } => generation,
            Reloaded::Rotated { to, .. } => to,
        }
    }
}

/// What caused a reload; shown in logs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Trigger {
    Call,
    Timer,
    Watch,
    Unauthorized,
}

/// Whether the store learns of changes to its file as they happen.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum WatchState {
    /// Not watching: a custom loader, or watching turned off.
    Off,
    /// Watching the file's directory.
    Active,
    /// Watching was asked for but is not working; the timer still refreshes the token.
    Degraded {
        /// Why watching is not working.
        reason: String,
    },
}

/// Counts of unauthorized responses and what the layer did about them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UnauthorizedStats {
    /// Responses classified as unauthorized.
    pub seen: u64,
    /// Source reads they triggered.
    pub reloads: u64,
    /// Requests sent again with a newer token.
    pub retries: u64,
    /// Retries whose response was not unauthorized.
    pub retries_succeeded: u64,
}

/// A snapshot of a store's state, for health checks and debugging. Holds no secret.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct Status {
    /// Where the token comes from (a path or a loader's name).
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
    /// When the current token expires (a JWT's `exp`).
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
    /// Whether changes to the file are watched.
    pub watch: WatchState,
    /// Unauthorized responses and retries.
    pub unauthorized: UnauthorizedStats,
}

#[derive(Default)]
struct Counters {
    reads: AtomicU64,
    rotations: AtomicU64,
    failures: AtomicU64,
    unauthorized_seen: AtomicU64,
    unauthorized_reloads: AtomicU64,
    retries: AtomicU64,
    retries_succeeded: AtomicU64,
}

/// A read asked for by an unauthorized response.
#[derive(Clone, Copy)]
struct UnauthorizedRead {
    at: Instant,
    generation: u64,
    read: u64,
}

/// The result of the last read, for the callers that joined it.
struct Flight {
    last: Option<Result<Reloaded, LoadError>>,
}

pub(crate) struct Shared {
    current: ArcSwap<Token>,
    /// Mirrors `current.generation`, written after it: one atomic load tells a cached
    /// header whether it is still current.
    generation: AtomicU64,
    source: Source,
    options: StoreOptions,
    flight: tokio::sync::Mutex<Flight>,
    reads_started: AtomicU64,
    reads_done: AtomicU64,
    generations: watch::Sender<u64>,
    counters: Counters,
    last_error: Mutex<Option<LoadError>>,
    /// The last read on behalf of an unauthorized response: when it was asked for, the
    /// generation that was refused, and the number of the read that answers it.
    last_unauthorized_read: Mutex<Option<UnauthorizedRead>>,
    watch_state: Mutex<WatchState>,
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    expiry: ExpiryWarnings,
}

impl Drop for Shared {
    fn drop(&mut self) {
        for task in self
            .tasks
            .get_mut()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
        {
            task.abort();
        }
    }
}

/// A cheap, clonable handle to the current token of one source.
///
/// Background refreshers (timer, watcher) hold only a weak reference: they stop when the
/// last `TokenStore` clone, including those inside layers, is dropped.
#[derive(Clone)]
pub struct TokenStore {
    shared: Arc<Shared>,
}

impl fmt::Debug for TokenStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenStore")
            .field("source", &self.shared.source)
            .field("current", &*self.shared.current.load())
            .finish_non_exhaustive()
    }
}

/// A weak handle held by background tasks.
#[derive(Clone)]
pub(crate) struct WeakStore(Weak<Shared>);

impl WeakStore {
    pub(crate) fn upgrade(&self) -> Option<TokenStore> {
        self.0.upgrade().map(|shared| TokenStore { shared })
    }
}

impl TokenStore {
    pub(crate) async fn start(
        source: Source,
        options: StoreOptions,
        watch_path: Option<PathBuf>,
    ) -> Result<Self, LoadError> {
        let first = source
            .read_within(options.read_timeout)
            .await?
            .with_generation(1);
        tracing::info!(source = ?source, token = %first, "token loaded");
        let store = TokenStore {
            shared: Arc::new(Shared {
                current: ArcSwap::from_pointee(first),
                generation: AtomicU64::new(1),
                source,
                options,
                flight: tokio::sync::Mutex::new(Flight { last: None }),
                reads_started: AtomicU64::new(1),
                reads_done: AtomicU64::new(1),
                generations: watch::Sender::new(1),
                counters: Counters {
                    reads: AtomicU64::new(1),
                    ..Counters::default()
                },
                last_error: Mutex::new(None),
                last_unauthorized_read: Mutex::new(None),
                watch_state: Mutex::new(WatchState::Off),
                tasks: Mutex::new(Vec::new()),
                expiry: ExpiryWarnings::default(),
            }),
        };
        store.check_expiry();
        if let Some(period) = store.shared.options.refresh_interval {
            let task = tokio::spawn(refresh::schedule::run(store.downgrade(), period));
            store.add_task(task.abort_handle());
        }
        if let Some(path) = watch_path {
            refresh::watch::start(&store, &path);
        }
        Ok(store)
    }

    pub(crate) fn downgrade(&self) -> WeakStore {
        WeakStore(Arc::downgrade(&self.shared))
    }

    pub(crate) fn add_task(&self, task: tokio::task::AbortHandle) {
        lock(&self.shared.tasks).push(task);
    }

    pub(crate) fn set_watch_state(&self, state: WatchState) {
        *lock(&self.shared.watch_state) = state;
    }

    /// The wall clock that token dates are compared to.
    pub(crate) fn clock(&self) -> Clock {
        self.shared.options.clock
    }

    /// Warns (once per token) when the current token, just confirmed by a read of the
    /// source, has expired or is overdue for rotation.
    fn check_expiry(&self) {
        let s = &self.shared;
        s.expiry
            .check(&s.current.load(), s.options.clock.now(), &s.source);
    }

    /// The current token. Lock-free.
    pub fn current(&self) -> Arc<Token> {
        self.shared.current.load_full()
    }

    /// The current token's generation: 1 for the first token, one more for each new one.
    pub fn generation(&self) -> u64 {
        self.shared.generation.load(Ordering::Acquire)
    }

    /// Whether `cached` is still the current token. One atomic load.
    #[inline]
    pub(crate) fn is_current(&self, cached: &Token) -> bool {
        self.shared.generation.load(Ordering::Acquire) == cached.generation()
    }

    /// Reads the source again and installs its token if it is valid and new.
    ///
    /// Callers that arrive while a read is in flight share its result (a read that may have
    /// started before the caller's own last write; the watcher, the timer and 401s always
    /// ask for a read that starts after their trigger). On failure the last good token
    /// stays in use and the error is returned (and shown in [`status`]).
    ///
    /// [`status`]: TokenStore::status
    pub async fn reload(&self) -> Result<Reloaded, LoadError> {
        self.reload_as(Trigger::Call, false, true).await
    }

    /// A receiver of generation numbers, updated each time a new token is installed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.shared.generations.subscribe()
    }

    /// A snapshot of the store's state.
    pub fn status(&self) -> Status {
        let s = &self.shared;
        let current = s.current.load();
        let c = &s.counters;
        let get = |n: &AtomicU64| n.load(Ordering::Relaxed);
        Status {
            source: format!("{:?}", s.source),
            generation: current.generation(),
            fingerprint: current.fingerprint(),
            loaded_at: current.loaded_at(),
            kind: current.kind().clone(),
            expires_at: current.expires_at(),
            rotate_hint: current.rotate_hint(),
            freshness: current.freshness_at(s.options.clock.now()),
            reads: get(&c.reads),
            rotations: get(&c.rotations),
            failures: get(&c.failures),
            last_error: lock(&s.last_error).clone(),
            watch: lock(&s.watch_state).clone(),
            unauthorized: UnauthorizedStats {
                seen: get(&c.unauthorized_seen),
                reloads: get(&c.unauthorized_reloads),
                retries: get(&c.retries),
                retries_succeeded: get(&c.retries_succeeded),
            },
        }
    }

    /// Reload on behalf of `trigger`.
    ///
    /// `fresh` asks for a read that starts after this call (a watcher event must not be
    /// answered by a read that began before the write it reports); otherwise a read in
    /// flight is joined. `report` says whether a failure is recorded and logged as one.
    pub(crate) async fn reload_as(
        &self,
        trigger: Trigger,
        fresh: bool,
        report: bool,
    ) -> Result<Reloaded, LoadError> {
        let s = &self.shared;
        let done = s.reads_done.load(Ordering::Acquire);
        let started = s.reads_started.load(Ordering::Acquire);
        let wanted = if !fresh && started > done {
            started
        } else {
            started + 1
        };
        self.reload_from(wanted, trigger, report).await
    }

    /// Reload, answered by the read numbered `wanted` or a later one: joins it if it is in
    /// flight, returns its result if it is the last one done, else reads.
    async fn reload_from(
        &self,
        wanted: u64,
        trigger: Trigger,
        report: bool,
    ) -> Result<Reloaded, LoadError> {
        let s = &self.shared;
        let mut flight = s.flight.lock().await;
        if s.reads_done.load(Ordering::Acquire) >= wanted
            && let Some(result) = &flight.last
        {
            return result.clone();
        }
        s.reads_started.fetch_add(1, Ordering::AcqRel);
        flight.last = None;
        // If this future is dropped mid-read, the read still counts as done (with no
        // result), so that later callers do not wait for it.
        let _done = DoneOnDrop(&s.reads_done);
        s.counters.reads.fetch_add(1, Ordering::Relaxed);
        let result = match s.source.read_within(s.options.read_timeout).await {
            Ok(token) => Ok(self.install(token, trigger)),
            Err(error) => {
                if report {
                    self.report_failure(&error, trigger);
                }
                Err(error)
            }
        };
        flight.last = Some(result.clone());
        self.check_expiry();
        result
    }

    pub(crate) fn report_failure(&self, error: &LoadError, trigger: Trigger) {
        let s = &self.shared;
        s.counters.failures.fetch_add(1, Ordering::Relaxed);
        tracing::warn!(
            ?trigger,
            token = %s.current.load().fingerprint(),
            %error,
            "token reload failed; keeping the last good token"
        );
        *lock(&s.last_error) = Some(error.clone());
    }

    fn install(&self, token: Token, trigger: Trigger) -> Reloaded {
        let s = &self.shared;
        *lock(&s.last_error) = None;
        let old = s.current.load_full();
        if old.same_secret(&token) {
            tracing::trace!(?trigger, token = %old.fingerprint(), "token unchanged");
            return Reloaded::Unchanged {
                generation: old.generation(),
            };
        }
        let from = old.generation();
        let to = from + 1;
        let token = token.with_generation(to);
        tracing::info!(
            ?trigger,
            old = %old.fingerprint(),
            new = %token,
            generation = to,
            "token rotated"
        );
        s.current.store(Arc::new(token));
        s.generation.store(to, Ordering::Release);
        s.counters.rotations.fetch_add(1, Ordering::Relaxed);
        s.generations.send_replace(to);
        Reloaded::Rotated { from, to }
    }

    /// After an unauthorized response to a request sent with generation `sent`: a token
    /// newer than `sent`, either already installed or read now, or `None` when the source
    /// still holds the same token (or was read less than the rate limit ago).
    pub(crate) async fn refresh_after_unauthorized(&self, sent: u64) -> Option<Arc<Token>> {
        let s = &self.shared;
        s.counters.unauthorized_seen.fetch_add(1, Ordering::Relaxed);
        // Reads started before this response arrived may have started before the server
        // revoked the token, and before its successor was written: they do not count.
        let arrived = s.reads_started.load(Ordering::Acquire);
        let newer = || Some(self.current()).filter(|t| t.generation() > sent);
        if let Some(token) = newer() {
            return Some(token);
        }
        let read = {
            let mut last = lock(&s.last_unauthorized_read);
            let now = Instant::now();
            match *last {
                // This generation was refused before, and a read was asked for then, within
                // the rate limit: that read started after the server had revoked the token,
                // so its answer (or a later read's) holds for this response too. A token
                // that is simply wrong costs one read per interval, however many requests.
                Some(r)
                    if r.generation >= sent
                        && now.duration_since(r.at) < s.options.unauthorized_interval =>
                {
                    r.read
                }
                _ => {
                    let read = arrived + 1;
                    *last = Some(UnauthorizedRead {
                        at: now,
                        generation: sent,
                        read,
                    });
                    s.counters
                        .unauthorized_reloads
                        .fetch_add(1, Ordering::Relaxed);
                    read
                }
            }
        };
        let _ = self.reload_from(read, Trigger::Unauthorized, true).await;
        newer()
    }

    pub(crate) fn count_retry(&self, succeeded: Option<bool>) {
        let c = &self.shared.counters;
        match succeeded {
            None => c.retries.fetch_add(1, Ordering::Relaxed),
            Some(true) => c.retries_succeeded.fetch_add(1, Ordering::Relaxed),
            Some(false) => 0,
        };
    }
}

struct DoneOnDrop<'a>(&'a AtomicU64);

impl Drop for DoneOnDrop<'_> {
    fn drop(&mut self) {
        self.0.fetch_add(1, Ordering::AcqRel);
    }
}

/// Locks a std mutex, ignoring poisoning: the data behind these locks stays consistent
/// whatever a panicking holder did (plain values replaced whole).
pub(crate) fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::{TokenFile, TokenLoader};
    use crate::token::TokenError;
    use std::sync::atomic::AtomicUsize;

    /// A loader whose bytes the test sets, counting its calls, optionally held at a gate.
    #[derive(Clone)]
    struct Scripted {
        bytes: Arc<Mutex<Result<Vec<u8>, String>>>,
        calls: Arc<AtomicUsize>,
        gate: Arc<tokio::sync::Semaphore>,
    }

    impl Scripted {
        fn new(initial: &str) -> Self {
            Self {
                bytes: Arc::new(Mutex::new(Ok(initial.as_bytes().to_vec()))),
                calls: Arc::default(),
                gate: Arc::new(tokio::sync::Semaphore::new(
                    tokio::sync::Semaphore::MAX_PERMITS,
                )),
            }
        }
        fn set(&self, v: Result<&str, &str>) {
            *lock(&self.bytes) = v.map(|s| s.as_bytes().to_vec()).map_err(str::to_owned);
        }
        fn loader(&self) -> TokenLoader {
            let this = self.clone();
            TokenLoader::new("scripted", move || {
                let this = this.clone();
                async move {
                    this.calls.fetch_add(1, Ordering::SeqCst);
                    let _permit = this.gate.acquire().await.unwrap();
                    lock(&this.bytes).clone()
                }
            })
            .refresh_interval(None)
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_hung_read_times_out_and_does_not_hold_up_later_reloads() {
        let src = Scripted::new("one");
        let store = src
            .loader()
            .read_timeout(Duration::from_secs(10))
            .load()
            .await
            .unwrap();
        // The next reads hang (a dead mount, a FIFO without a writer).
        src.gate.forget_permits(usize::MAX);
        src.set(Ok("two"));
        let err = store.reload().await.unwrap_err();
        assert!(matches!(err, LoadError::Timeout { .. }), "{err:?}");
        assert!(err.to_string().contains("loader scripted"), "{err}");
        assert_eq!(store.current().header_value(), "Bearer one");
        // A 401 gets its answer (no newer token) instead of waiting forever.
        assert!(store.refresh_after_unauthorized(1).await.is_none());
        // Once reads work again, the next reload installs the new token.
        src.gate.add_permits(1);
        assert_eq!(store.reload().await.unwrap().generation(), 2);
    }

    #[tokio::test]
    async fn keeps_the_last_good_token_on_every_failure_kind() {
        use std::os::unix::fs::PermissionsExt;
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "good\n").unwrap();
        let store = TokenFile::new(&path)
            .watch(false)
            .refresh_interval(None)
            .max_size(64)
            .load()
            .await
            .unwrap();

        type Setup = Box<dyn Fn(&std::path::Path)>;
        let cases: Vec<(&str, Setup)> = vec![
            (
                "missing",
                Box::new(|p| {
                    let _ = std::fs::remove_file(p);
                    let _ = std::fs::remove_dir(p);
                }),
            ),
            ("empty", Box::new(|p| std::fs::write(p, " \n").unwrap())),
            ("bad byte", Box::new(|p| std::fs::write(p, "a\0b").unwrap())),
            (
                "oversize",
                Box::new(|p| std::fs::write(p, [b'x'; 65]).unwrap()),
            ),
            (
                "directory",
                Box::new(|p| {
                    std::fs::remove_file(p).unwrap();
                    std::fs::create_dir(p).unwrap();
                }),
            ),
        ];
        for (name, setup) in cases {
            let _ = std::fs::remove_dir(&path);
            std::fs::write(&path, "good").unwrap();
            setup(&path);
            let err = store.reload().await.unwrap_err();
            assert_eq!(store.current().header_value(), "Bearer good", "{name}");
            assert_eq!(store.generation(), 1, "{name}");
            let status = store.status();
            let reported = status.last_error.expect(name).to_string();
            assert_eq!(reported, err.to_string(), "{name}");
            assert!(
                reported.contains(&path.display().to_string()),
                "{name}: {reported}"
            );
        }

        // Permission denied: real when not root; as root a loader stands in for it.
        let _ = std::fs::remove_dir(&path);
        std::fs::write(&path, "next").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&path).is_err() {
            let err = store.reload().await.unwrap_err();
            assert!(err.to_string().contains("Permission denied"), "{err}");
            assert_eq!(store.current().header_value(), "Bearer good");
        }
        let failures = store.status().failures;
        assert!(failures >= 5, "{failures}");

        // The next good read installs and clears the error.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        assert_eq!(
            store.reload().await.unwrap(),
            Reloaded::Rotated { from: 1, to: 2 }
        );
        assert!(store.status().last_error.is_none());
    }

    #[tokio::test]
    async fn a_failing_loader_keeps_the_last_good_token() {
        let src = Scripted::new("good");
        let store = src.loader().load().await.unwrap();
        src.set(Err("permission denied"));
        let err = store.reload().await.unwrap_err();
        assert!(matches!(err, LoadError::Loader { .. }));
        assert!(err.to_string().contains("scripted"));
        src.set(Ok(""));
        assert!(matches!(
            store.reload().await.unwrap_err(),
            LoadError::Invalid {
                source: TokenError::Empty,
                ..
            }
        ));
        assert_eq!(store.current().header_value(), "Bearer good");
    }

    #[tokio::test]
    async fn identical_bytes_keep_the_generation() {
        let src = Scripted::new("same");
        let store = src.loader().load().await.unwrap();
        let mut rx = store.subscribe();
        src.set(Ok("  same\n"));
        assert_eq!(
            store.reload().await.unwrap(),
            Reloaded::Unchanged { generation: 1 }
        );
        assert!(!rx.has_changed().unwrap());
        src.set(Ok("other"));
        assert_eq!(store.reload().await.unwrap().generation(), 2);
        assert!(rx.has_changed().unwrap());
        assert_eq!(*rx.borrow_and_update(), 2);
        let status = store.status();
        assert_eq!((status.reads, status.rotations), (3, 1));
    }

    #[tokio::test]
    async fn concurrent_reloads_share_one_read() {
        let src = Scripted::new("one");
        let store = src.loader().load().await.unwrap();
        assert_eq!(src.calls.load(Ordering::SeqCst), 1);
        src.set(Ok("two"));
        // Hold the read at the gate until all 51 calls have been polled once (join_all
        // polls each in turn), then let it finish.
        src.gate.forget_permits(usize::MAX);
        let calls = futures_util::future::join_all((0..51).map(|_| store.reload()));
        let release = async {
            tokio::task::yield_now().await;
            src.gate.add_permits(1);
        };
        let (results, ()) = tokio::join!(calls, release);
        for r in results {
            assert_eq!(r.unwrap(), Reloaded::Rotated { from: 1, to: 2 });
        }
        assert_eq!(src.calls.load(Ordering::SeqCst), 2, "one read for 51 calls");
    }

    #[tokio::test]
    async fn a_fresh_reload_does_not_join_a_read_that_started_before_it() {
        let src = Scripted::new("one");
        let store = src.loader().load().await.unwrap();
        src.gate.forget_permits(usize::MAX);
        let early = tokio::spawn({
            let store = store.clone();
            async move { store.reload().await }
        });
        while src.calls.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        // The write lands after the early read began: a watcher's fresh reload must see it.
        src.set(Ok("two"));
        let fresh = tokio::spawn({
            let store = store.clone();
            async move { store.reload_as(Trigger::Watch, true, true).await }
        });
        src.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS - src.gate.available_permits());
        early.await.unwrap().unwrap();
        assert_eq!(fresh.await.unwrap().unwrap().generation(), 2);
        assert_eq!(src.calls.load(Ordering::SeqCst), 3);
    }

    #[tokio::test]
    async fn a_401_is_not_answered_by_a_read_that_started_before_it() {
        // A file whose bytes are taken when a read starts; reads wait at a gate.
        let file = Arc::new(Mutex::new("one"));
        let calls = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Semaphore::new(1));
        let store = TokenLoader::new("snapshot", {
            let (file, calls, gate) = (file.clone(), calls.clone(), gate.clone());
            move || {
                let bytes = lock(&file).as_bytes().to_vec();
                let (calls, gate) = (calls.clone(), gate.clone());
                async move {
                    calls.fetch_add(1, Ordering::SeqCst);
                    drop(gate.acquire().await.unwrap());
                    Ok::<_, std::io::Error>(bytes)
                }
            }
        })
        .refresh_interval(None)
        .load()
        .await
        .unwrap();
        gate.forget_permits(usize::MAX);
        // A read in flight (a watcher's, for an unrelated event) that has read "one".
        let early = tokio::spawn({
            let store = store.clone();
            async move { store.reload().await }
        });
        while calls.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        // The writer lands "two", the server revokes "one": two requests get their 401.
        *lock(&file) = "two";
        let refused: Vec<_> = (0..2)
            .map(|_| {
                let store = store.clone();
                tokio::spawn(async move { store.refresh_after_unauthorized(1).await })
            })
            .collect();
        for _ in 0..10 {
            tokio::task::yield_now().await;
        }
        gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS);
        assert_eq!(
            early.await.unwrap().unwrap(),
            Reloaded::Unchanged { generation: 1 }
        );
        for r in refused {
            let token = r.await.unwrap().expect("a newer token for the retry");
            assert_eq!(token.header_value(), "Bearer two");
        }
        let reads = calls.load(Ordering::SeqCst);
        assert_eq!(reads, 3, "the early read, then one read for both 401s");
        assert_eq!(store.status().unauthorized.reloads, 1);
    }

    #[tokio::test]
    async fn a_cancelled_read_does_not_block_later_reloads() {
        let src = Scripted::new("one");
        let store = src.loader().load().await.unwrap();
        src.gate.forget_permits(usize::MAX);
        let early = tokio::spawn({
            let store = store.clone();
            async move { store.reload().await }
        });
        while src.calls.load(Ordering::SeqCst) < 2 {
            tokio::task::yield_now().await;
        }
        early.abort();
        assert!(early.await.unwrap_err().is_cancelled());
        src.gate
            .add_permits(tokio::sync::Semaphore::MAX_PERMITS - src.gate.available_permits());
        src.set(Ok("two"));
        assert_eq!(store.reload().await.unwrap().generation(), 2);
    }

    #[tokio::test(start_paused = true)]
    async fn the_timer_rereads_and_stops_with_the_last_handle() {
        let src = Scripted::new("one");
        let store = src
            .loader()
            .refresh_interval(Some(Duration::from_secs(10)))
            .load()
            .await
            .unwrap();
        let metrics = tokio::runtime::Handle::current().metrics();
        assert_eq!(metrics.num_alive_tasks(), 1, "the timer task");
        let mut rx = store.subscribe();
        src.set(Ok("two"));
        tokio::time::timeout(Duration::from_secs(11), rx.changed())
            .await
            .expect("the timer re-read within one period")
            .unwrap();
        assert_eq!(store.current().header_value(), "Bearer two");

        let weak = store.downgrade();
        drop(store);
        assert!(weak.upgrade().is_none());
        // Aborted tasks are reaped by the runtime: wait on it with a deadline.
        tokio::time::timeout(Duration::from_secs(5), async {
            while metrics.num_alive_tasks() > 0 {
                tokio::task::yield_now().await;
            }
        })
        .await
        .expect("the timer task ended");
        let calls = src.calls.load(Ordering::SeqCst);
        tokio::time::sleep(Duration::from_secs(100)).await;
        assert_eq!(
            src.calls.load(Ordering::SeqCst),
            calls,
            "no read after drop"
        );
    }

    #[tokio::test]
    async fn status_and_debug_never_show_the_token() {
        let src = Scripted::new("very-secret-token");
        let store = src.loader().load().await.unwrap();
        src.set(Ok("very-secret-bad\x01"));
        let _ = store.reload().await;
        let out = format!("{store:?} {:?} {:#?}", store.status(), store.current());
        assert!(!out.contains("very-secret"), "{out}");
        assert!(out.contains(&store.current().fingerprint().to_string()));
    }
}
