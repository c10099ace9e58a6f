//! [`StoreBuilder`]: how a [`TokenStore`] is built on any source, and its options.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::refresh::timer::MIN_PERIOD;
use crate::refresh::{self, Plan};
use crate::source::{DynSource, TokenSource, Trigger};
use crate::store::{
    Config, Credential, Kind, LoadError, OnFailure, Recency, Restart, Running, Store, TokenStore,
    WatchState, WeakStore,
};

/// Builds a [`TokenStore`] on a source: from [`TokenStore::builder`]. With feature `tls`,
/// the same builder, with the same options, builds the stores of a client certificate and
/// of a CA bundle (`S` is then `tls::IdentityStore` or `tls::RootStore`).
///
/// `.load().await` fetches the first token (an error there names the source and the
/// problem), builds the store and starts what keeps it fresh: the timer, and for a file
/// the directory watcher, as a task on the current tokio runtime that ends with the store.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), bearer_reload::LoadError> {
/// use std::time::Duration;
/// use bearer_reload::TokenStore;
/// use bearer_reload::source::FileSource;
///
/// let path = "/var/run/secrets/kubernetes.io/serviceaccount/token";
/// let store = TokenStore::builder(FileSource::new(path))
///     .refresh_interval(Duration::from_secs(30))
///     .load()
///     .await?;
/// println!("loaded {}", store.current());
/// # Ok(()) }
/// ```
///
/// Like `tower::buffer::Buffer::pair`, [`pair`](Self::pair) hands back the background
/// work instead of spawning it, for an application that runs its own tasks.
///
/// By default a file (or a closure) is read again every 60 seconds, and a file on every
/// change in its directory; a source that says when its tokens expire is fetched again
/// before they do; tokens up to 64 KiB are accepted (a client certificate's PEM up to 1 MiB,
/// a CA bundle up to 16 MiB); a fetch may take 10 s (60 s for an
/// exec plugin); and 401s to one token trigger at most one fetch a second.
pub struct StoreBuilder<S = TokenStore> {
    /// Builds the store of the credential the builder was made for, and hands it out as
    /// `S`.
    build: Build<S>,
    /// What it builds it from.
    parts: Parts,
}

impl<S> fmt::Debug for StoreBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let p = &self.parts;
        f.debug_struct("StoreBuilder")
            .field("credential", &p.kind.name)
            .field("source", &p.origin)
            .field("refresh_interval", &p.plan.period)
            .field("watch", &p.plan.watch)
            .field("max_size", &p.config.max_size)
            .field("unauthorized_interval", &p.config.unauthorized_interval)
            .field("fetch_timeout", &p.config.fetch_timeout)
            .field("name", &p.config.name)
            .field("follows", &p.plan.follow.is_some())
            .finish()
    }
}

impl TokenStore {
    /// A builder of a store on `source`, with the default options: a file
    /// ([`FileSource`](crate::source::FileSource)), an async closure
    /// ([`FnSource`](crate::source::FnSource)), an exec plugin
    /// ([`ExecSource`](crate::source::ExecSource)), a TokenRequest, or a source of your own.
    pub fn builder(source: impl TokenSource) -> StoreBuilder {
        StoreBuilder::of(source, (), TokenStore)
    }
}

impl<S> StoreBuilder<S> {
    /// A builder of a store of `C` on `source`, its reads made `C`s by `parser`, handed out
    /// by `finish`.
    pub(crate) fn of<C: Credential>(
        source: impl TokenSource,
        parser: C::Parser,
        finish: fn(Store<C>) -> S,
    ) -> Self
    where
        S: Send + 'static,
    {
        let parts = Parts {
            origin: source.describe().into(),
            config: Config {
                name: None,
                max_size: C::KIND.max_size,
                fetch_timeout: source.default_fetch_timeout(),
                unauthorized_interval: Duration::from_secs(1),
                clock: Clock::default(),
            },
            plan: Plan {
                period: source.default_refresh_interval(),
                watch: source.paths().to_vec(),
                follow: None,
            },
            source: Arc::new(source),
            kind: C::KIND,
        };
        StoreBuilder {
            build: Box::new(move |parts, refresher| {
                Box::pin(build(parts, parser, refresher, finish))
            }),
            parts,
        }
    }

    /// The builder with `set` applied to its parts.
    fn with(mut self, set: impl FnOnce(&mut Parts)) -> Self {
        set(&mut self.parts);
        self
    }

