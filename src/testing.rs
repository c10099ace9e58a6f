//! A kubelet-faithful token writer for tests (feature `testing`): rotate a token file the
//! way the kubelet does ([`ProjectedTokenDir`]), and check that your application follows.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use bearer_reload::TokenStore;
//! use bearer_reload::source::FileSource;
//! use bearer_reload::testing::ProjectedTokenDir;
//!
//! let tmp = tempfile::tempdir()?;
//! let volume = ProjectedTokenDir::create(tmp.path().join("serviceaccount"), "first")?;
//! let store = TokenStore::builder(FileSource::new(volume.token_path())).load().await?;
//! let mut generations = store.subscribe();
//!
//! volume.rotate("second")?;
//! tokio::time::timeout(Duration::from_secs(5), generations.changed()).await??;
//! assert_eq!(store.current().header_value(), "Bearer second");
//! # Ok(()) }
//! ```
//!
//! On Windows the writer follows the kubelet's Windows branch: `..data` is removed and
//! linked again rather than renamed over, so a reader may briefly find no `..data`; and
//! creating symlinks needs Developer Mode or the `SeCreateSymbolicLinkPrivilege`. Other
//! non-Unix systems have no symlinks here: [`ProjectedTokenDir`] returns
//! [`io::ErrorKind::Unsupported`].

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

const DATA_DIR: &str = "..data";
const NEW_DATA_DIR: &str = "..data_tmp";

/// A projected volume directory written exactly as the kubelet's `AtomicWriter`
/// (`pkg/volume/util/atomic_writer.go`) writes it.
///
/// The layout, after any number of rotations:
///
/// ```text
/// <dir>/token   -> ..data/token                      (created once, never changes)
/// <dir>/..data  -> ..2026_11_29_12_00_00.123456789   (replaced by a rename)
/// <dir>/..2026_11_29_12_00_00.123456789/token        (the bytes; mode 0644)
/// ```
///
/// Each [`rotate`](Self::rotate):
/// 1. creates a new timestamped directory (`..YYYY_MM_DD_HH_MM_SS.<digits>`, UTC, mode
///    0755),
/// 2. writes the file inside it,
/// 3. creates the user-visible symlink `token -> ..data/token` if it does not exist,
/// 4. creates the symlink `..data_tmp -> <new timestamped directory>`,
/// 5. renames `..data_tmp` over `..data` (the atomic switch),
/// 6. removes the previous timestamped directory.
///
/// A watch on `token` itself follows the symlinks to the old file and dies at step 6; a
/// reader that opens `token` sees either the old or the new bytes, never a mix.
#[derive(Debug, Clone)]
pub struct ProjectedTokenDir {
    dir: PathBuf,
    file_name: String,
}

impl ProjectedTokenDir {
    /// Creates `dir` if needed and writes the first `token` in it, as `token`.
    pub fn create(dir: impl Into<PathBuf>, token: impl AsRef<[u8]>) -> io::Result<Self> {
        Self::create_named(dir, "token", token)
    }

    /// Like [`create`](Self::create), with another file name: one plain file name that
    /// does not start with `..`. A `ProjectedTokenDir` owns its directory's `..data`, as
    /// the kubelet's writer does: use one directory per writer.
    pub fn create_named(
        dir: impl Into<PathBuf>,
        file_name: &str,
        token: impl AsRef<[u8]>,
    ) -> io::Result<Self> {
        check_name(file_name)?;
        let this = Self {
            dir: dir.into(),
            file_name: file_name.to_owned(),
        };
        fs::create_dir_all(&this.dir)?;
        this.rotate(token)?;
        Ok(this)
    }

    /// Writes a new token with the kubelet's sequence: the instant just before the switch
    /// of `..data`, when the new token becomes visible.
    pub fn rotate(&self, token: impl AsRef<[u8]>) -> io::Result<Instant> {
        self.rotate_files(&[(self.file_name.as_str(), token.as_ref())])
    }

    /// Writes several files in one switch of `..data`, as the kubelet projects a Secret
    /// (`tls.crt` and `tls.key`): a reader sees all the old files or all the new ones. Each
    /// name is as for [`create_named`](Self::create_named).
    ///
    /// # Examples
    ///
    /// ```
    /// # fn main() -> std::io::Result<()> {
    /// use bearer_reload::testing::ProjectedTokenDir;
    ///
    /// let tmp = tempfile::tempdir()?;
    /// let volume = ProjectedTokenDir::create_named(tmp.path(), "tls.crt", "cert 1")?;
    /// volume.rotate_files(&[("tls.crt", b"cert 2"), ("tls.key", b"key 2")])?;
    /// assert_eq!(std::fs::read(tmp.path().join("tls.key"))?, b"key 2");
    /// # Ok(()) }
    /// ```
    pub fn rotate_files(&self, files: &[(&str, &[u8])]) -> io::Result<Instant> {
        for (name, _) in files {
            check_name(name)?;
        }
        let data_dir = self.dir.join(DATA_DIR);
        let old = unless_missing(fs::read_link(&data_dir))?;

        let ts_dir = self.new_timestamp_dir()?;
        let ts_name = ts_dir.file_name().expect("a file name").to_owned();

        for (name, bytes) in files {
            write_file(&ts_dir.join(name), bytes)?;
        }

        for (name, _) in files {
            let visible = self.dir.join(name);
            if unless_missing(fs::read_link(&visible))?.is_none() {
                symlink_file(Path::new(DATA_DIR).join(name), &visible)?;
            }
        }

        let new_data_dir = self.dir.join(NEW_DATA_DIR);
        if let Err(e) = symlink_dir(Path::new(&ts_name), &new_data_dir) {
            let _ = fs::remove_dir_all(&ts_dir);
            return Err(e);
        }
        let renamed_at = Instant::now();
        if let Err(e) = switch(&new_data_dir, &data_dir, Path::new(&ts_name)) {
            let _ = fs::remove_file(&new_data_dir);
            let _ = fs::remove_dir_all(&ts_dir);
            return Err(e);
        }

        if let Some(old) = old {
            unless_missing(fs::remove_dir_all(self.dir.join(old)))?;
        }
        Ok(renamed_at)
    }

