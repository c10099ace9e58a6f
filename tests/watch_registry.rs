//! One watcher per process: many stores share one inotify instance and one watch per
//! directory, and dropping them leaves nothing behind. Alone in its binary, because it
//! counts the process-wide registry and the process's file descriptors.

use std::path::Path;
use std::time::{Duration, Instant};

use bearer_reload::testing::{rename_over, watch_registry};
use bearer_reload::{TokenFile, TokenStore};

const DEADLINE: Duration = Duration::from_secs(10);

/// The process's inotify instances, from /proc/self/fd.
fn inotify_fds() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|target| target == Path::new("anon_inode:inotify"))
        .count()
}

/// The watches the kernel holds for the process's inotify instances, from
/// /proc/self/fdinfo (one `inotify wd:` line each).
fn inotify_watches() -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| {
            let path = e.ok()?.path();
            if std::fs::read_link(&path).ok()? != Path::new("anon_inode:inotify") {
                return None;
            }
            let info = Path::new("/proc/self/fdinfo").join(path.file_name()?);
            let info = std::fs::read_to_string(info).ok()?;
            Some(
                info.lines()
                    .filter(|l| l.starts_with("inotify wd:"))
                    .count(),
            )
        })
        .sum()
}

/// The process's threads whose name starts with `prefix`, with the CPU time each has used
/// (user and system, in clock ticks), from /proc/self/task.
fn threads(prefix: &str) -> Vec<u64> {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|e| {
            let task = e.ok()?.path();
            let comm = std::fs::read_to_string(task.join("comm")).ok()?;
            if !comm.starts_with(prefix) {
                return None;
            }
            // The fields after the name, which is in parentheses: utime and stime are the
            // 12th and 13th of them.
            let stat = std::fs::read_to_string(task.join("stat")).ok()?;
            let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
            Some(fields[11].parse::<u64>().ok()? + fields[12].parse::<u64>().ok()?)
        })
        .collect()
}

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

    let mut stores: Vec<TokenStore> = Vec::new();
    for i in 0..200 {
        let path = if i == 0 {
            tmp.path().join("alias/./token0")
        } else {
            files[i % files.len()].clone()
        };
        stores.push(
            TokenFile::new(path)
                .refresh_interval(None)
                .load()
                .await
                .unwrap(),
        );
    }
    let registry = watch_registry();
    assert_eq!(registry.directories, 5);
    // 200 loads of 20 files (one through a symlinked directory): one store per file.
    assert_eq!(registry.subscribers, 20);
    assert!(stores[0].ptr_eq(&stores[20]));
    assert!(registry.watcher);
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
    eventually("dir4 released", || watch_registry().directories == 4).await;
    // The kernel's watch goes with it (removed just after the count), though the watcher
    // stays for the others.
    eventually("dir4's inotify watch removed", || inotify_watches() == 4).await;

    drop(stores);
    eventually("every watch released", || {
        let r = watch_registry();
        r.directories == 0 && r.subscribers == 0 && !r.watcher
    })
    .await;
    // The watcher's thread closes the inotify descriptor shortly after it is dropped.
    eventually("no inotify fd", || inotify_fds() == 0).await;
    eventually("no notify thread", || notify_threads() == 0).await;
    eventually("no directory check thread", || check_threads() == 0).await;
}