    /// Fetch again as each read of `leader` completes, and say its watch state: for a
    /// source that takes its credential out of what `leader` holds.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn follow<C: Credential>(self, leader: &Store<C>) -> Self {
        self.with(|p| p.plan.follow = Some(Arc::new(leader.clone())))
    }

    /// How often the source is read again regardless of any event (default: the source's
    /// [`default_refresh_interval`], 60 s for a file or a closure, none for a source that
    /// gives expiries). Each wait is drawn a little longer than the interval (by up to 5%
    /// of it, at least a second, at most a quarter), so that stores loaded together do not
    /// read in step. The reads at the moments the token's dates tell about (a JWT's
    /// rotation point and expiry, a source's expiry) go on either way.
    ///
    /// # Panics
    ///
    /// If `interval` is under a second: a shorter one would read the source in a loop (as
    /// tokio's `interval` panics on a zero period). To read on events and dates alone, see
    /// [`no_periodic_refresh`](Self::no_periodic_refresh).
    ///
    /// [`default_refresh_interval`]: TokenSource::default_refresh_interval
    pub fn refresh_interval(self, interval: Duration) -> Self {
        assert!(
            interval >= MIN_PERIOD,
            "refresh_interval({interval:?}) is under the least interval, {MIN_PERIOD:?}"
        );
        self.with(|p| p.plan.period = Some(interval))
    }

    /// No periodic reads, whatever the source's default: the store reads its source at
    /// load, on each change the watcher sees, at the moments the token's dates tell about,
    /// when a server refuses the token, and when asked ([`reload`](TokenStore::reload)).
    pub fn no_periodic_refresh(self) -> Self {
        self.with(|p| p.plan.period = None)
    }

    /// Do not watch the source's files for changes (watched by default; a source that
    /// reads no file has nothing to watch). The timer still reads it.
    pub fn no_watch(self) -> Self {
        self.with(|p| p.plan.watch.clear())
    }

    /// The largest token accepted, in bytes (default 64 KiB); for a certificate or a CA
    /// bundle, the largest PEM file (default 1 MiB for a client certificate and its key,
    /// 16 MiB for a CA bundle). A file is refused from its length, or after reading
    /// at most `max_size + 1` bytes.
    pub fn max_size(self, max_size: usize) -> Self {
        self.with(|p| p.config.max_size = max_size)
    }

    /// The least time between two fetches triggered by unauthorized responses to the same
    /// token (default 1 s), so that a token that is simply wrong costs one fetch per
    /// interval, however many requests it fails. A token newer than the last one refused
    /// gets a fetch at once.
    pub fn unauthorized_reload_interval(self, interval: Duration) -> Self {
        self.with(|p| p.config.unauthorized_interval = interval)
    }

    /// How long one fetch may take before it counts as failed (default: the source's
    /// [`default_fetch_timeout`], 10 s for a file or a closure, 60 s for an exec plugin): a
    /// read stuck on a dead mount or a hung plugin must not hold up every later reload.
    ///
    /// [`default_fetch_timeout`]: TokenSource::default_fetch_timeout
    pub fn fetch_timeout(self, limit: Duration) -> Self {
        self.with(|p| p.config.fetch_timeout = limit)
    }

    /// The store's name: the `source` label of its metrics (feature `metrics`), such as a
    /// tenant's. By default its source's description (`file /var/run/...`). Never put a
    /// token in it.
    pub fn name(self, name: impl Into<String>) -> Self {
        self.with(|p| p.config.name = Some(name.into()))
    }

    /// Simulated time for tests (feature `testing`): the store reads the wall-clock time as
    /// `origin` plus the tokio time elapsed since `start`, instead of the system clock.
    ///
    /// Token dates are wall-clock dates, while tokio's paused clock
    /// (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`) moves only its own
    /// `Instant`. With this clock one `tokio::time::advance` moves the timer and the dates the
    /// store compares expiries to together, so that a test can run a day of refreshes in
    /// a second. A test server that mints tokens must use the same time
    /// (`origin + (tokio::time::Instant::now() - start)`). Not meant for production.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::{Duration, SystemTime};
    /// use bearer_reload::TokenStore;
    /// use bearer_reload::source::FnSource;
    ///
    /// let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    /// let source = FnSource::new("t", || async { Ok::<_, std::io::Error>(b"abc".to_vec()) });
    /// let store = TokenStore::builder(source)
    ///     .simulated_clock(origin, tokio::time::Instant::now())
    ///     .load()
    ///     .await
    ///     .unwrap();
    /// // An hour passes for the store's dates and its timer alike, at once.
    /// tokio::time::advance(Duration::from_secs(3600)).await;
    /// assert_eq!(store.current().header_value(), "Bearer abc");
    /// # }
    /// ```
    #[cfg(feature = "testing")]
    pub fn simulated_clock(
        self,
        origin: std::time::SystemTime,
        start: tokio::time::Instant,
    ) -> Self {
        self.with(|p| p.config.clock = Clock::Tokio(origin, start))
    }

    /// Fetches the first token and returns a store that keeps it fresh, with its timer and
    /// watcher running as a task on the current tokio runtime that ends with the store.
    ///
    /// Must be called within a tokio runtime with its time driver (`#[tokio::main]` and
    /// `#[tokio::test]` have one): the store's reads run there, with a time limit.
    ///
    /// If that runtime shuts down while the store lives on (a store loaded by a short-lived
    /// runtime and used on another), nothing refreshes it until its next use:
    /// [`status`](TokenStore::status) says [`WatchState::Stopped`](crate::WatchState::Stopped),
    /// the crate warns once, and the next request through a layer (or
    /// [`reload`](TokenStore::reload)) made from a live runtime starts the timer and the
    /// watcher again there.
    ///
    /// # Errors
    ///
    /// A [`LoadError`] naming the source when the first fetch fails, takes longer than the
    /// time limit, or does not yield a valid credential.
    pub async fn load(self) -> Result<S, LoadError> {
        let (store, refresher) = (self.build)(self.parts, true).await?;
        tokio::spawn(refresher);
        Ok(store)
    }

    /// Like [`load`](Self::load), but hands back the background work (the timer and the
    /// watcher) for the caller to run, instead of spawning it. It ends when the store is
    /// dropped; if it is dropped first, nothing refreshes the store any more (its status
    /// says so) and nothing starts it again: it is the caller's.
    ///
    /// # Errors
    ///
    /// As [`load`](Self::load)'s.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), bearer_reload::LoadError> {
    /// use bearer_reload::TokenStore;
    /// use bearer_reload::source::FnSource;
    ///
    /// let source = FnSource::new("static", || async { Ok::<_, std::io::Error>(b"abc".to_vec()) });
    /// let (store, refresher) = TokenStore::builder(source).pair().await?;
    /// let background = tokio::spawn(refresher); // or into the application's own task set
    /// assert_eq!(store.current().header_value(), "Bearer abc");
    ///
    /// drop(store);
    /// background.await.unwrap(); // the refresher ends with the store
    /// # Ok(()) }
    /// ```
    pub async fn pair(self) -> Result<(S, impl Future<Output = ()> + Send + 'static), LoadError> {
        (self.build)(self.parts, false).await
    }
}

