//! The plain layer through a real HTTP round trip: hyper-util client, local hyper server.

use crate::support;

use std::time::Duration;

use bearer_reload::BearerLayer;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use support::quiet_store;
use support::server::{AuthServer, http1_client};
use tower::{Layer, ServiceExt};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requests_carry_the_token_before_and_after_a_reload() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "one").await;
    let server = AuthServer::start("one").await;
    let client = BearerLayer::new(store.clone()).layer(http1_client::<Empty<Bytes>>());
    let get = || Request::get(server.url("/")).body(Empty::new()).unwrap();

    let res = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    // Rotated on disk and on the server; until a reload the old token is still sent.
    std::fs::write(&path, "two\n").unwrap();
    server.accept_only("two");
    let res = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    // The 401 alone (no watcher, no timer, no retry) reloaded the token for what follows.
    let mut generations = store.subscribe();
    tokio::time::timeout(Duration::from_secs(5), generations.wait_for(|g| *g == 2))
        .await
        .expect("the 401 reloaded the token")
        .unwrap();
    let res = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(server.seen(), ["one", "one", "two"]);
    let status = store.status();
    assert_eq!((status.unauthorized, status.retries), (1, 0));
}
