//! The directory watcher against real file system sequences, one per way a token file is
//! rewritten in practice. The timer is off: only the watcher can explain a reload. Each
//! wait is on the store's own signals (subscribe, status) with a deadline.

use crate::support;

use std::path::Path;
use std::time::{Duration, Instant};

use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::{TokenStore, WatchState};
use support::writers::{rename_over, truncate_and_write, write_in_chunks};

const DEADLINE: Duration = Duration::from_secs(5);

async fn watched(path: &Path) -> TokenStore {
    let store = support::file(path)
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    assert_eq!(store.status().watch, WatchState::Active);
    store
}

/// Polls a condition on the store's status until it holds, or fails at the deadline.
async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn is_degraded(store: &TokenStore) -> bool {
    matches!(store.status().watch, WatchState::Degraded { .. })
}

#[tokio::test]
async fn kubelet_atomic_writer_fifty_rotations_in_a_row() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path().join("serviceaccount"), "token-0\n").unwrap();
    let store = watched(&volume.token_path()).await;
    let mut rx = store.subscribe();
    for i in 1..=50u64 {
        volume.rotate(format!("token-{i}\n")).unwrap();
        tokio::time::timeout(DEADLINE, rx.changed())
            .await
            .unwrap_or_else(|_| panic!("rotation {i} not seen"))
            .unwrap();
        let generation = *rx.borrow_and_update();
        assert_eq!(generation, i + 1, "every generation, in order");
        // No stale read: the token installed is the one just written.
        assert_eq!(store.generation(), generation);
        assert_eq!(
            store.current().header_value(),
            format!("Bearer token-{i}").as_str()
        );
    }
    let status = store.status();
    assert_eq!(status.rotations, 50);
    assert_eq!(status.failures, 0, "{:?}", status.last_error);
    assert_eq!(status.watch, WatchState::Active);
}

#[tokio::test]
async fn rename_over_like_an_editor() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let store = watched(&path).await;
    for token in ["two", "three"] {
        rename_over(&path, token).unwrap();
        support::wait_for_token(&store, token).await;
    }
    assert_eq!(store.status().failures, 0);
}

#[tokio::test]
async fn truncate_then_write_in_place() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let store = watched(&path).await;
    for token in ["two", "three-is-longer", "four"] {
        truncate_and_write(&path, token).unwrap();
        support::wait_for_token(&store, token).await;
    }
    // The empty file a reader may see between truncate and write is retried, not reported.
    let status = store.status();
    assert_eq!(status.failures, 0, "{:?}", status.last_error);
}

#[tokio::test]
async fn a_slow_writer_in_two_chunks() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "old").unwrap();
    let store = watched(&path).await;
    let writer_path = path.clone();
    let writer = tokio::task::spawn_blocking(move || {
        // The pause is the scenario: a reader sees an empty file, then the first half.
        write_in_chunks(
            &writer_path,
            "eyJhbGciOi",
            Duration::from_millis(150),
            "JSUzI1NiJ9",
        )
    });
    support::wait_for_token(&store, "eyJhbGciOiJSUzI1NiJ9").await;
    writer.await.unwrap().unwrap();
    assert!(store.status().last_error.is_none());
}

#[tokio::test]
async fn delete_then_recreate_the_file() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let store = watched(&path).await;

    std::fs::remove_file(&path).unwrap();
    // After its retries the watcher reports the missing file and keeps the last token.
    eventually("the missing file reported", || {
        store.status().last_error.is_some()
    })
    .await;
    assert_eq!(store.current().header_value(), "Bearer one");
    assert_eq!(store.status().watch, WatchState::Active);

    std::fs::write(&path, "two").unwrap();
    support::wait_for_token(&store, "two").await;
    assert!(store.status().last_error.is_none());
}

#[tokio::test]
async fn delete_and_recreate_the_whole_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("secret");
    let volume = ProjectedTokenDir::create(&dir, "one").unwrap();
    let store = watched(&volume.token_path()).await;

    std::fs::remove_dir_all(&dir).unwrap();
    eventually("degraded", || is_degraded(&store)).await;
    assert_eq!(store.current().header_value(), "Bearer one");

    // The volume comes back (a remount): the watch re-arms and the new token is read.
    let volume = ProjectedTokenDir::create(&dir, "two").unwrap();
    support::wait_for_token(&store, "two").await;
    eventually("active", || store.status().watch == WatchState::Active).await;

    // And rotations are seen again.
    volume.rotate("three").unwrap();
    support::wait_for_token(&store, "three").await;
}

#[tokio::test]
async fn the_same_file_loaded_twice_reloads_both() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path(), "one").unwrap();
    let a = watched(&volume.token_path()).await;
    let b = watched(&volume.token_path()).await;
    volume.rotate("two").unwrap();
    support::wait_for_token(&a, "two").await;
    support::wait_for_token(&b, "two").await;
    drop(a);
    volume.rotate("three").unwrap();
    support::wait_for_token(&b, "three").await;
}

#[tokio::test]
async fn our_own_reads_do_not_trigger_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path(), "one").unwrap();
    let store = watched(&volume.token_path()).await;
    volume.rotate("two").unwrap();
    support::wait_for_token(&store, "two").await;
    // Let the rotation's trailing events (the old directory's removal) settle, then check
    // that the reads they caused do not feed on themselves.
    let mut reads = store.status().reads;
    loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        let now = store.status().reads;
        if now == reads {
            break;
        }
        assert!(now - reads < 10, "reads keep coming: {reads} -> {now}");
        reads = now;
    }
    store.reload().await.unwrap();
    // A quiet window, then "at most": the explicit read (counted when it returned) and no
    // read caused by its own open and close of the file.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let after = store.status().reads;
    assert!(
        after <= reads + 1,
        "an explicit read caused {} more",
        after - reads - 1
    );
}

#[tokio::test]
async fn watching_off_is_off() {
    let tmp = tempfile::tempdir().unwrap();
    let (_, store) = support::quiet_store(tmp.path(), "one").await;
    assert_eq!(store.status().watch, WatchState::Off);
}

/// A change is read on the blocking pool, by the store's own task, never on the
/// watcher's thread: while the store's runtime runs nothing, the event leaves
/// the store as it was, and the rotation arrives once that runtime runs. A second store of
/// the same file, on a runtime that runs, shows that the event came.
#[test]
fn a_rotation_is_read_by_the_stores_runtime_not_the_watchers_thread() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path(), "one").unwrap();
    let runtime = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    let (idle, waiter) = (runtime(), runtime());
    let store = idle.block_on(watched(&volume.token_path()));
    let witness = waiter.block_on(watched(&volume.token_path()));
    let reads = store.status().reads;

    volume.rotate("two").unwrap();
    waiter.block_on(support::wait_for_token(&witness, "two"));
    // The watcher's thread woke both stores' loops and read neither file itself.
    assert_eq!(store.current().header_value(), "Bearer one");
    assert_eq!(store.status().reads, reads);
    idle.block_on(support::wait_for_token(&store, "two"));
    assert!(store.status().reads > reads);
}
