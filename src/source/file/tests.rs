use super::*;
use crate::source::Trigger;

const CAP: usize = 1024;

fn cx() -> FetchContext {
    FetchContext::new(Trigger::Call, CAP)
}

async fn fetch(path: &Path) -> Result<Vec<u8>, FileError> {
    FileSource::new(path)
        .fetch(cx())
        .await
        .map(|f| f.bytes().to_vec())
}

fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[tokio::test]
async fn reads_the_bytes_as_they_are_through_symlinks() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, " abc\n").unwrap();
    std::os::unix::fs::symlink(&path, dir.path().join("link")).unwrap();
    assert_eq!(fetch(&dir.path().join("link")).await.unwrap(), b" abc\n");
    let source = FileSource::new(&path);
    assert_eq!(source.paths(), std::slice::from_ref(&path));
    assert_eq!(source.describe(), format!("file {}", path.display()));
}

#[tokio::test]
async fn errors_say_the_problem_and_keep_the_path_and_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("missing");
    let err = fetch(&missing).await.unwrap_err();
    let FileError::Read { path, source } = &err else {
        panic!("{err:?}");
    };
    assert_eq!(path, &missing);
    assert_eq!(err.to_string(), "cannot read the file");
    assert_eq!(source.kind(), io::ErrorKind::NotFound);
    assert!(std::error::Error::source(&err).is_some());

    let err = fetch(dir.path()).await.unwrap_err();
    assert!(matches!(err, FileError::Directory { .. }), "{err:?}");
    assert_eq!(err.to_string(), "the path is a directory");
}

#[tokio::test]
async fn a_huge_sparse_file_is_refused_from_its_length() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("huge");
    let f = std::fs::File::create(&path).unwrap();
    let len = 100 * 1024 * 1024;
    f.set_len(len).unwrap();
    // Refused from the metadata: the error carries the length, which only the metadata
    // tells (a read stops at cap + 1 bytes).
    match fetch(&path).await.unwrap_err() {
        FileError::TooLarge { len: got, max, .. } => assert_eq!((got, max), (len, CAP)),
        other => panic!("{other:?}"),
    }
    // One byte under the cap plus one is read whole, for the token's validation to refuse.
    std::fs::write(&path, vec![b'a'; CAP]).unwrap();
    assert_eq!(fetch(&path).await.unwrap().len(), CAP);
}

#[test]
fn a_stream_longer_than_the_cap_is_cut_at_cap_plus_one() {
    // A FIFO has no length in its metadata: the read itself must stop.
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    mkfifo(&path);
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
    let bytes = read_file(&path, CAP).unwrap();
    assert_eq!(bytes.len(), CAP + 1);
    let written = writer.join().unwrap();
    assert!(written < 1024 * 1024, "reader consumed {written} bytes");
}

#[tokio::test]
async fn a_stuck_read_holds_one_thread_and_no_second_read_starts_behind_it() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("fifo");
    mkfifo(&path);
    let source = FileSource::new(&path);
    // Opening a FIFO without a writer blocks: the store's time limit gives up on it.
    let first = tokio::time::timeout(Duration::from_millis(50), source.fetch(cx())).await;
    assert!(first.is_err(), "the open blocks");
    // Each later fetch fails at once: a second read behind the stuck one would block too
    // (and hold one more blocking thread each time).
    for _ in 0..20 {
        let next = tokio::time::timeout(Duration::from_secs(1), source.fetch(cx())).await;
        match next.expect("no second read is started").unwrap_err() {
            FileError::Stuck { path: p, .. } => assert_eq!(p, path),
            other => panic!("{other:?}"),
        }
    }

    // A writer comes: the stuck read returns, and reads work again.
    let writer = std::thread::spawn({
        let path = path.clone();
        move || std::fs::write(path, "late").unwrap()
    });
    writer.join().unwrap();
    let deadline = Instant::now() + Duration::from_secs(5);
    while crate::sync::lock(&source.busy).is_some() {
        assert!(Instant::now() < deadline, "the stuck read never returned");
        tokio::task::yield_now().await;
    }
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "next").unwrap();
    assert_eq!(fetch(&path).await.unwrap(), b"next");
    assert_eq!(source.fetch(cx()).await.unwrap().bytes(), b"next");
}

#[test]
fn a_file_is_read_again_every_minute_by_default() {
    // The backstop for a missed event, cheap for a file.
    assert_eq!(
        FileSource::new("token").default_refresh_interval(),
        Some(Duration::from_secs(60))
    );
}

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
    assert!(now::LocalDir::check(dir.path()).is_some());
    // procfs, and a path that is not there.
    assert_eq!(now::LocalDir::check(Path::new("/proc/self")), None);
    assert_eq!(now::LocalDir::check(&dir.path().join("missing")), None);
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
