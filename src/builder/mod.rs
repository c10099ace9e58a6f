//! Building a [`TokenStore`]: [`StoreBuilder`], one builder for every kind of source, and
//! its options.

use std::any::TypeId;
use std::fmt;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::refresh;
use crate::source::{BoxError, FileSource, FnSource, TokenSource};
use crate::store::{Config, LoadError, TokenStore};
use crate::token::DEFAULT_MAX_SIZE;

/// The builder before it has a source: [`StoreBuilder`]'s options alone.
///
/// ```
/// use std::time::Duration;
/// use bearer_reload::Options;
///
/// let options = Options::new().refresh_interval(Some(Duration::from_secs(30)));
/// let builder = options.source(bearer_reload::source::FileSource::new("/run/token"));
/// # let _ = builder;
/// ```
pub type Options = StoreBuilder<NoSource>;

/// The builder of a store that reads a token file. See [`StoreBuilder`] for the options.
pub type TokenFile = StoreBuilder<FileSource>;

/// The builder of a store whose bytes come from an async closure. See [`StoreBuilder`] for
/// the options.
pub type TokenLoader = StoreBuilder<FnSource>;

/// The source type of a [`StoreBuilder`] that has no source yet ([`Options`]).
#[derive(Debug, Clone, Copy, Default)]
pub struct NoSource;

/// Builds a [`TokenStore`] on a source.
///
/// [`StoreBuilder`] holds a source and the options every store shares; `.load().await`
/// fetches the first token (an error there names the source and the problem), builds the
/// store and starts what keeps it fresh: the timer, and for a file the directory watcher.
/// [`TokenFile`] and [`TokenLoader`] are the builder for a file and for an async closure;
/// [`StoreBuilder::from_source`] takes any [`TokenSource`]; [`Options`] is the builder
/// before it has a source, for code that learns the source later (the `kube` module).
///
/// ```no_run
/// # async fn run() -> Result<(), bearer_reload::LoadError> {
/// use std::time::Duration;
/// use bearer_reload::TokenFile;
///
/// let store = TokenFile::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
///     .refresh_interval(Some(Duration::from_secs(60)))
///     .load()
///     .await?;
/// println!("loaded {}", store.current());
/// # Ok(()) }
/// ```
///
/// Like `tower::buffer::Buffer::pair`, [`StoreBuilder::pair`] hands back the background
/// work instead of spawning it, for an application that runs its own tasks.
///
/// By default a file (or a closure) is read again every 60 seconds, and a file on every
/// change in its directory; a source that says when its tokens expire is fetched again
/// before they do; tokens up to 64 KiB are accepted; a fetch may take 10 s (60 s for an
/// exec plugin); and 401s to one token trigger at most one fetch a second.
#[derive(Clone)]
pub struct StoreBuilder<S> {
    source: S,
    /// `None`: the source's default.
    refresh_interval: Option<Option<Duration>>,
    watch: bool,
    max_size: usize,
    unauthorized_interval: Duration,
    /// `None`: the source's default.
    read_timeout: Option<Duration>,
    name: Option<String>,
    clock: Clock,
}

impl<S: fmt::Debug> fmt::Debug for StoreBuilder<S> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreBuilder")
            .field("source", &self.source)
            .field("refresh_interval", &self.refresh_interval)
            .field("watch", &self.watch)
            .field("max_size", &self.max_size)
            .field("unauthorized_interval", &self.unauthorized_interval)
            .field("read_timeout", &self.read_timeout)
            .field("name", &self.name)
            .finish()
    }
}

impl Default for Options {
    fn default() -> Self {
        Self::new()
    }
}

impl Options {
    /// The defaults, without a source.
    pub fn new() -> Self {
        StoreBuilder {
            source: NoSource,
            refresh_interval: None,
            watch: true,
            max_size: DEFAULT_MAX_SIZE,
            unauthorized_interval: Duration::from_secs(1),
            read_timeout: None,
            name: None,
            clock: Clock::default(),
        }
    }
}

impl TokenFile {
    /// A token file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Options::new().source(FileSource::new(path))
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        self.source.path().expect("a file source has a path")
    }
}

