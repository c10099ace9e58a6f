//! A store that outlives the runtime that loaded it: a program loads a token file on a
//! short-lived runtime (a start-up step, a probe, a test fixture) and again on its main
//! runtime, and the first runtime ends. Every store follows its file afterwards: the one
//! loaded on the live runtime as always, and the one whose refresher died with its runtime
//! from its next use on; meanwhile its status says that nothing refreshes it. The first
//! test in a process of its own (`support::alone`), because it captures the process's logs.

use crate::support;

use std::convert::Infallible;
use std::time::Duration;

use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::{BearerLayer, TokenStore, WatchState};
use http::{Request, Response, header::AUTHORIZATION};
use tower::{Layer, ServiceExt, service_fn};

/// Rotates `volume` to `token` and waits for `store` to carry it; returns how long that
/// took from the rename.
async fn rotate_and_wait(volume: &ProjectedTokenDir, store: &TokenStore, token: &str) -> Duration {
    let renamed = volume.rotate(token).unwrap();
    support::wait_for_token(store, token).await;
    renamed.elapsed()
}

/// Sends one request through a plain layer on `store`; returns the token it carried.
async fn request(store: &TokenStore) -> String {
    let client = BearerLayer::new(store.clone()).layer(service_fn(|req: Request<()>| async move {
        let auth = req.headers()[AUTHORIZATION].to_str().unwrap().to_owned();
        Ok::<_, Infallible>(Response::new(auth))
    }));
    client.oneshot(Request::new(())).await.unwrap().into_body()
}

fn stopped(store: &TokenStore) -> bool {
    matches!(store.status().watch, WatchState::Stopped { .. })
}

#[test]
fn a_store_whose_runtime_ended_says_so_and_its_next_use_starts_it_again() {
    if !support::alone::in_own_process(
        module_path!(),
        "a_store_whose_runtime_ended_says_so_and_its_next_use_starts_it_again",
    ) {
        return;
    }
    let logs = support::Logs::capture_globally();
    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path().join("sa"), "one").unwrap();
    // Loaded on a start-up runtime that ends; then the program's main runtime.
    let early = support::load_on_a_runtime_that_ends(volume.token_path());
    let by_reload = support::load_on_a_runtime_that_ends(volume.token_path());
    assert!(stopped(&early), "{:?}", early.status().watch);
    assert!(stopped(&by_reload));
    let ours = volume.dir().display().to_string();
    let warnings = |logs: &support::Logs, what: &str| {
        logs.text()
            .lines()
            .filter(|l| l.contains(what) && l.contains(&ours))
            .count()
    };
    let warned = "nothing refreshes the token any more";
    assert_eq!(warnings(&logs, warned), 2, "one warning per store");

    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    main.block_on(async {
        // Loaded again on the live runtime: a store of its own, which follows its file.
        let late = support::file(volume.token_path()).load().await.unwrap();
        let took = rotate_and_wait(&volume, &late, "two").await;
        assert!(took < Duration::from_secs(1), "{took:?}");
        // The early store was not told: nothing watches for it, and its status says so.
        assert_eq!(early.current().header_value(), "Bearer one");
        assert!(stopped(&early));

        // Its next request starts the refresher again, here; the request itself carries
        // the token the store holds.
        assert_eq!(request(&early).await, "Bearer one");
        support::eventually("the early store watches again", || {
            early.status().watch == WatchState::Active
        })
        .await;
        // The new watch reads what it missed, and follows from now on.
        support::wait_for_token(&early, "two").await;
        let took = rotate_and_wait(&volume, &early, "three").await;
        assert!(took < Duration::from_secs(1), "{took:?}");
        // Started once: later requests find it running, and start nothing more.
        for _ in 0..3 {
            assert_eq!(request(&early).await, "Bearer three");
        }
        assert_eq!(early.status().watch, WatchState::Active);
        assert_eq!(warnings(&logs, "the store's refresher started again"), 1);

        // A reload starts it again too.
        assert!(stopped(&by_reload));
        assert_eq!(
            by_reload.reload().await.unwrap().header_value(),
            "Bearer three"
        );
        support::eventually("the store reloaded by hand watches again", || {
            by_reload.status().watch == WatchState::Active
        })
        .await;
        rotate_and_wait(&volume, &by_reload, "four").await;
        support::wait_for_token(&late, "four").await;
        support::wait_for_token(&early, "four").await;
    });
    assert_eq!(warnings(&logs, "the store's refresher started again"), 2);
    assert_eq!(warnings(&logs, warned), 2, "no warning once it runs again");
}

#[test]
fn a_refresher_the_caller_runs_is_the_callers_when_it_stops() {
    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path().join("sa"), "one").unwrap();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (store, refresher) = runtime
        .block_on(support::file(volume.token_path()).pair())
        .unwrap();
    // Nothing runs until the caller runs it, yet the watch is already subscribed.
    assert_eq!(store.status().watch, WatchState::Active);
    drop(refresher);
    assert!(stopped(&store));
    runtime.block_on(async {
        // A request does not start what the caller owns (a start would have been made, and
        // said so, within the request).
        assert_eq!(request(&store).await, "Bearer one");
        assert!(stopped(&store));
        // A 401 or a reload still reads the file.
        volume.rotate("two").unwrap();
        assert_eq!(store.reload().await.unwrap().header_value(), "Bearer two");
        assert!(stopped(&store));
    });
}
