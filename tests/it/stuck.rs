//! A read stuck in the kernel holds one blocking thread, however many reloads follow: a
//! token path that is a FIFO without a writer (as a dead mount would) is reloaded 20 times
//! with a 100 ms time limit, and the process's thread count stays where it was. In a
//! process of its own (`support::alone`), because it counts the process's threads.

use std::time::Duration;

use crate::support;

use bearer_reload::LoadError;
use bearer_reload::source::FileError;

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stuck_file_holds_one_blocking_thread_however_many_reloads() {
    if !support::alone::in_own_process(
        module_path!(),
        "a_stuck_file_holds_one_blocking_thread_however_many_reloads",
    ) {
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "good-token").unwrap();
    let store = support::file(&path)
        .no_watch()
        .no_periodic_refresh()
        .fetch_timeout(Duration::from_millis(100))
        .load()
        .await
        .unwrap();
    // The file becomes a FIFO with no writer: opening it blocks.
    std::fs::remove_file(&path).unwrap();
    let status = std::process::Command::new("mkfifo")
        .arg(&path)
        .status()
        .unwrap();
    assert!(status.success());

    let first = store.reload().await.unwrap_err();
    assert!(matches!(first, LoadError::Timeout { .. }), "{first}");
    let baseline = threads();
    for _ in 0..20 {
        let err = store.reload().await.unwrap_err();
        assert!(
            matches!(
                err.downcast_ref::<FileError>(),
                Some(FileError::Stuck { .. })
            ),
            "{err}"
        );
        assert!(
            err.to_string().contains(&path.display().to_string()),
            "{err}"
        );
    }
    // At most the one stuck thread: no new thread per reload (tokio's blocking pool would
    // otherwise grow by one each time).
    assert!(
        threads() <= baseline,
        "{} threads, {baseline} before",
        threads()
    );
    assert_eq!(store.current().header_value(), "Bearer good-token");

    // A writer comes: the stuck read returns, and reads work again.
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .map(drop)
        .unwrap();
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "next-token").unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    loop {
        match store.reload().await {
            Ok(_) => break,
            Err(e)
                if e.downcast_ref::<FileError>()
                    .is_some_and(|f| matches!(f, FileError::Stuck { .. })) =>
            {
                assert!(tokio::time::Instant::now() < deadline, "still stuck");
                tokio::task::yield_now().await;
            }
            Err(e) => panic!("{e}"),
        }
    }
    assert_eq!(store.current().header_value(), "Bearer next-token");
}
