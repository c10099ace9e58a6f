//! Where token bytes come from: a [`TokenFile`] on disk, or a custom [`TokenLoader`].
//!
//! Both are builders that end in `.load().await`, which reads the token once (an error there
//! names the path and the problem) and returns a [`TokenStore`] that keeps it fresh.
//!
//! ```no_run
//! # async fn run() -> Result<(), bearer_reload::LoadError> {
//! use std::time::Duration;
//! use bearer_reload::TokenFile;
//!
//! let store = TokenFile::new("/var/run/secrets/kubernetes.io/serviceaccount/token")
//!     .refresh_interval(Some(Duration::from_secs(60)))
//!     .load()
//!     .await?;
//! println!("loaded {}", store.current());
//! # Ok(()) }
//! ```

use std::fmt;
use std::future::Future;
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use crate::store::{StoreOptions, TokenStore};
use crate::token::{DEFAULT_MAX_SIZE, Token, TokenError};

/// The error type custom loaders return.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

type LoadFn =
    dyn Fn() -> Pin<Box<dyn Future<Output = Result<Vec<u8>, BoxError>> + Send>> + Send + Sync;

/// Why a token could not be loaded. The last good token stays in use.
///
/// Cheap to clone, so that every caller that shared one read gets the same error.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The file could not be opened or read (missing, permission denied, ...).
    #[error("cannot read token file {path}: {source}")]
    Read {
        /// The token file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: Arc<io::Error>,
    },
    /// The path names a directory.
    #[error("token file {path} is a directory")]
    Directory {
        /// The token file.
        path: PathBuf,
    },
    /// The bytes were read but are not a valid token.
    #[error("invalid token in {origin}: {source}")]
    Invalid {
        /// The file's path, or the loader's name.
        origin: String,
        /// What is wrong with the bytes.
        #[source]
        source: TokenError,
    },
    /// The read did not finish in time (a stuck mount, a FIFO without a writer, a hung
    /// loader); the last good token stays and later reloads are not held up by it.
    #[error("reading the token from {origin} took longer than {after:?}")]
    Timeout {
        /// The file's path, or the loader's name.
        origin: String,
        /// The time limit.
        after: Duration,
    },
    /// A custom loader failed. Its message is the loader's own: a loader must not put the
    /// token in its errors.
    #[error("token loader {name} failed: {source}")]
    Loader {
        /// The loader's name.
        name: String,
        /// The loader's error.
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync + 'static>,
    },
}

/// The origin of a store's bytes; reading it yields a validated token.
#[derive(Clone)]
pub(crate) enum Source {
    File {
        path: PathBuf,
        max_size: usize,
    },
    Loader {
        name: String,
        load: Arc<LoadFn>,
        max_size: usize,
    },
}

impl fmt::Debug for Source {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Source::File { path, .. } => write!(f, "file {}", path.display()),
            Source::Loader { name, .. } => write!(f, "loader {name}"),
        }
    }
}

impl Source {
    /// The path of a file source.
    pub(crate) fn path(&self) -> Option<&Path> {
        match self {
            Source::File { path, .. } => Some(path),
            Source::Loader { .. } => None,
        }
    }

    /// [`read`](Self::read), given up after `limit`.
    pub(crate) async fn read_within(&self, limit: Duration) -> Result<Token, LoadError> {
        tokio::time::timeout(limit, self.read())
            .await
            .unwrap_or_else(|_| {
                Err(LoadError::Timeout {
                    origin: self.origin(),
                    after: limit,
                })
            })
    }

    /// The file's path or the loader's name, for messages.
    fn origin(&self) -> String {
        match self {
            Source::File { path, .. } => path.display().to_string(),
            Source::Loader { name, .. } => format!("loader {name}"),
        }
    }

    pub(crate) async fn read(&self) -> Result<Token, LoadError> {
        match self {
            Source::File { path, max_size } => {
                let (path, max_size) = (path.clone(), *max_size);
                let joined = tokio::task::spawn_blocking(move || read_file(&path, max_size)).await;
                match joined {
                    Ok(result) => result,
                    Err(e) => Err(LoadError::Read {
                        path: self.path().unwrap_or(Path::new("")).to_owned(),
                        source: Arc::new(io::Error::other(e.to_string())),
                    }),
                }
            }
            Source::Loader {
                name,
                load,
                max_size,
            } => {
                let bytes = load().await.map_err(|source| LoadError::Loader {
                    name: name.clone(),
                    source: Arc::from(source),
                })?;
                Token::parse(&bytes, *max_size).map_err(|source| LoadError::Invalid {
                    origin: format!("loader {name}"),
                    source,
                })
            }
        }
    }
}

