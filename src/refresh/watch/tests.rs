use super::*;
use crate::refresh::registry::tests::Stats;
use crate::refresh::registry::{Factory, VERIFY_EVERY, notify_factory};
use crate::store::TokenStore;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};

pub(super) use crate::test_support::{eventually, wait_for_token};

/// A factory that fails like `inotify_init` with its instances exhausted while `fail`
/// is set, counting its calls.
fn flaky_factory(fail: Arc<AtomicBool>) -> Box<Factory> {
    counting_factory(fail, Arc::default())
}

/// When the factory was called.
type Calls = Arc<std::sync::Mutex<Vec<std::time::Instant>>>;

fn counting_factory(fail: Arc<AtomicBool>, calls: Calls) -> Box<Factory> {
    let real = notify_factory();
    Box::new(move |handler| {
        calls.lock().unwrap().push(std::time::Instant::now());
        if fail.load(Ordering::SeqCst) {
            Err(notify::Error::io(std::io::Error::from_raw_os_error(24)))
        } else {
            real(handler)
        }
    })
}

/// [`watch`] of one path.
async fn watch_with<C: Credential>(
    registry: &Arc<Registry>,
    store: WeakStore<C>,
    path: &Path,
) -> impl Future<Output = ()> + Send + use<C> {
    watch(registry, store, &[path.to_owned()]).await
}

async fn store_with(registry: &Arc<Registry>, path: &Path, timer: Option<Duration>) -> TokenStore {
    let builder = crate::test_support::file(path).no_watch();
    let store = match timer {
        Some(timer) => builder.refresh_interval(timer),
        None => builder.no_periodic_refresh(),
    }
    .load()
    .await
    .unwrap();
    let handle = store.0.downgrade();
    tokio::spawn(crate::refresh::until_closed(
        handle.clone(),
        watch_with(registry, handle, path).await,
    ));
    store
}

fn degraded(store: &TokenStore) -> Option<String> {
    match store.status().watch {
        WatchState::Degraded { reason } => Some(reason),
        _ => None,
    }
}

#[tokio::test]
async fn a_watcher_that_cannot_start_degrades_and_the_timer_still_refreshes() {
    let (logs, _guard) = crate::test_support::capture_logs();
    let attempts = Calls::default();
    let registry = Registry::new(
        VERIFY_EVERY,
        counting_factory(Arc::new(AtomicBool::new(true)), attempts.clone()),
    );
    let count = || attempts.lock().unwrap().len();
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "secret-one").unwrap();
    let store = store_with(&registry, &path, Some(Duration::from_secs(1))).await;
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
    // Re-arm attempts later: still one warning, still degraded. Eight attempts span the
    // doubling (the eighth comes 2.54 s after the first), and two more after the token
    // however late it came: at most 4 s, the backoff being capped at 2 s.
    let tried = count();
    eventually("more attempts to start a watcher", || {
        count() >= (tried + 2).max(8)
    })
    .await;
    assert!(degraded(&store).is_some());
    // Each attempt waits twice as long as the one before, from 20 ms up to 2 s (a sleep
    // may end late, never early).
    let times = attempts.lock().unwrap().clone();
    for (i, pair) in times.windows(2).enumerate() {
        let least = (REARM_FIRST * 2_u32.pow(i as u32)).min(REARM_MAX);
        assert!(pair[1] - pair[0] >= least, "attempt {}: {times:?}", i + 1);
    }
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
    // Rotated while nothing watched: the watch, once armed, reads what it missed.
    std::fs::write(&path, "two").unwrap();

    fail.store(false, Ordering::SeqCst);
    eventually("re-armed", || store.status().watch == WatchState::Active).await;
    assert_eq!(registry.stats().directories, 1);
    wait_for_token(&store, "two").await;
    std::fs::write(&path, "three").unwrap();
    wait_for_token(&store, "three").await;
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
    // The other directory's last store went; this one's events still flow.
    std::fs::write(a.join("t1"), "v").unwrap();
    wait_for_token(&stores[0], "v").await;
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

