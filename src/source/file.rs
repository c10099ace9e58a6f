//! [`FileSource`]: a token file on disk.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use zeroize::Zeroizing;

use super::{FetchContext, Fetched, TokenSource};

/// Why a token file could not be read; the [`LoadError`](crate::LoadError) that wraps it
/// names the path.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FileError {
    /// The file could not be opened or read (missing, permission denied, ...).
    #[error("cannot read the file")]
    Read {
        /// The token file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The path names a directory.
    #[error("the path is a directory")]
    Directory {
        /// The token file.
        path: PathBuf,
    },
    /// The file is larger than the store accepts; it was not read.
    #[error("the file is {len} bytes, over the cap of {max} bytes")]
    TooLarge {
        /// The token file.
        path: PathBuf,
        /// Its length.
        len: u64,
        /// The cap in force.
        max: usize,
    },
    /// An earlier read of this file has still not returned (a dead mount, a FIFO without a
    /// writer), and no second read is started behind it.
    #[error(
        "an earlier read has been stuck for {stuck_for:?} (a dead mount, or a FIFO without \
         a writer?); not starting another"
    )]
    Stuck {
        /// The token file.
        path: PathBuf,
        /// How long the earlier read has been running.
        stuck_for: Duration,
    },
}

/// A token file, read whole on every fetch (see the [crate docs](crate) for an example).
///
/// Reads run on tokio's blocking pool, at most one at a time: until a read that hangs
/// returns, later fetches fail at once with [`FileError::Stuck`], so a stuck file holds at
/// most one blocking thread. A regular file over the store's size cap is refused from its
/// length, without reading it.
#[derive(Debug, Clone)]
pub struct FileSource {
    path: PathBuf,
    /// When the read now running started: the read holds the only strong reference.
    busy: Arc<Mutex<Weak<Instant>>>,
}

impl FileSource {
    /// The file at `path`, as given (symlinks are followed at each read).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        Self {
            path: path.into(),
            busy: Arc::default(),
        }
    }
}

impl TokenSource for FileSource {
    type Error = FileError;

    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, FileError> {
        let started = {
            let mut busy = crate::sync::lock(&self.busy);
            if let Some(since) = busy.upgrade() {
                return Err(FileError::Stuck {
                    path: self.path.clone(),
                    stuck_for: since.elapsed(),
                });
            }
            let started = Arc::new(Instant::now());
            *busy = Arc::downgrade(&started);
            started
        };
        let path = self.path.clone();
        let read = tokio::task::spawn_blocking(move || {
            let _running = started;
            read_file(&path, cx.max_size())
        });
        // An error: the blocking pool is shutting down with the runtime.
        let read = read.await.map_err(|e| FileError::Read {
            path: self.path.clone(),
            source: io::Error::other(e),
        });
        read?.map(|mut bytes| Fetched::new(std::mem::take(&mut *bytes)))
    }

    fn describe(&self) -> String {
        format!("file {}", self.path.display())
    }

    fn paths(&self) -> &[PathBuf] {
        std::slice::from_ref(&self.path)
    }

    fn default_refresh_interval(&self) -> Option<Duration> {
        Some(super::FILE_REFRESH_INTERVAL)
    }
}

/// Reads at most `max_size + 1` bytes of `path`, so that an oversize stream is still
/// refused by the token's validation.
fn read_file(path: &Path, max_size: usize) -> Result<Zeroizing<Vec<u8>>, FileError> {
    let io_err = |source: io::Error| FileError::Read {
        path: path.to_owned(),
        source,
    };
    let file = std::fs::File::open(path).map_err(io_err)?;
    let meta = file.metadata().map_err(io_err)?;
    if meta.is_dir() {
        return Err(FileError::Directory {
            path: path.to_owned(),
        });
    }
    if meta.is_file() && meta.len() > max_size as u64 {
        return Err(FileError::TooLarge {
            path: path.to_owned(),
            len: meta.len(),
            max: max_size,
        });
    }
    let cap = max_size.saturating_add(1);
    // Room for the file's length (for a pipe, the default cap): the buffer moves, leaving
    // an unwiped copy, only past that.
    let room = match meta.len() {
        0 => crate::token::DEFAULT_MAX_SIZE,
        len => usize::try_from(len).unwrap_or(usize::MAX),
    };
    let mut bytes = Zeroizing::new(Vec::with_capacity(room.min(cap)));
    file.take(cap as u64)
        .read_to_end(&mut bytes)
        .map_err(io_err)?;
    Ok(bytes)
}

#[cfg(test)]
mod tests;
