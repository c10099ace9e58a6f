//! Dropping a store stops everything it started: 1000 stores with watchers and timers,
//! created and dropped, leave the process with the file descriptors, threads and inotify
//! watches it had before, as the kernel counts them. In a process of its own
//! (`support::alone`), because it counts process-wide resources.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use crate::support;

use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::{BearerLayer, TokenStore};
use support::procfs::inotify_watches;
use support::writers::rename_over;

const DEADLINE: Duration = Duration::from_secs(20);

fn count(dir: &str) -> usize {
    std::fs::read_dir(dir).unwrap().count()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Counts {
    fds: usize,
    threads: usize,
    watches: usize,
}

fn counts() -> Counts {
    Counts {
        fds: count("/proc/self/fd"),
        threads: count("/proc/self/task"),
        watches: inotify_watches(),
    }
}

/// Waits, with a deadline, until the counts are back to `before`.
async fn settle(before: Counts) -> Counts {
    let start = Instant::now();
    loop {
        let now = counts();
        if now == before {
            return now;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "resources not released: before {before:?}, now {now:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[test]
fn a_thousand_stores_with_watchers_and_timers_leave_nothing_behind() {
    if !support::alone::in_own_process(
        module_path!(),
        "a_thousand_stores_with_watchers_and_timers_leave_nothing_behind",
    ) {
        return;
    }
    // The blocking pool (file reads) keeps an idle thread 10 s by default: a short keep-alive
    // lets the thread count come back to its baseline within the deadline.
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_keep_alive(Duration::from_millis(100))
        .enable_all()
        .build()
        .unwrap()
        .block_on(run());
}

async fn run() {
    let tmp = tempfile::tempdir().unwrap();
    // Ten directories: five plain files, five kubelet-style projected volumes.
    let mut paths: Vec<PathBuf> = Vec::new();
    let mut volumes = Vec::new();
    for d in 0..10 {
        if d % 2 == 0 {
            let dir = tmp.path().join(format!("plain{d}"));
            std::fs::create_dir(&dir).unwrap();
            let path = dir.join("token");
            std::fs::write(&path, format!("plain-{d}\n")).unwrap();
            paths.push(path);
        } else {
            let v = ProjectedTokenDir::create(tmp.path().join(format!("sa{d}")), format!("sa-{d}"))
                .unwrap();
            paths.push(v.token_path());
            volumes.push(v);
        }
    }

    // The baseline: the runtime's own threads and descriptors, nothing of ours.
    let before = counts();
    assert_eq!(before.watches, 0);
    println!("leak: before {before:?}");

    let start = Instant::now();
    let mut peak = before;
    for round in 0..10 {
        let mut stores: Vec<(usize, TokenStore)> = Vec::new();
        for i in 0..100 {
            let p = (round + i) % paths.len();
            // Half with a timer, half with the watcher alone.
            let builder = support::file(&paths[p]);
            let store = if i % 2 == 0 {
                builder.refresh_interval(Duration::from_secs(1) + Duration::from_millis(i as u64))
            } else {
                builder.no_periodic_refresh()
            }
            .load()
            .await
            .unwrap();
            stores.push((p, store));
        }
        let now = counts();
        assert_eq!(now.watches, 10, "one watch per directory: {now:?}");
        // Every watcher is running: a rotation in each directory reaches every store of it,
        // the watcher-only ones included.
        let mut written = Vec::new();
        for (d, path) in paths.iter().enumerate() {
            let token = format!("{}-{d}-{round}", if d % 2 == 0 { "plain" } else { "sa" });
            if d % 2 == 0 {
                rename_over(path, format!("{token}\n")).unwrap();
            }
            written.push(token);
        }
        for (v, volume) in volumes.iter().enumerate() {
            volume.rotate(&written[2 * v + 1]).unwrap();
        }
        for (p, store) in &stores {
            support::wait_for_token(store, &written[*p]).await;
        }
        // Every timer is running: each timer store reads twice more.
        let reads: Vec<u64> = stores.iter().map(|(_, s)| s.status().reads).collect();
        support::eventually("every timer fired twice", || {
            stores
                .iter()
                .zip(&reads)
                .step_by(2)
                .all(|((_, s), before)| s.status().reads >= before + 2)
        })
        .await;
        let now = counts();
        peak.fds = peak.fds.max(now.fds);
        peak.threads = peak.threads.max(now.threads);
        // Half dropped one by one, half through a layer holding a clone.
        let layers: Vec<_> = stores
            .drain(50..)
            .map(|(_, s)| BearerLayer::new(s))
            .collect();
        drop(stores);
        drop(layers);
        // Each watch task leaves once it sees its store gone, and the last store of a
        // directory takes its watch with it: the next round counts its own watches only.
        support::eventually("the round's watches removed", || inotify_watches() == 0).await;
    }
    let after = settle(before).await;

    // A directory's watch goes with its last store even while another directory keeps the
    // watcher alive (only dropping the watcher removed them above).
    let anchor = support::file(&paths[0]).load().await.unwrap();
    let other = support::file(&paths[2]).load().await.unwrap();
    assert_eq!(inotify_watches(), 2);
    drop(other);
    support::eventually("the dropped store's watch removed", || {
        inotify_watches() == 1
    })
    .await;
    drop(anchor);
    settle(before).await;
    println!(
        "leak: 1000 stores in {:.1} s; peak fds {}, threads {}; after {after:?}",
        start.elapsed().as_secs_f64(),
        peak.fds,
        peak.threads
    );
}
