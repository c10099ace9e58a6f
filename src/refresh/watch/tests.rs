use super::*;
use crate::TokenFile;
use crate::refresh::registry::{Factory, Stats, VERIFY_EVERY, notify_factory};
use crate::store::TokenStore;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

const DEADLINE: Duration = Duration::from_secs(5);

/// A factory that fails like `inotify_init` with its instances exhausted while `fail`
/// is set.
fn flaky_factory(fail: Arc<AtomicBool>) -> Box<Factory> {
    let real = notify_factory();
    Box::new(move |handler| {
        if fail.load(Ordering::SeqCst) {
            Err(notify::Error::io(std::io::Error::from_raw_os_error(24)))
        } else {
            real(handler)
        }
    })
}

async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

async fn store_with(registry: &Arc<Registry>, path: &Path, timer: Option<Duration>) -> TokenStore {
    let store = TokenFile::new(path)
        .watch(false)
        .refresh_interval(timer)
        .load()
        .await
        .unwrap();
    let handle = store.downgrade();
    tokio::spawn(crate::refresh::until_closed(
        handle.clone(),
        watch_with(registry, handle, path),
    ));
    store
}

async fn wait_for_token(store: &TokenStore, token: &str) {
    let mut rx = store.subscribe();
    let want = format!("Bearer {token}");
    tokio::time::timeout(DEADLINE, async {
        while store.current().header_value() != want.as_str() {
            rx.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {token}"));
}

fn degraded(store: &TokenStore) -> Option<String> {
    match store.status().watch {
        WatchState::Degraded { reason } => Some(reason),
        _ => None,
    }
}

/// Collects formatted log lines.
#[derive(Clone, Default)]
struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        crate::sync::lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    fn count(&self, needle: &str) -> usize {
        String::from_utf8_lossy(&crate::sync::lock(&self.0))
            .matches(needle)
            .count()
    }
}

#[tokio::test]
async fn a_watcher_that_cannot_start_degrades_and_the_timer_still_refreshes() {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::DEBUG)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let registry = Registry::new(VERIFY_EVERY, flaky_factory(Arc::new(AtomicBool::new(true))));
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "secret-one").unwrap();
    let store = store_with(&registry, &path, Some(Duration::from_millis(100))).await;
    let reason = degraded(&store).expect("degraded");
    assert!(reason.contains("cannot start a file watcher"), "{reason}");
    assert_eq!(
        registry.stats(),
        Stats {
            directories: 0,
            subscribers: 1,
            watcher: false
        }
    );

    std::fs::write(&path, "secret-two").unwrap();
    wait_for_token(&store, "secret-two").await;
    // Several re-arm attempts later: still one warning, still degraded.
    tokio::time::sleep(Duration::from_millis(700)).await;
    assert!(degraded(&store).is_some());
    assert_eq!(logs.count("WARN"), 1, "one warning, not one per attempt");
    assert_eq!(logs.count("secret-"), 0, "no token in the logs");

    drop(store);
    eventually("unsubscribed", || registry.stats().subscribers == 0).await;
}

#[tokio::test]
async fn the_watch_re_arms_when_the_watcher_can_start_again() {
    let fail = Arc::new(AtomicBool::new(true));
    let registry = Registry::new(VERIFY_EVERY, flaky_factory(fail.clone()));
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let store = store_with(&registry, &path, None).await;
    assert!(degraded(&store).is_some());

    fail.store(false, Ordering::SeqCst);
    eventually("re-armed", || store.status().watch == WatchState::Active).await;
    assert_eq!(registry.stats().directories, 1);
    std::fs::write(&path, "two").unwrap();
    wait_for_token(&store, "two").await;
}

#[tokio::test]
async fn stores_share_one_watch_per_directory_and_release_it() {
    let registry = Registry::new(VERIFY_EVERY, notify_factory());
    let tmp = tempfile::tempdir().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for dir in [&a, &b] {
        std::fs::create_dir(dir).unwrap();
        std::fs::write(dir.join("t1"), "x").unwrap();
        std::fs::write(dir.join("t2"), "y").unwrap();
        std::fs::write(dir.join("t3"), "w").unwrap();
    }
    let stores = vec![
        store_with(&registry, &a.join("t1"), None).await,
        store_with(&registry, &a.join("t3"), None).await,
        store_with(&registry, &a.join("./t2"), None).await,
        store_with(&registry, &b.join("t1"), None).await,
    ];
    assert_eq!(
        registry.stats(),
        Stats {
            directories: 2,
            subscribers: 4,
            watcher: true
        }
    );
    std::fs::write(a.join("t2"), "z").unwrap();
    wait_for_token(&stores[2], "z").await;

    let mut stores = stores;
    stores.truncate(1);
    eventually("3 unsubscribed", || registry.stats().subscribers == 1).await;
    assert_eq!(registry.stats().directories, 1);
    drop(stores);
    eventually("all released", || {
        registry.stats()
            == Stats {
                directories: 0,
                subscribers: 0,
                watcher: false,
            }
    })
    .await;
}

#[tokio::test]
async fn a_directory_renamed_away_degrades_then_re_arms() {
    let registry = Registry::new(VERIFY_EVERY, notify_factory());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("token"), "one").unwrap();
    let store = store_with(&registry, &dir.join("token"), None).await;
    assert_eq!(store.status().watch, WatchState::Active);

    std::fs::rename(&dir, tmp.path().join("moved")).unwrap();
    eventually("degraded", || degraded(&store).is_some()).await;
    // The moved directory's watch is dropped at once.
    eventually("unwatched", || registry.stats().directories == 0).await;

    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("token"), "two").unwrap();
    wait_for_token(&store, "two").await;
    eventually("re-armed", || store.status().watch == WatchState::Active).await;
    assert_eq!(registry.stats().directories, 1);
    // Events flow from the new directory.
    std::fs::write(dir.join("token"), "three").unwrap();
    wait_for_token(&store, "three").await;
}

#[tokio::test]
async fn a_renamed_ancestor_sends_no_event_but_is_noticed() {
    let registry = Registry::new(Duration::from_millis(50), notify_factory());
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("a/d");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "one").unwrap();
    let store = store_with(&registry, &dir.join("token"), None).await;

    // The watch stays on the moved inode: only the periodic check can tell.
    std::fs::rename(tmp.path().join("a"), tmp.path().join("b")).unwrap();
    eventually("degraded", || degraded(&store).is_some()).await;
    let reason = degraded(&store).unwrap();
    assert!(reason.contains("unmounted"), "{reason}");

    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("token"), "two").unwrap();
    wait_for_token(&store, "two").await;
    eventually("re-armed", || store.status().watch == WatchState::Active).await;
    std::fs::write(dir.join("token"), "three").unwrap();
    wait_for_token(&store, "three").await;
    // Writes in the moved directory are not the token's any more.
    std::fs::write(tmp.path().join("b/d/token"), "moved").unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(store.current().header_value(), "Bearer three");
}

mod routing;
mod symlinks;