/// Replaces `path` whole, as a writer that renames a finished file over it.
fn replace(path: &Path, token: &str) {
    let tmp = path.with_extension("tmp");
    std::fs::write(&tmp, token).unwrap();
    std::fs::rename(&tmp, path).unwrap();
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
    // Whole-file replacements from here: one event each, so one read each (an in-place
    // write's truncation and data can be two reads).
    replace(&dir.join("token"), "three");
    wait_for_token(&store, "three").await;
    // Writes in the moved directory are not the token's any more: none of their events
    // reaches the store. One watcher's events come in order: once the next write at the
    // path is in, the moved writes' events, had they been routed, were routed before it.
    let watched = dir.canonicalize().unwrap();
    let before = registry.events_for(&watched, "token");
    for i in 0..10 {
        std::fs::write(tmp.path().join("b/d/token"), format!("moved-{i}")).unwrap();
    }
    replace(&dir.join("token"), "four");
    wait_for_token(&store, "four").await;
    let events = registry.events_for(&watched, "token") - before;
    // A rename at the path is two events; those of "three" may all come after the count
    // was taken (its read may have been the re-arm's), then those of "four". The ten moved
    // writes would add ten or more.
    assert!(events <= 4, "{events} events for two renames at the path");
}

/// A loader that answers from a script (then repeats its last answer), recording when it
/// is asked; watched through a real file, whose events wake it.
#[derive(Clone, Default)]
struct Scripted {
    script: Arc<std::sync::Mutex<std::collections::VecDeque<Result<&'static str, &'static str>>>>,
    asked: Arc<std::sync::Mutex<Vec<tokio::time::Instant>>>,
}

impl Scripted {
    fn set(&self, answers: &[Result<&'static str, &'static str>]) {
        *self.script.lock().unwrap() = answers.iter().copied().collect();
    }
    fn asked(&self) -> Vec<tokio::time::Instant> {
        self.asked.lock().unwrap().clone()
    }
    async fn store(&self) -> TokenStore {
        let this = self.clone();
        crate::test_support::loader("scripted", move || {
            let this = this.clone();
            async move {
                this.asked.lock().unwrap().push(tokio::time::Instant::now());
                let mut script = this.script.lock().unwrap();
                let answer = if script.len() > 1 {
                    script.pop_front().unwrap()
                } else {
                    script[0]
                };
                answer
                    .map(|t| t.as_bytes().to_vec())
                    .map_err(std::io::Error::other)
            }
        })
        .no_periodic_refresh()
        .load()
        .await
        .unwrap()
    }
}

/// One event for `path`: its mode changed (a write would make several).
#[cfg(unix)]
fn one_event(path: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

#[cfg(unix)]
#[tokio::test]
async fn a_read_that_fails_after_an_event_is_retried_quietly_then_reported_once() {
    let registry = Registry::new(VERIFY_EVERY, notify_factory());
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("token");
    std::fs::write(&path, "watched").unwrap();
    let source = Scripted::default();
    source.set(&[Ok("one")]);
    let store = source.store().await;
    let handle = store.0.downgrade();
    tokio::spawn(crate::refresh::until_closed(
        handle.clone(),
        watch_with(&registry, handle, &path).await,
    ));
    eventually("watching", || store.status().watch == WatchState::Active).await;

    // Half-written twice, then whole: retried after 10 and 50 ms, no failure reported.
    source.set(&[Err("empty file"), Err("half a token"), Ok("two")]);
    let before = source.asked().len();
    one_event(&path, 0o640);
    wait_for_token(&store, "two").await;
    let asked = source.asked()[before..].to_vec();
    assert_eq!(asked.len(), 3, "the read and two retries");
    assert!(
        asked[1] - asked[0] >= Duration::from_millis(10),
        "{asked:?}"
    );
    assert!(
        asked[2] - asked[1] >= Duration::from_millis(50),
        "{asked:?}"
    );
    let status = store.status();
    assert_eq!((status.failures, status.last_error.is_none()), (0, true));

    // Still broken after every retry: one failure, reported after the last (250 ms).
    source.set(&[Err("gone")]);
    let before = source.asked().len();
    one_event(&path, 0o600);
    eventually("the failure reported", || store.status().failures == 1).await;
    let asked = source.asked()[before..].to_vec();
    assert_eq!(asked.len(), 4, "the read and three retries");
    assert!(
        asked[3] - asked[2] >= Duration::from_millis(250),
        "{asked:?}"
    );
    assert_eq!(
        store.status().failures,
        1,
        "the retries' failures are not reported"
    );
    let reported = crate::store::Chain(&store.status().last_error.expect("reported")).to_string();
    assert!(reported.contains("gone"), "{reported}");
    assert_eq!(store.current().header_value(), "Bearer two");
}

mod routing;
#[cfg(unix)]
mod symlinks;