/// What a store is built from, the credential aside.
struct Parts {
    source: Arc<dyn DynSource>,
    /// What the store holds.
    kind: Kind,
    /// The source's [`describe`](TokenSource::describe).
    origin: Arc<str>,
    /// The store's options.
    config: Config,
    /// Its refresher's: the source's files to watch, the period, the store it follows.
    plan: Plan,
}

/// How a builder builds its store and hands it out: with whether the crate runs its
/// refresher (spawned on the current runtime, and spawned again by the store if that
/// runtime goes: [`StoreBuilder::load`]) or the caller does ([`StoreBuilder::pair`]).
type Build<S> = Box<
    dyn FnOnce(Parts, bool) -> Pin<Box<dyn Future<Output = Result<(S, Running), LoadError>> + Send>>
        + Send,
>;

/// Loads a store of `C` and hands it out as `finish` makes it, with its refresher to run
/// (which the store starts again if the crate runs it: `spawned`).
async fn build<C: Credential, S>(
    parts: Parts,
    parser: C::Parser,
    spawned: bool,
    finish: fn(Store<C>) -> S,
) -> Result<(S, Running), LoadError> {
    let (plan, limit) = (parts.plan, parts.config.fetch_timeout);
    let restart = spawned.then(|| {
        let plan = plan.clone();
        Box::new(move |weak: WeakStore<C>| {
            let subscribe = refresh::start(weak.clone(), plan.clone());
            caught_up(weak, subscribe, Trigger::Timer)
        }) as Restart<C>
    });
    let store = Store::<C>::load(parts.source, parser, parts.origin, parts.config, restart).await?;
    let running = subscribed(&store, &plan, limit).await;
    Ok((finish(store), running))
}

/// The store's refresher, subscribed: the status says the watch is on once this returns.
/// Subscribing follows the file's links and watches its directories, on the blocking pool;
/// a filesystem that stops answering meanwhile gets the store's time limit, after which the
/// store is handed out with its watch degraded and the refresher subscribes in its own
/// time, then reads once for what changed meanwhile.
async fn subscribed<C: Credential>(store: &Store<C>, plan: &Plan, limit: Duration) -> Running {
    let mut subscribe = Box::pin(refresh::start(store.downgrade(), plan.clone()));
    if let Ok(running) = tokio::time::timeout(limit, &mut subscribe).await {
        return Box::pin(running);
    }
    let paths: Vec<_> = plan.watch.iter().map(|p| p.display().to_string()).collect();
    let reason = format!(
        "watching {} did not start within {limit:?} (its filesystem does not answer?); \
         the timer still refreshes the token",
        paths.join(", ")
    );
    tracing::warn!("{reason}");
    let weak = store.downgrade();
    weak.set_watch_state(WatchState::Degraded { reason });
    caught_up(weak, subscribe, Trigger::Watch)
}

/// The refresher `subscribe` yields, run after one read (for `trigger`) of what changed
/// while it was not running: subscribed late, or started again.
fn caught_up<C: Credential, R: Future<Output = ()> + Send + 'static>(
    weak: WeakStore<C>,
    subscribe: impl Future<Output = R> + Send + 'static,
    trigger: Trigger,
) -> Running {
    Box::pin(async move {
        let running = subscribe.await;
        let _ = weak
            .reload(trigger, Recency::AfterNow, OnFailure::Report)
            .await;
        running.await;
    })
}

#[cfg(test)]
mod tests;
