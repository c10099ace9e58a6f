//! The registry's table: the watched directories, their state, and their subscribers by
//! file name.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tokio::sync::Semaphore;

use super::signal::Signal;

/// How many reads woken by a directory's events run at once, per directory: enough to keep
/// a few cores busy when an event wakes every store of a crowded directory, without a
/// blocking thread per store.
pub(crate) const READS_PER_DIR: usize = 4;

/// One watched (or to-be-watched) directory.
pub(super) struct Dir {
    /// Subscribers by the file name they watch, then by id.
    pub(super) names: HashMap<OsString, HashMap<u64, Arc<Signal>>>,
    /// Entries registered, over all names.
    pub(super) count: usize,
    /// The watcher holds a watch for this directory (maybe a stale one, after a rename).
    pub(super) watched: bool,
    /// Events for this directory are flowing.
    pub(super) armed: bool,
    /// Counts successful arms, so that a subscriber can tell a stale loss from a new one.
    pub(super) epoch: u64,
    /// The watcher instance that holds the watch.
    pub(super) instance: u64,
    /// Device and inode of the directory when it was armed.
    pub(super) identity: Option<(u64, u64)>,
    /// The failure last logged for this directory: each is logged once.
    pub(super) failure: Option<String>,
    /// Bounds the reads of the stores of this directory that run at once.
    pub(super) reads: Arc<Semaphore>,
}

impl Dir {
    pub(super) fn new() -> Self {
        Self {
            names: HashMap::new(),
            count: 0,
            watched: false,
            armed: false,
            epoch: 0,
            instance: 0,
            identity: None,
            failure: None,
            reads: Arc::new(Semaphore::new(READS_PER_DIR)),
        }
    }

    /// Wakes every subscriber of the directory.
    pub(super) fn wake_all(&self) {
        self.names
            .values()
            .flat_map(HashMap::values)
            .for_each(|s| s.wake());
    }

    /// The subscribers of one name.
    pub(super) fn subscribers_of(&self, name: &OsStr) -> impl Iterator<Item = &Arc<Signal>> {
        self.names.get(name).into_iter().flat_map(HashMap::values)
    }
}

/// The directories, and how many of them the watcher watches.
#[derive(Default)]
pub(super) struct Table {
    pub(super) dirs: HashMap<PathBuf, Dir>,
    pub(super) watched: usize,
    /// The tracker of the last rename's "to" event: its "both" event, which follows,
    /// reports the same rename again.
    pub(super) last_rename: Option<usize>,
}

impl Table {
    pub(super) fn set_watched(&mut self, dir: &Path, watched: bool) {
        if let Some(d) = self.dirs.get_mut(dir)
            && d.watched != watched
        {
            d.watched = watched;
            if watched {
                self.watched += 1;
            } else {
                self.watched -= 1;
            }
        }
    }

    pub(super) fn remove(&mut self, dir: &Path) -> Option<Dir> {
        let d = self.dirs.remove(dir)?;
        if d.watched {
            self.watched -= 1;
        }
        Some(d)
    }
}

pub(super) fn lost_reason(dir: &Path) -> String {
    format!(
        "directory {} was removed, renamed or unmounted",
        dir.display()
    )
}

/// Marks `dir` as no longer watched at its path, with one warning.
pub(super) fn mark_lost(dir: &Path, d: &mut Dir) {
    d.armed = false;
    tracing::warn!(
        dir = %dir.display(),
        "token directory disappeared; the timer still refreshes the token and the watch \
         re-arms when it comes back"
    );
    d.failure = Some(lost_reason(dir));
}

/// What tells a directory from another made at the same path, or `None` when there is no
/// directory at `dir`.
pub(super) fn identity(dir: &Path) -> Option<(u64, u64)> {
    std::fs::metadata(dir)
        .ok()
        .filter(|m| m.is_dir())
        .map(|m| file_id(&m))
}

/// Device and inode.
#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    (meta.dev(), meta.ino())
}

/// The creation time: std has no stable file id elsewhere (Windows' is unstable). A
/// directory made again within seconds may get its old creation time back (NTFS name
/// tunnelling): then only the timer notices the swap.
#[cfg(not(unix))]
fn file_id(meta: &std::fs::Metadata) -> (u64, u64) {
    let created = meta
        .created()
        .ok()
        .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
        .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
    (0, created)
}
