//! Events reach the stores of the file they name (issue 13): a rotation reads that file's
//! store only, once; an event for the whole directory reads every file once, a few at a
//! time.

use super::*;
use crate::refresh::registry::READS_PER_DIR;
use std::sync::atomic::AtomicUsize;

/// A quiet window for "at most" checks: events arrive in well under a millisecond.
const QUIET: Duration = Duration::from_millis(200);

#[tokio::test]
async fn a_rotation_reads_the_rotated_files_store_only_and_once() {
    let registry = Registry::new(VERIFY_EVERY, notify_factory());
    let tmp = tempfile::tempdir().unwrap();
    let paths: Vec<PathBuf> = (0..30)
        .map(|i| tmp.path().join(format!("tenant-{i}")))
        .collect();
    // Every file written before the first watch: their own events come before it.
    for (i, path) in paths.iter().enumerate() {
        std::fs::write(path, format!("token-{i}")).unwrap();
    }
    let mut stores = Vec::new();
    for path in &paths {
        stores.push(store_with(&registry, path, None).await);
    }
    const ROTATIONS: u64 = 20;
    for r in 1..=ROTATIONS {
        // A temporary file, written and closed, then renamed over the token: its events
        // are for another name, and the rename's two are answered by one read.
        let tmp_file = tmp.path().join(".tenant-7.tmp");
        std::fs::write(&tmp_file, format!("rotated-{r}")).unwrap();
        std::fs::rename(&tmp_file, &paths[7]).unwrap();
        wait_for_token(&stores[7], &format!("rotated-{r}")).await;
    }
    tokio::time::sleep(QUIET).await;
    let reads = stores[7].status().reads - 1;
    assert!(
        (ROTATIONS..=2 * ROTATIONS).contains(&reads),
        "{reads} reads for {ROTATIONS} rotations"
    );
    // After the quiet window, "at most": the load's read alone.
    for (i, store) in stores.iter().enumerate().filter(|(i, _)| *i != 7) {
        assert!(
            store.status().reads <= 1,
            "store {i} read for another file's rotation"
        );
    }
}

#[cfg(unix)]
#[tokio::test]
async fn an_event_for_the_whole_directory_reads_each_file_once_a_few_at_a_time() {
    use std::os::unix::fs::PermissionsExt;
    let registry = Registry::new(VERIFY_EVERY, notify_factory());
    let tmp = tempfile::tempdir().unwrap();
    let (running, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let mut stores = Vec::new();
    let paths: Vec<PathBuf> = (0..40)
        .map(|i| tmp.path().join(format!("tenant-{i}")))
        .collect();
    for path in &paths {
        std::fs::write(path, "x").unwrap();
    }
    for (i, path) in paths.iter().enumerate() {
        let (running, most) = (running.clone(), most.clone());
        // A source that takes a while, so that reads let run at once would overlap.
        let store = crate::test_support::loader(format!("tenant-{i}"), move || {
            let (running, most) = (running.clone(), most.clone());
            async move {
                let now = running.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(5)).await;
                running.fetch_sub(1, Ordering::SeqCst);
                Ok::<_, std::io::Error>(b"token".to_vec())
            }
        })
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
        let handle = store.0.downgrade();
        tokio::spawn(crate::refresh::until_closed(
            handle.clone(),
            watch_with(&registry, handle, path).await,
        ));
        stores.push(store);
    }
    most.store(0, Ordering::SeqCst);

    // The directory's own attributes change: an event for every file in it.
    std::fs::set_permissions(tmp.path(), std::fs::Permissions::from_mode(0o750)).unwrap();
    eventually("every store re-read", || {
        stores.iter().all(|s| s.status().reads >= 2)
    })
    .await;
    // A quiet window, then "at most": one read per file (two with the load's).
    tokio::time::sleep(QUIET).await;
    for store in &stores {
        assert!(store.status().reads <= 2, "one read per file");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(
        (1..=READS_PER_DIR).contains(&most),
        "{most} reads at once, over the bound of {READS_PER_DIR}"
    );
}