impl TokenLoader {
    /// A loader named `name` (used in errors and logs) that calls `load` for the bytes.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use bearer_reload::TokenLoader;
    ///
    /// let store = TokenLoader::new("static", || async { Ok::<_, std::io::Error>(b"abc".to_vec()) })
    ///     .load()
    ///     .await
    ///     .unwrap();
    /// assert_eq!(store.current().header_value(), "Bearer abc");
    /// # }
    /// ```
    pub fn new<F, Fut, E>(name: impl Into<String>, load: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<u8>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        Options::new().source(FnSource::new(name, load))
    }
}

impl<S: TokenSource> StoreBuilder<S> {
    /// A builder on any source, with the default options.
    pub fn from_source(source: S) -> Self {
        Options::new().source(source)
    }
}

impl<S> StoreBuilder<S> {
    /// The same options on another source.
    pub fn source<T: TokenSource>(self, source: T) -> StoreBuilder<T> {
        StoreBuilder {
            source,
            refresh_interval: self.refresh_interval,
            watch: self.watch,
            max_size: self.max_size,
            unauthorized_interval: self.unauthorized_interval,
            read_timeout: self.read_timeout,
            name: self.name,
            clock: self.clock,
        }
    }

    /// How often the source is read again regardless of any event (default: the source's
    /// [`default_refresh_interval`], 60 s for a file or a loader, none for a source that
    /// gives expiries); `None` turns the periodic reads off. Each wait is drawn a little
    /// longer than the interval (by up to 5% of it, at least a second, at most a quarter),
    /// so that stores loaded together do not read in step. The reads at the moments the
    /// token's dates tell about (a JWT's rotation point and expiry, a source's expiry)
    /// go on either way.
    ///
    /// [`default_refresh_interval`]: TokenSource::default_refresh_interval
    pub fn refresh_interval(mut self, interval: Option<Duration>) -> Self {
        self.refresh_interval = Some(interval);
        self
    }

    /// Whether to watch the source's file for changes (default on; a source that is not a
    /// file has nothing to watch).
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// The largest token accepted, in bytes (default 64 KiB). A file is refused from its
    /// length, or after reading at most `max_size + 1` bytes.
    pub fn max_size(mut self, max_size: usize) -> Self {
        self.max_size = max_size;
        self
    }

    /// The least time between two fetches triggered by unauthorized responses to the same
    /// token (default 1 s), so that a token that is simply wrong costs one fetch per
    /// interval, however many requests it fails. A token newer than the last one refused
    /// gets a fetch at once.
    pub fn unauthorized_reload_interval(mut self, interval: Duration) -> Self {
        self.unauthorized_interval = interval;
        self
    }

    /// How long one fetch may take before it counts as failed (default: the source's
    /// [`default_read_timeout`], 10 s for a file or a loader, 60 s for an exec plugin): a
    /// read stuck on a dead mount or a hung plugin must not hold up every later reload.
    ///
    /// [`default_read_timeout`]: TokenSource::default_read_timeout
    pub fn read_timeout(mut self, limit: Duration) -> Self {
        self.read_timeout = Some(limit);
        self
    }

    /// The store's name: the `source` label of its metrics (feature `metrics`), such as a
    /// tenant's. By default its source's description (`file /var/run/...`). Never put a
    /// token in it. Stores shared by [`share_key`](TokenSource::share_key) keep the first
    /// one's name.
    pub fn name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The wall clock the store compares token dates to (tests only).
    #[cfg(test)]
    pub(crate) fn clock(mut self, clock: Clock) -> Self {
        self.clock = clock;
        self
    }

    /// Simulated time for tests (feature `testing`): the store reads the wall-clock time as
    /// `origin` plus the tokio time elapsed since `start`, instead of the system clock.
    ///
    /// Token dates are wall-clock dates, while tokio's paused clock
    /// (`#[tokio::test(start_paused = true)]`, `tokio::time::pause`) moves only its own
    /// `Instant`. With this clock one `tokio::time::advance` moves the timer and the dates the
    /// store compares expiries to together, so that a test can run a day of refreshes in
    /// a second. A test server that mints tokens must use the same time
    /// (`origin + (tokio::time::Instant::now() - start)`). Not meant for production: the
    /// clock does not enter the key under which stores are shared.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() {
    /// use std::time::{Duration, SystemTime};
    /// use bearer_reload::TokenLoader;
    ///
    /// let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    /// let store = TokenLoader::new("t", || async { Ok::<_, std::io::Error>(b"abc".to_vec()) })
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
    #[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
    pub fn simulated_clock(
        mut self,
        origin: std::time::SystemTime,
        start: tokio::time::Instant,
    ) -> Self {
        self.clock = Clock::tokio(origin, start);
        self
    }
}

