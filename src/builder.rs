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
/// the same builder builds the stores of a client certificate and of a CA bundle (`S` is
/// then `tls::IdentityStore` or `tls::RootStore`). Each option's default is on its setter.
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
pub struct StoreBuilder<S = TokenStore> {
    build: Build<S>,
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
    /// A builder of a store on `source` (see [`source`](crate::source)), with the default
    /// options.
    pub fn builder(source: impl TokenSource) -> StoreBuilder {
        StoreBuilder::of(source, (), TokenStore)
    }
}

impl<S> StoreBuilder<S> {
    /// A builder of a store of `C` on `source`, parsed by `parser`, handed out by `finish`.
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

    fn with(mut self, set: impl FnOnce(&mut Parts)) -> Self {
        set(&mut self.parts);
        self
    }

    /// Follow `leader` (see `refresh::follow`).
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    pub(crate) fn follow<C: Credential>(self, leader: &Store<C>) -> Self {
        self.with(|p| p.plan.follow = Some(Arc::new(leader.clone())))
    }

    /// How often the source is read again regardless of any event (default: the source's
    /// [`default_refresh_interval`]), each wait drawn a little longer so that stores loaded
    /// together do not read in step.
    ///
    /// # Panics
    ///
    /// If `interval` is under a second. To read on events and dates alone, see
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

    /// No periodic reads: only at load, on changes the watcher sees, at the token's dates,
    /// on refusals, and on [`reload`](TokenStore::reload).
    pub fn no_periodic_refresh(self) -> Self {
        self.with(|p| p.plan.period = None)
    }

    /// Do not watch the source's files for changes (watched by default).
    pub fn no_watch(self) -> Self {
        self.with(|p| p.plan.watch.clear())
    }

    /// The largest token accepted, in bytes (default 64 KiB); for a certificate or a CA
    /// bundle, the largest PEM file (default 1 MiB for a client certificate and its key,
    /// 16 MiB for a CA bundle).
    pub fn max_size(self, max_size: usize) -> Self {
        self.with(|p| p.config.max_size = max_size)
    }

    /// The least time between two fetches triggered by refusals of the same token
    /// (default 1 s): a token that is simply wrong costs one fetch per interval, however
    /// many requests it fails. A newer token's first refusal fetches at once.
    pub fn unauthorized_reload_interval(self, interval: Duration) -> Self {
        self.with(|p| p.config.unauthorized_interval = interval)
    }

    /// How long one fetch may take before it counts as failed (default: the source's
    /// [`default_fetch_timeout`]): a read stuck on a dead mount or a hung plugin must not
    /// hold up every later reload.
    ///
    /// [`default_fetch_timeout`]: TokenSource::default_fetch_timeout
    pub fn fetch_timeout(self, limit: Duration) -> Self {
        self.with(|p| p.config.fetch_timeout = limit)
    }

    /// The store's name, the `source` label of its metrics (default: its source's
    /// description). Never put a token in it.
    pub fn name(self, name: impl Into<String>) -> Self {
        self.with(|p| p.config.name = Some(name.into()))
    }

    /// Simulated time for tests (feature `testing`): the wall-clock time is `origin` plus
    /// the tokio time elapsed since `start`, so that `tokio::time::advance` moves the timer
    /// and the token's dates together. A test server that mints tokens must use this clock.
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
    /// watcher running as a task on the current tokio runtime until the store is dropped.
    /// If that runtime shuts down first, the status says
    /// [`WatchState::Stopped`](crate::WatchState::Stopped) until the store's next use on a
    /// live runtime starts them again there.
    ///
    /// # Errors
    ///
    /// A [`LoadError`] naming the source when the first fetch fails or is not valid.
    pub async fn load(self) -> Result<S, LoadError> {
        let (store, refresher) = (self.build)(self.parts, true).await?;
        tokio::spawn(refresher);
        Ok(store)
    }

    /// Like [`load`](Self::load), but hands back the background work for the caller to
    /// run, as `tower::buffer::Buffer::pair` does; if it is dropped first, nothing
    /// refreshes the store again.
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
    kind: Kind,
    origin: Arc<str>,
    config: Config,
    plan: Plan,
}

/// Builds the store; the flag says whether the crate runs the refresher.
type Build<S> = Box<
    dyn FnOnce(Parts, bool) -> Pin<Box<dyn Future<Output = Result<(S, Running), LoadError>> + Send>>
        + Send,
>;

/// Loads a store of `C` with its refresher (started again by the store if `spawned`).
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

/// The store's refresher, subscribed. A filesystem that does not answer within the
/// store's time limit leaves the watch degraded: the refresher then subscribes in its own
/// time and reads once for what changed meanwhile.
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

/// The refresher `subscribe` yields, after one read of what changed meanwhile.
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
