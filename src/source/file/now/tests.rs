//! The fast path (Linux): reads on the watcher's thread, and what they leave to the
//! blocking read.

use std::path::Path;
use std::time::{Duration, Instant};

use super::super::tests::{CAP, cx, mkfifo};
use super::super::{FileSource, TokenSource};
use super::LocalDir;

/// Reads on the spot, run on a thread of its own: a call that blocked would fail the
/// deadline instead of hanging the test.
fn read_now(source: &FileSource) -> Option<Vec<u8>> {
    let source = source.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || tx.send(source.read_now(CAP)).unwrap());
    rx.recv_timeout(Duration::from_secs(10))
        .expect("a read on the spot never blocks")
}

/// Directories on the local filesystems the machine has: the temporary directory, and
/// `/dev/shm` where it is a tmpfs (the filesystem of a projected volume).
fn local_dirs() -> Vec<tempfile::TempDir> {
    let mut dirs = vec![tempfile::tempdir().unwrap()];
    if rustix::fs::statfs("/dev/shm").is_ok_and(|fs| fs.f_type as u64 & 0xffff_ffff == 0x0102_1994)
    {
        dirs.push(tempfile::tempdir_in("/dev/shm").unwrap());
    }
    dirs
}

#[tokio::test]
async fn a_local_file_is_read_on_the_spot_once_a_blocking_read_found_its_directory_local() {
    for dir in local_dirs() {
        let path = dir.path().join("token");
        std::fs::write(&path, "one").unwrap();
        let source = FileSource::new(&path);
        assert_eq!(
            read_now(&source),
            None,
            "nothing is known of the directory yet"
        );
        assert_eq!(source.fetch(cx()).await.unwrap().bytes(), b"one");
        assert_eq!(read_now(&source).as_deref(), Some(&b"one"[..]), "{dir:?}");
        // Each call reads the file as it is now, through the links of a projected volume.
        std::fs::write(&path, "two, longer than one").unwrap();
        assert_eq!(
            read_now(&source).as_deref(),
            Some(&b"two, longer than one"[..])
        );
        std::fs::create_dir(dir.path().join("..2026_12_02")).unwrap();
        std::fs::write(dir.path().join("..2026_12_02/token"), "three").unwrap();
        std::os::unix::fs::symlink("..2026_12_02", dir.path().join("..data")).unwrap();
        std::fs::remove_file(&path).unwrap();
        std::os::unix::fs::symlink("..data/token", &path).unwrap();
        assert_eq!(read_now(&source).as_deref(), Some(&b"three"[..]));
        // Up to the cap, the whole file; one byte over, nothing (the blocking read says why).
        std::fs::write(dir.path().join("..2026_12_02/token"), vec![b'a'; CAP]).unwrap();
        assert_eq!(read_now(&source).map(|b| b.len()), Some(CAP));
        std::fs::write(dir.path().join("..2026_12_02/token"), vec![b'a'; CAP + 1]).unwrap();
        assert_eq!(read_now(&source), None);
    }
}

#[tokio::test]
async fn what_could_block_or_is_no_plain_local_file_is_left_to_the_blocking_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let source = FileSource::new(&path);
    source.fetch(cx()).await.unwrap();
    assert!(read_now(&source).is_some());

    // A FIFO without a writer: opening it to read would wait for one.
    std::fs::remove_file(&path).unwrap();
    mkfifo(&path);
    assert_eq!(read_now(&source), None);
    // A directory, and nothing at all.
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    assert_eq!(read_now(&source), None);
    std::fs::remove_dir(&path).unwrap();
    assert_eq!(read_now(&source), None);
    // A link that leaves the directory's filesystem: whatever is there (here procfs) was
    // never checked, so it is read the blocking way, which can.
    std::os::unix::fs::symlink("/proc/version", &path).unwrap();
    assert_eq!(read_now(&source), None);
    assert!(!source.fetch(cx()).await.unwrap().bytes().is_empty());
    // From a directory in memory (read with a plain `pread`, which procfs or a network
    // mount would answer too) to a plain file on another mount: the kernel refuses to
    // cross, whatever the file is.
    for local in local_dirs()
        .iter()
        .filter(|d| d.path().starts_with("/dev/shm"))
    {
        let elsewhere = dir.path().join("elsewhere");
        std::fs::write(&elsewhere, "on another mount").unwrap();
        let link = local.path().join("token");
        std::os::unix::fs::symlink(&elsewhere, &link).unwrap();
        let linked = FileSource::new(&link);
        assert_eq!(
            linked.fetch(cx()).await.unwrap().bytes(),
            b"on another mount"
        );
        assert_eq!(read_now(&linked), None);
        // The same file, linked from its own directory, is read on the spot.
        let beside = dir.path().join("beside");
        std::os::unix::fs::symlink("elsewhere", &beside).unwrap();
        let near = FileSource::new(&beside);
        near.fetch(cx()).await.unwrap();
        assert_eq!(read_now(&near).as_deref(), Some(&b"on another mount"[..]));
    }

    // A blocking read still running (stuck on a dead mount, say): none on the spot either.
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "two").unwrap();
    source.fetch(cx()).await.unwrap();
    assert!(read_now(&source).is_some());
    *crate::sync::lock(&source.busy) = Some(Instant::now());
    assert_eq!(read_now(&source), None);
}

#[test]
fn only_local_filesystems_are_read_on_the_spot() {
    let dir = tempfile::tempdir().unwrap();
    assert!(LocalDir::check(dir.path()).is_some());
    // procfs, and a path that is not there.
    assert_eq!(LocalDir::check(Path::new("/proc/self")), None);
    assert_eq!(LocalDir::check(&dir.path().join("missing")), None);
}

#[test]
fn a_bare_file_name_is_read_on_the_spot_from_the_working_directory() {
    let source = FileSource::new("token");
    assert_eq!(
        source.split(),
        Some((Path::new("."), std::ffi::OsStr::new("token")))
    );
    let nested = FileSource::new("/run/secrets/token");
    assert_eq!(
        nested.split(),
        Some((Path::new("/run/secrets"), std::ffi::OsStr::new("token")))
    );
    assert_eq!(FileSource::new("/").split(), None);
}