impl<S: TokenSource> StoreBuilder<S> {
    /// Fetches the first token and returns a store that keeps it fresh, with its timer and
    /// watcher running as a tokio task that ends with the store.
    ///
    /// Fails, naming the source, when the first fetch fails or does not yield a valid
    /// token. Must be called within a tokio runtime with its time driver (`#[tokio::main]`
    /// and `#[tokio::test]` have one): the store's reads run there, with a time limit.
    pub async fn load(self) -> Result<TokenStore, LoadError> {
        let (store, refresher) = self.pair().await?;
        tokio::spawn(refresher);
        Ok(store)
    }

    /// Like [`load`](Self::load), but hands back the background work for the caller to
    /// run (it ends when the store is dropped) instead of spawning it.
    ///
    /// A source with a [`share_key`](TokenSource::share_key) that a live store of this
    /// process already serves, with the same options, gets that store (and a refresher with
    /// nothing to do): one file read, one timer and one watch however many times it is
    /// loaded.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), bearer_reload::LoadError> {
    /// use bearer_reload::TokenLoader;
    ///
    /// let (store, refresher) = TokenLoader::new("static", || async {
    ///     Ok::<_, std::io::Error>(b"abc".to_vec())
    /// })
    /// .pair()
    /// .await?;
    /// let background = tokio::spawn(refresher); // or into the application's own task set
    /// assert_eq!(store.current().header_value(), "Bearer abc");
    ///
    /// drop(store);
    /// background.await.unwrap(); // the refresher ends with the store
    /// # Ok(()) }
    /// ```
    pub async fn pair(self) -> Result<(TokenStore, Refresher), LoadError> {
        let key = self.share_key();
        if let Some(store) = key.as_ref().and_then(share::shared_store) {
            return Ok((store, Refresher::idle()));
        }
        let (store, refresher) = self.build().await?;
        Ok(match key {
            Some(key) => share::adopt(key, store, refresher),
            None => (store, refresher),
        })
    }

    fn share_key(&self) -> Option<share::ShareKey> {
        Some(share::ShareKey {
            source: (TypeId::of::<S>(), self.source.share_key()?),
            refresh_interval: self.refresh_interval,
            watch: self.watch,
            max_size: self.max_size,
            unauthorized_interval: self.unauthorized_interval,
            read_timeout: self.read_timeout,
        })
    }

    async fn build(self) -> Result<(TokenStore, Refresher), LoadError> {
        let config = Config {
            name: self.name,
            max_size: self.max_size,
            read_timeout: self
                .read_timeout
                .unwrap_or_else(|| self.source.default_read_timeout()),
            unauthorized_interval: self.unauthorized_interval,
            clock: self.clock,
        };
        let watch_path = self
            .watch
            .then(|| self.source.path().map(Path::to_owned))
            .flatten();
        let origin = self.source.describe();
        let period = self
            .refresh_interval
            .unwrap_or_else(|| self.source.default_refresh_interval());
        let store = TokenStore::load(Arc::new(self.source), origin, config).await?;
        #[cfg(feature = "metrics")]
        refresh::gauges::ensure_running();
        let handle = store.downgrade();
        let timer = refresh::timer::run(handle.clone(), period, self.clock);
        let watcher = watch_path.map(|path| refresh::watch::watch(handle.clone(), &path));
        let work = refresh::until_closed(handle, async move {
            let watcher = async move {
                if let Some(watcher) = watcher {
                    watcher.await;
                }
            };
            tokio::join!(timer, watcher);
        });
        Ok((store, Refresher(Box::pin(work))))
    }
}

mod refresher;
mod share;

pub use refresher::Refresher;

#[cfg(test)]
mod tests;