    /// The user-visible file, `<dir>/token` (or the name given to `create_named`): the
    /// path to give [`FileSource::new`](crate::source::FileSource::new).
    pub fn token_path(&self) -> PathBuf {
        self.dir.join(&self.file_name)
    }

    /// The volume's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The current timestamped directory (the target of `..data`).
    pub fn data_dir(&self) -> io::Result<PathBuf> {
        Ok(self.dir.join(fs::read_link(self.dir.join(DATA_DIR))?))
    }

    /// Creates `..YYYY_MM_DD_HH_MM_SS.<digits>` like Go's `os.MkdirTemp`, then mode 0755.
    fn new_timestamp_dir(&self) -> io::Result<PathBuf> {
        let prefix = timestamp_prefix(SystemTime::now());
        let mut taken = 0;
        loop {
            let nanos = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .subsec_nanos();
            // Two rotations within one clock tick: the next number.
            let suffix = (nanos + taken) % 1_000_000_000;
            taken += 1;
            let path = self.dir.join(format!("{prefix}{suffix:09}"));
            match create_private_dir(&path) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                created => return created.and_then(|()| set_mode(&path, 0o755)).map(|()| path),
            }
        }
    }
}

fn unless_missing<T>(result: io::Result<T>) -> io::Result<Option<T>> {
    match result {
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        result => result.map(Some),
    }
}

/// Writes a projected file, mode 0644 whatever the umask.
fn write_file(path: &Path, bytes: &[u8]) -> io::Result<()> {
    let mut options = fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o644);
    let mut f = options.open(path)?;
    f.write_all(bytes)?;
    drop(f);
    set_mode(path, 0o644)
}

fn create_private_dir(path: &Path) -> io::Result<()> {
    let builder = &mut fs::DirBuilder::new();
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(builder, 0o700);
    builder.create(path)
}

fn set_mode(path: &Path, mode: u32) -> io::Result<()> {
    #[cfg(unix)]
    fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode))?;
    #[cfg(not(unix))]
    let _ = (path, mode);
    Ok(())
}

// Windows tells a link to a file from a link to a directory; Unix does not.
#[cfg(unix)]
use std::os::unix::fs::{symlink as symlink_file, symlink as symlink_dir};
#[cfg(windows)]
use std::os::windows::fs::{symlink_dir, symlink_file};

#[cfg(not(any(unix, windows)))]
fn symlink_file(_: impl AsRef<Path>, _: impl AsRef<Path>) -> io::Result<()> {
    Err(io::Error::new(
        io::ErrorKind::Unsupported,
        "ProjectedTokenDir needs symlinks",
    ))
}

#[cfg(not(any(unix, windows)))]
use symlink_file as symlink_dir;

/// Points `data_dir` at `target`: the atomic rename of `new_data_dir` over it.
#[cfg(not(windows))]
fn switch(new_data_dir: &Path, data_dir: &Path, _target: &Path) -> io::Result<()> {
    fs::rename(new_data_dir, data_dir)
}

/// Points `data_dir` at `target` as the kubelet does on Windows, which cannot rename a
/// directory link over another.
#[cfg(windows)]
fn switch(new_data_dir: &Path, data_dir: &Path, target: &Path) -> io::Result<()> {
    unless_missing(fs::remove_dir(data_dir))?;
    symlink_dir(target, data_dir)?;
    fs::remove_dir(new_data_dir)
}

fn check_name(file_name: &str) -> io::Result<()> {
    let plain = Path::new(file_name)
        .file_name()
        .is_some_and(|n| n == file_name);
    if !plain || file_name.starts_with("..") {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("invalid projected file name {file_name:?}"),
        ));
    }
    Ok(())
}

/// `..YYYY_MM_DD_HH_MM_SS.` in UTC (Go layout `..2006_01_02_15_04_05.`).
fn timestamp_prefix(at: SystemTime) -> String {
    let at = jiff::Timestamp::try_from(at).unwrap_or(jiff::Timestamp::UNIX_EPOCH);
    at.strftime("..%Y_%m_%d_%H_%M_%S.").to_string()
}

#[cfg(test)]
mod tests;