fn read_file(path: &Path, max_size: usize) -> Result<Token, LoadError> {
    let io_err = |source: io::Error| LoadError::Read {
        path: path.to_owned(),
        source: Arc::new(source),
    };
    let invalid = |source: TokenError| LoadError::Invalid {
        origin: path.display().to_string(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if meta.is_dir() {
        return Err(LoadError::Directory {
            path: path.to_owned(),
        });
    }
    // A regular file's length is known: refuse a huge one without touching its contents.
    if meta.is_file() && meta.len() > max_size as u64 {
        return Err(invalid(TokenError::TooLarge { max: max_size }));
    }
    let mut bytes = Vec::with_capacity((meta.len() as usize).min(max_size) + 1);
    // The length can change under us (or be unknown for a pipe): never read past cap + 1.
    file.take(max_size as u64 + 1)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    Token::parse(&bytes, max_size).map_err(invalid)
}

/// Builder for a [`TokenStore`] backed by a token file.
///
/// By default the file is re-read every 60 seconds and on every change in its directory,
/// files up to 64 KiB are accepted, and 401s to one token trigger at most one re-read a second.
#[derive(Debug, Clone)]
pub struct TokenFile {
    path: PathBuf,
    max_size: usize,
    watch: bool,
    options: StoreOptions,
}

impl TokenFile {
    /// A token file at `path`.
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            max_size: DEFAULT_MAX_SIZE,
            watch: true,
            options: StoreOptions::default(),
        }
    }

    /// The largest file accepted, in bytes (default 64 KiB). Larger files are rejected
    /// after reading at most `max_size + 1` bytes.
    pub fn max_size(mut self, max_size: usize) -> Self {
        self.max_size = max_size;
        self
    }

    /// How often the file is re-read regardless of any event (default 60 s); `None` turns
    /// the timer off.
    pub fn refresh_interval(mut self, interval: Option<Duration>) -> Self {
        self.options.refresh_interval = interval;
        self
    }

    /// Whether to watch the file's directory for changes (default on).
    pub fn watch(mut self, watch: bool) -> Self {
        self.watch = watch;
        self
    }

    /// The least time between two re-reads triggered by unauthorized responses to the same
    /// token (default 1 s), so that a token that is simply wrong costs one disk read per
    /// interval, however many requests it fails. A token newer than the last one refused
    /// gets a read at once.
    pub fn unauthorized_reload_interval(mut self, interval: Duration) -> Self {
        self.options.unauthorized_interval = interval;
        self
    }

    /// How long one read may take before it counts as failed (default 10 s): a read stuck
    /// on a dead mount must not hold up every later reload.
    pub fn read_timeout(mut self, limit: Duration) -> Self {
        self.options.read_timeout = limit;
        self
    }

    /// The file's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Reads the file and returns a store that keeps it fresh.
    ///
    /// Fails, naming the path, when the file is missing or does not hold a valid token.
    /// Must be called within a tokio runtime with its time driver (`#[tokio::main]` and
    /// `#[tokio::test]` have one): the store's refreshers are tokio tasks, and reads have a
    /// time limit.
    pub async fn load(self) -> Result<TokenStore, LoadError> {
        let source = Source::File {
            path: self.path.clone(),
            max_size: self.max_size,
        };
        let watch_path = self.watch.then_some(self.path);
        TokenStore::start(source, self.options, watch_path).await
    }
}

/// Builder for a [`TokenStore`] whose bytes come from an async function, for tokens that do
/// not live in a file (a secret manager, another process's API).
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
#[derive(Clone)]
pub struct TokenLoader {
    name: String,
    load: Arc<LoadFn>,
    max_size: usize,
    options: StoreOptions,
}

impl fmt::Debug for TokenLoader {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenLoader")
            .field("name", &self.name)
            .field("max_size", &self.max_size)
            .field("options", &self.options)
            .finish_non_exhaustive()
    }
}

