//! Token paths that are symlinks (issue 12.1): every link of the chain and the file at its
//! end are watched, each in its own directory, and only those. The timer is off: only the
//! watcher can explain a reload. A rotation is seen in about a millisecond; the deadline,
//! a second, is a hundred times that.

use super::*;
use std::os::unix::fs::symlink;

const SEEN_WITHIN: Duration = Duration::from_secs(1);

/// A canonical temporary directory with `dirs` created in it.
fn tree(dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    for dir in dirs {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    (tmp, root)
}

/// Replaces `path` by a temporary file renamed over it, as agents and editors do.
fn rename_over(path: &Path, token: &str) {
    crate::test_support::writers::rename_over(path, token).unwrap();
}

/// Re-points the link at `link` to `target` atomically, as `ln -sfn` in two steps does.
fn repoint(link: &Path, target: &Path) {
    let tmp = link.with_file_name(".link.tmp");
    symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, link).unwrap();
}

async fn seen(store: &TokenStore, token: &str) {
    let mut rx = store.subscribe();
    let want = format!("Bearer {token}");
    tokio::time::timeout(SEEN_WITHIN, async {
        while store.current().header_value() != want.as_str() {
            rx.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{token} not seen within {SEEN_WITHIN:?}"));
}

fn registry() -> Arc<Registry> {
    Registry::new(VERIFY_EVERY, notify_factory())
}

#[tokio::test]
async fn a_link_to_another_directory_is_watched_there() {
    let registry = registry();
    let (_tmp, root) = tree(&["app", "vault"]);
    std::fs::write(root.join("vault/token"), "one").unwrap();
    symlink(root.join("vault/token"), root.join("app/token")).unwrap();
    let store = store_with(&registry, &root.join("app/token"), None).await;
    assert_eq!(store.status().watch, WatchState::Active);
    assert_eq!(registry.stats().directories, 2, "app and vault");
    for token in ["two", "three"] {
        rename_over(&root.join("vault/token"), token);
        seen(&store, token).await;
    }
    assert!(store.status().last_error.is_none());
}

#[tokio::test]
async fn a_link_re_pointed_moves_the_watch_to_its_new_target() {
    let registry = registry();
    let (_tmp, root) = tree(&["app", "old", "new"]);
    std::fs::write(root.join("old/token"), "one").unwrap();
    std::fs::write(root.join("new/token"), "two").unwrap();
    symlink(root.join("old/token"), root.join("app/token")).unwrap();
    let store = store_with(&registry, &root.join("app/token"), None).await;

    repoint(&root.join("app/token"), &root.join("new/token"));
    seen(&store, "two").await;
    // The old target's directory is no longer watched; the new one is.
    eventually("old unwatched", || registry.stats().directories == 2).await;
    rename_over(&root.join("new/token"), "three");
    seen(&store, "three").await;
    // A quiet window, then "at most": the old target's rotation reaches no one. (Counted
    // where the registry routes events, not as reads: a read that the rotation of "three"
    // asked for may still be running.)
    let dir = |name: &str| std::fs::canonicalize(root.join(name)).unwrap();
    assert!(
        registry.events_for(&dir("new"), "token") > 0,
        "counted where watched"
    );
    let old = dir("old");
    rename_over(&root.join("old/token"), "stale");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        registry.events_for(&old, "token"),
        0,
        "an event for the old target"
    );
    assert_eq!(store.current().header_value(), "Bearer three");
}

#[tokio::test]
async fn a_chain_of_two_links_is_followed_to_its_end() {
    let registry = registry();
    let (_tmp, root) = tree(&["app", "mid", "a", "b"]);
    std::fs::write(root.join("a/token"), "one").unwrap();
    std::fs::write(root.join("b/token"), "b-one").unwrap();
    symlink("../mid/current", root.join("app/token")).unwrap();
    symlink(root.join("a/token"), root.join("mid/current")).unwrap();
    let store = store_with(&registry, &root.join("app/token"), None).await;
    assert_eq!(registry.stats().directories, 3, "app, mid and a");

    // The file at the end, rotated.
    rename_over(&root.join("a/token"), "two");
    seen(&store, "two").await;
    // The link in the middle, re-pointed.
    repoint(&root.join("mid/current"), &root.join("b/token"));
    seen(&store, "b-one").await;
    rename_over(&root.join("b/token"), "b-two");
    seen(&store, "b-two").await;
    eventually("a unwatched", || registry.stats().directories == 3).await;
}

#[tokio::test]
async fn a_target_directory_removed_and_back_is_seen() {
    let registry = registry();
    let (_tmp, root) = tree(&["app", "vault"]);
    std::fs::write(root.join("vault/token"), "one").unwrap();
    symlink(root.join("vault/token"), root.join("app/token")).unwrap();
    let store = store_with(&registry, &root.join("app/token"), None).await;

    std::fs::remove_dir_all(root.join("vault")).unwrap();
    // The read fails (after its retries) and says so; the last token stays, and the
    // vault's return is watched for in its parent.
    eventually("the failure reported", || {
        store.status().last_error.is_some()
    })
    .await;
    assert_eq!(store.current().header_value(), "Bearer one");
    assert_eq!(store.status().watch, WatchState::Active);

    std::fs::create_dir(root.join("vault")).unwrap();
    rename_over(&root.join("vault/token"), "two");
    seen(&store, "two").await;
    assert!(store.status().last_error.is_none());
    // Back to the link's directory and the vault.
    eventually("the parent unwatched", || registry.stats().directories == 2).await;
    rename_over(&root.join("vault/token"), "three");
    seen(&store, "three").await;
}

#[tokio::test]
async fn a_loop_degrades_until_it_is_fixed() {
    let (logs, _guard) = crate::test_support::capture_logs();
    const WARNING: &str = "cannot follow the token file's symlinks";
    let registry = registry();
    let (_tmp, root) = tree(&["app"]);
    let app = root.join("app");
    std::fs::write(app.join("a"), "one").unwrap();
    symlink("a", app.join("token")).unwrap();
    let store = store_with(&registry, &app.join("token"), None).await;

    // `a` becomes a link back to `token`.
    repoint(&app.join("a"), Path::new("token"));
    eventually("degraded", || degraded(&store).is_some()).await;
    let reason = degraded(&store).unwrap();
    assert!(
        reason.contains("loop") && reason.contains("token"),
        "{reason}"
    );
    assert_eq!(store.current().header_value(), "Bearer one");
    // Said before the status changed, and once however often the loop is seen.
    assert_eq!(logs.count(WARNING), 1, "{}", logs.text());

    rename_over(&app.join("a"), "two");
    seen(&store, "two").await;
    eventually("active", || store.status().watch == WatchState::Active).await;
    assert_eq!(logs.count(WARNING), 1, "{}", logs.text());
}
