//! The common ways a token file is rewritten, for the tests: a rename over it (editors,
//! `mv`, most agents), a truncate-and-write (`echo > file`), and a slow writer whose
//! half-written file a reader can see; and the kubelet's certificate manager's dated PEM
//! files behind a re-pointed `-current.pem` symlink. The kubelet's projected volumes are
//! `bearer_reload::testing`'s.

use std::fs;
use std::io::{self, Write};
use std::path::Path;
use std::time::Duration;

/// Replaces `path` the way editors, `mv` and most agents do: writes the bytes to a
/// temporary file in the same directory, then renames it over `path`.
///
/// A reader sees the old file or the new one, never a mix; a watch on `path` itself stays
/// on the old, now unlinked, inode.
pub fn rename_over(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let path = path.as_ref();
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "no file name"))?;
    let mut tmp_name = std::ffi::OsString::from(".");
    tmp_name.push(name);
    tmp_name.push(format!(".{}.tmp", std::process::id()));
    let tmp = path.with_file_name(tmp_name);
    fs::write(&tmp, bytes)?;
    fs::rename(&tmp, path).inspect_err(|_| {
        let _ = fs::remove_file(&tmp);
    })
}

/// Rewrites `path` in place: opens it with `O_TRUNC` (creating it if needed), then writes.
///
/// Between the two a reader sees an empty file.
pub fn truncate_and_write(path: impl AsRef<Path>, bytes: impl AsRef<[u8]>) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.write_all(bytes.as_ref())
}

/// Rewrites `path` in place in two writes with a `pause` between them, as a slow writer
/// does: during the pause a reader sees an empty file, then `first` alone.
///
/// Blocks the calling thread for `pause`: from async code, call it in
/// `tokio::task::spawn_blocking`.
pub fn write_in_chunks(
    path: impl AsRef<Path>,
    first: impl AsRef<[u8]>,
    pause: Duration,
    rest: impl AsRef<[u8]>,
) -> io::Result<()> {
    let mut f = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .open(path)?;
    f.write_all(first.as_ref())?;
    std::thread::sleep(pause);
    f.write_all(rest.as_ref())
}

/// Writes `pem` as the kubelet's certificate manager does (client-go's
/// `util/certificate` `fileStore.Update`): a new dated file
/// `<dir>/<pair>-<YYYY-MM-DD-HH-MM-SS>.pem` (`<n>` appended when the second was taken),
/// then the symlink `<pair>-updated.pem` to it, the removal of `<pair>-current.pem`, and
/// the rename of the first over the second. Between the removal and the rename there is no
/// `-current.pem` at all. Returns the path of `<pair>-current.pem`.
pub fn kubelet_pem(dir: &Path, pair: &str, pem: &str) -> io::Result<std::path::PathBuf> {
    use std::os::unix::fs::symlink;
    let stamp = jiff::Timestamp::now()
        .strftime("%Y-%m-%d-%H-%M-%S")
        .to_string();
    let mut dated = dir.join(format!("{pair}-{stamp}.pem"));
    let mut n = 0;
    while dated.exists() {
        n += 1;
        dated = dir.join(format!("{pair}-{stamp}-{n}.pem"));
    }
    std::fs::write(&dated, pem)?;
    let updated = dir.join(format!("{pair}-updated.pem"));
    let current = dir.join(format!("{pair}-current.pem"));
    let _ = std::fs::remove_file(&updated);
    symlink(&dated, &updated)?;
    match std::fs::remove_file(&current) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    std::fs::rename(&updated, &current)?;
    Ok(current)
}