impl TokenLoader {
    /// A loader named `name` (used in errors and logs) that calls `load` for the bytes.
    pub fn new<F, Fut, E>(name: impl Into<String>, load: F) -> Self
    where
        F: Fn() -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<Vec<u8>, E>> + Send + 'static,
        E: Into<BoxError>,
    {
        let load: Arc<LoadFn> = Arc::new(move || {
            let fut = load();
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        Self {
            name: name.into(),
            load,
            max_size: DEFAULT_MAX_SIZE,
            options: StoreOptions::default(),
        }
    }

    /// The largest token accepted, in bytes (default 64 KiB).
    pub fn max_size(mut self, max_size: usize) -> Self {
        self.max_size = max_size;
        self
    }

    /// How often the loader is called again (default 60 s); `None` turns the timer off.
    pub fn refresh_interval(mut self, interval: Option<Duration>) -> Self {
        self.options.refresh_interval = interval;
        self
    }

    /// The least time between two calls triggered by unauthorized responses to the same
    /// token (default 1 s).
    pub fn unauthorized_reload_interval(mut self, interval: Duration) -> Self {
        self.options.unauthorized_interval = interval;
        self
    }

    /// The wall clock the store compares token dates to (tests only).
    #[cfg(test)]
    pub(crate) fn clock(mut self, clock: crate::clock::Clock) -> Self {
        self.options.clock = clock;
        self
    }

    /// How long one call may take before it counts as failed (default 10 s).
    pub fn read_timeout(mut self, limit: Duration) -> Self {
        self.options.read_timeout = limit;
        self
    }

    /// Calls the loader once and returns a store that keeps the token fresh.
    ///
    /// Must be called within a tokio runtime with its time driver, as [`TokenFile::load`].
    pub async fn load(self) -> Result<TokenStore, LoadError> {
        let source = Source::Loader {
            name: self.name,
            load: self.load,
            max_size: self.max_size,
        };
        TokenStore::start(source, self.options, None).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file_source(path: &Path) -> Source {
        Source::File {
            path: path.to_owned(),
            max_size: 1024,
        }
    }

    #[tokio::test]
    async fn reads_and_trims_a_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc\n").unwrap();
        let token = file_source(&path).read().await.unwrap();
        assert_eq!(token.header_value(), "Bearer abc");
    }

    #[tokio::test]
    async fn errors_name_the_path_and_the_problem() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("missing");
        let err = file_source(&missing).read().await.unwrap_err();
        assert!(matches!(err, LoadError::Read { .. }), "{err:?}");
        let msg = err.to_string();
        assert!(msg.contains(&missing.display().to_string()), "{msg}");
        assert!(msg.contains("No such file"), "{msg}");

        let err = file_source(dir.path()).read().await.unwrap_err();
        assert!(matches!(err, LoadError::Directory { .. }), "{err:?}");
        assert!(err.to_string().contains("is a directory"));

        let bad = dir.path().join("bad");
        std::fs::write(&bad, "secret\x01value").unwrap();
        let msg = file_source(&bad).read().await.unwrap_err().to_string();
        assert!(msg.contains("offset 6") && msg.contains(&bad.display().to_string()));
        assert!(!msg.contains("secret"), "{msg}");
    }

    #[tokio::test]
    async fn permission_denied_is_a_read_error() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        std::fs::write(&path, "abc").unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();
        if std::fs::read(&path).is_ok() {
            // Running as root (CI, containers): CAP_DAC_OVERRIDE ignores the mode bits.
            // The store tests cover this path with a loader that fails the same way.
            return;
        }
        let err = file_source(&path).read().await.unwrap_err();
        assert!(err.to_string().contains("Permission denied"), "{err}");
    }

    #[tokio::test]
    async fn a_huge_sparse_file_is_rejected_without_reading_it() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("huge");
        let f = std::fs::File::create(&path).unwrap();
        f.set_len(100 * 1024 * 1024).unwrap();
        let started = std::time::Instant::now();
        let err = file_source(&path).read().await.unwrap_err();
        assert!(
            matches!(
                err,
                LoadError::Invalid {
                    source: TokenError::TooLarge { max: 1024 },
                    ..
                }
            ),
            "{err:?}"
        );
        // Reading 100 MiB of zeroes takes tens of milliseconds at least; this bound is far
        // looser than the microseconds a metadata check takes.
        assert!(started.elapsed() < Duration::from_secs(1));
    }

    #[test]
    fn a_stream_longer_than_the_cap_is_cut_at_cap_plus_one() {
        // A FIFO has no length in its metadata: the read itself must stop.
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("fifo");
        let status = std::process::Command::new("mkfifo")
            .arg(&path)
            .status()
            .unwrap();
        assert!(status.success());
        let writer_path = path.clone();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .open(writer_path)
                .unwrap();
            // Writes until the reader closes its end (then EPIPE).
            let chunk = [b'a'; 4096];
            let mut written = 0usize;
            while f.write_all(&chunk).is_ok() {
                written += chunk.len();
                if written > 64 * 1024 * 1024 {
                    break;
                }
            }
            written
        });
        let err = read_file(&path, 1024).unwrap_err();
        assert!(matches!(
            err,
            LoadError::Invalid {
                source: TokenError::TooLarge { max: 1024 },
                ..
            }
        ));
        let written = writer.join().unwrap();
        assert!(written < 1024 * 1024, "reader consumed {written} bytes");
    }
}
