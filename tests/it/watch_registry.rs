//! One watcher per process: many stores share one inotify instance and one watch per
//! directory, and dropping them leaves nothing behind. Seen from outside, as the kernel
//! counts them: inotify descriptors and watches, and threads. In a process of its own
//! (`support::alone`), because it counts the process's resources.

use std::time::{Duration, Instant};

use bearer_reload::TokenStore;
use support::procfs::{inotify_fds, inotify_watches, threads};
use support::writers::rename_over;

use crate::support;

const DEADLINE: Duration = Duration::from_secs(10);

/// The threads of notify's inotify backend ("notify-rs inotify loop", cut to 15 bytes by
/// the kernel).
fn notify_threads() -> usize {
    threads("notify-rs").len()
}

/// The registry's directory check threads.
fn check_threads() -> usize {
    threads("token-dir-check").len()
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_stores_on_twenty_files_in_five_directories() {
    if !support::alone::in_own_process(
        module_path!(),
        "two_hundred_stores_on_twenty_files_in_five_directories",
    ) {
        return;
    }
    assert_eq!(inotify_fds(), 0);
    let tmp = tempfile::tempdir().unwrap();
    let mut files = Vec::new();
    for d in 0..5 {
        let dir = tmp.path().join(format!("dir{d}"));
        std::fs::create_dir(&dir).unwrap();
        for f in 0..4 {
            let path = dir.join(format!("token{f}"));
            std::fs::write(&path, format!("t-{d}-{f}")).unwrap();
            files.push(path);
        }
    }
    // Another spelling of a directory is the same directory.
    std::os::unix::fs::symlink(tmp.path().join("dir0"), tmp.path().join("alias")).unwrap();

    // 200 stores, ten of each file: nothing shares a store behind the user's back, yet the
    // process holds one watcher and one watch per directory.
    let mut stores: Vec<TokenStore> = Vec::new();
    for i in 0..200 {
        let path = if i == 0 {
            tmp.path().join("alias/./token0")
        } else {
            files[i % files.len()].clone()
        };
        stores.push(
            support::file(path)
                .no_periodic_refresh()
                .load()
                .await
                .unwrap(),
        );
    }
    assert_eq!(inotify_fds(), 1, "one inotify instance for the process");
    assert_eq!(notify_threads(), 1);
    assert_eq!(inotify_watches(), 5, "one watch per directory");
    assert_eq!(
        check_threads(),
        1,
        "one check of the directories for the process"
    );
    // Between its checks (every 5 s) it sleeps: at most a few ticks of CPU in a second.
    let before = threads("token-dir-check")[0];
    tokio::time::sleep(Duration::from_secs(1)).await;
    let used = threads("token-dir-check")[0] - before;
    assert!(used <= 10, "{used} clock ticks in a second");

    // Every store of a rotated file follows.
    rename_over(&files[7], "rotated").unwrap();
    for store in stores.iter().skip(7).step_by(files.len()) {
        let mut rx = store.subscribe();
        tokio::time::timeout(DEADLINE, async {
            while store.current().header_value() != "Bearer rotated" {
                rx.changed().await.unwrap();
            }
        })
        .await
        .expect("every store of the file reloads");
    }

    // Dropping all the stores of one directory releases its watch.
    stores.retain(|s| !s.status().source.contains("dir4"));
    // The kernel's watch goes with them, though the watcher stays for the others.
    eventually("dir4's inotify watch removed", || inotify_watches() == 4).await;
    assert_eq!(inotify_fds(), 1);

    drop(stores);
    eventually("every watch released", || inotify_watches() == 0).await;
    // The watcher's thread closes the inotify descriptor shortly after it is dropped.
    eventually("no inotify fd", || inotify_fds() == 0).await;
    eventually("no notify thread", || notify_threads() == 0).await;
    eventually("no directory check thread", || check_threads() == 0).await;
}
