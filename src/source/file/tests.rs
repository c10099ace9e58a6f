use super::*;
use crate::source::Trigger;

pub(super) const CAP: usize = 1024;

pub(super) fn cx() -> FetchContext {
    FetchContext::new(Trigger::Call, CAP)
}

async fn fetch(path: &Path) -> Result<Vec<u8>, FileError> {
    FileSource::new(path)
        .fetch(cx())
        .await
        .map(|f| f.bytes().to_vec())
}

#[cfg(unix)]
pub(super) fn mkfifo(path: &Path) {
    let status = std::process::Command::new("mkfifo")
        .arg(path)
        .status()
        .unwrap();
    assert!(status.success());
}

#[cfg(unix)]
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

#[cfg(unix)]
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

#[cfg(unix)]
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
    while crate::sync::lock(&source.busy).upgrade().is_some() {
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
