//! A 401 reloads the token at once and the request is retried once, with its body replayed.
//! Every test runs against a real local HTTP server that accepts only the tokens it is told.

use crate::support;

use std::time::Duration;

use bearer_reload::body::ReplayBody;
use bearer_reload::classify::GrpcUnauthenticated;
use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty, Full, StreamBody};
use support::server::{AuthServer, Refusal, http1_client, http2_client, sha256_hex};
use support::{behind_a_rotation, eventually, quiet_store};
use tower::{Layer, Service, ServiceExt};

const DEADLINE: Duration = Duration::from_secs(10);

fn get(url: &str) -> Request<Empty<Bytes>> {
    Request::get(url).body(Empty::new()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_replaced_and_the_request_retried_once() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "old").await;
    let server = AuthServer::start("old").await;
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client());

    let res = client.clone().oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    // Revoked on the server, then rotated on disk; no watcher event, no timer.
    server.accept_only("new");
    std::fs::write(&path, "new\n").unwrap();
    let res = client.clone().oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    let status = store.status();
    assert_eq!(status.reads, 2, "the initial read and one on the 401");
    assert_eq!(status.unauthorized, 1);
    assert_eq!(status.unauthorized_reloads, 1);
    assert_eq!(status.retries, 1);
    assert_eq!(status.retries_succeeded, 1);
    assert_eq!(server.seen(), ["old", "old", "new"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_the_watcher_already_installed_is_used_without_a_read() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "old").unwrap();
    let store = support::file(&path)
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let server = AuthServer::start("old").await;
    server.accept_also("new");
    // The first request's answer waits for a second request: the test sends none, so it
    // waits until the test has rotated everything and sends the release itself.
    server.hold_until(2);
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client());
    let pending = tokio::spawn(client.clone().oneshot(get(&server.url("/"))));
    server.wait_requests(1, DEADLINE).await;

    // While the request is in flight: the token rotates, the watcher installs it, and the
    // server revokes the old one.
    let mut generations = store.subscribe();
    std::fs::write(&path, "new").unwrap();
    tokio::time::timeout(DEADLINE, generations.wait_for(|&g| g == 2))
        .await
        .expect("the watcher installed the new token")
        .unwrap();
    server.accept_only("new");
    // Release the held answer (this request itself carries the new token).
    let res = client.clone().oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    let res = pending.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let status = store.status();
    // (The watcher may still be reading for the write's later events: `reads` is not
    // the 401's to count.)
    assert_eq!(status.unauthorized_reloads, 0, "no read on the 401");
    assert_eq!(status.unauthorized, 1);
    assert_eq!(status.retries_succeeded, 1);
    assert_eq!(server.seen(), ["old", "new", "new"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_token_gets_its_401_back_and_at_most_one_read_a_second() {
    let dir = tempfile::tempdir().unwrap();
    let (_path, store) = quiet_store(dir.path(), "wrong").await;
    let server = AuthServer::start("right").await;
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client());

    let started = std::time::Instant::now();
    let mut requests = 0u64;
    while started.elapsed() < Duration::from_secs(5) && requests < 100_000 {
        let res = client.clone().oneshot(get(&server.url("/"))).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        requests += 1;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let status = store.status();
    assert_eq!(status.retries, 0, "the same token is not sent twice");
    assert_eq!(server.requests(), requests);
    assert!(requests > 10, "the loop ran: {requests}");
    let reads = status.reads - 1;
    assert!(
        reads as f64 <= elapsed.ceil() + 1.0,
        "{reads} reads in {elapsed:.1} s"
    );
    assert!(reads >= 1, "the first 401 reads the file");
    assert_eq!(status.unauthorized, requests);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_concurrent_401s_share_one_read_and_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let (store, server) = behind_a_rotation(dir.path()).await;
    // No answer until all 1000 have arrived, so all are sent with the old token.
    server.hold_until(1000);
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http2_client());
    let url = server.url("/");
    let tasks: Vec<_> = (0..1000)
        .map(|_| tokio::spawn(client.clone().oneshot(get(&url))))
        .collect();
    for task in tasks {
        let res = tokio::time::timeout(DEADLINE, task)
            .await
            .expect("answered")
            .unwrap()
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        // Read, as an application does: each body dropped unread would reset its stream.
        res.into_body().collect().await.unwrap();
    }
    let status = store.status();
    assert_eq!(status.reads, 2, "exactly one read for 1000 401s");
    assert_eq!(status.unauthorized, 1000);
    assert_eq!(status.retries, 1000);
    assert_eq!(status.retries_succeeded, 1000);
    assert_eq!(server.refused(), 1000);
    assert_eq!(server.requests(), 2000);
}

/// Over HTTP/2 the 401's body is read to its end before the retry, as over HTTP/1, not
/// dropped: a body dropped unread resets its stream, and h2 closes the whole connection
/// (`GOAWAY` `ENHANCE_YOUR_CALM`, every request on it failing) once it has had to reset 1024
/// streams whose frames came after it forgot them. A burst of a thousand retried 401s and
/// a thousand responses dropped unread was seen to reach that here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_a_401s_body_is_read_to_its_end_not_reset() {
    let dir = tempfile::tempdir().unwrap();
    let (store, server) = behind_a_rotation(dir.path()).await;
    // Sent 10 ms after the headers: dropped at once, the stream would be reset before.
    server.refusal_body_after(Duration::from_millis(10));
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http2_client());
    let res = client.oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.version(), http::Version::HTTP_2);
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(store.status().retries_succeeded, 1);
    assert_eq!(
        server.refusal_bodies_sent(),
        1,
        "the 401's stream was reset"
    );
}

/// Sends `req` after the server revoked "old" and the file holds "new"; returns the
/// response and the store.
async fn after_rotation<B>(req: Request<B>) -> (http::Response<hyper::body::Incoming>, TokenStore)
where
    B: bearer_reload::body::TryCloneBody + http_body::Body<Data = Bytes> + Send + Unpin + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let dir = tempfile::tempdir().unwrap();
    let (store, server) = behind_a_rotation(dir.path()).await;
    let mut client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client::<B>());
    let (parts, body) = req.into_parts();
    let mut req = Request::from_parts(parts, body);
    *req.uri_mut() = server.url("/upload").parse().unwrap();
    let res = client.ready().await.unwrap().call(req).await.unwrap();
    (res, store)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_body_is_replayed_identically() {
    let payload: Vec<u8> = (0..32 * 1024).map(|i| (i * 7 % 251) as u8).collect();
    let expected = sha256_hex(&payload);

    // A body that clones cheaply.
    let req = Request::post("/")
        .body(Full::new(Bytes::from(payload.clone())))
        .unwrap();
    let (res, store) = after_rotation(req).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["x-body-sha256"], expected.as_str());
    assert_eq!(store.status().retries_succeeded, 1);

    // A streamed body, 1 KiB at a time, recorded by ReplayBody as it goes out.
    let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = payload
        .chunks(1024)
        .map(|c| Ok(http_body::Frame::data(Bytes::copy_from_slice(c))))
        .collect();
    let body = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)));
    let (res, store) = after_rotation(Request::post("/").body(body).unwrap()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["x-body-sha256"], expected.as_str());
    assert_eq!(res.headers()["x-body-len"], "32768");
    assert_eq!(store.status().retries_succeeded, 1);

    // An empty body.
    let (res, store) =
        after_rotation(Request::post("/").body(Empty::<Bytes>::new()).unwrap()).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.headers()["x-body-sha256"], sha256_hex(b"").as_str());
    assert_eq!(store.status().retries_succeeded, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_body_over_the_limit_gets_its_401_but_the_token_is_reloaded() {
    let frames: Vec<Result<http_body::Frame<Bytes>, std::io::Error>> = (0..100)
        .map(|_| Ok(http_body::Frame::data(Bytes::from(vec![b'x'; 1024]))))
        .collect();
    let body = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)));
    let (res, store) = after_rotation(Request::post("/").body(body).unwrap()).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let status = store.status();
    assert_eq!(status.retries, 0);
    assert_eq!(status.generation, 2, "the 401 still reloaded the token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grpc_unauthenticated_is_retried_under_the_grpc_classifier() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "old").await;
    let server = AuthServer::start_with("new", Refusal::Grpc).await;
    std::fs::write(&path, "new").unwrap();

    // The HTTP classifier sees a 200 and lets it through.
    let plain = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http2_client());
    let res = plain.oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.headers()["grpc-status"], "16");
    assert_eq!(store.status().unauthorized, 0);

    let grpc = BearerLayer::new(store.clone())
        .classifier(GrpcUnauthenticated)
        .retry_unauthorized()
        .layer(http2_client());
    let res = grpc.oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert!(res.headers().get("grpc-status").is_none());
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "ok");
    let status = store.status();
    assert_eq!(status.unauthorized, 1);
    assert_eq!(status.retries_succeeded, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_its_own_authorization_is_not_retried() {
    let dir = tempfile::tempdir().unwrap();
    let (store, server) = behind_a_rotation(dir.path()).await;
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client());
    let mut req = get(&server.url("/"));
    req.headers_mut().insert(
        http::header::AUTHORIZATION,
        "Bearer theirs".parse().unwrap(),
    );
    let res = client.oneshot(req).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    let status = store.status();
    assert_eq!((status.reads, status.unauthorized), (1, 0));
}

/// Rotates the token `rotations` times under a server that revokes the old one, each time
/// sending one request through a retrying HTTP/1 keep-alive client; returns the server's
/// TCP connections.
async fn connections_after_revoking_rotations(refusal_body: Bytes, rotations: usize) -> u64 {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "t0").await;
    let server = AuthServer::start("t0").await;
    server.refusal_body(refusal_body);
    let mut client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client());
    for i in 1..=rotations {
        let token = format!("t{i}");
        server.accept_only(&token);
        std::fs::write(&path, &token).unwrap();
        let res = client
            .ready()
            .await
            .unwrap()
            .call(get(&server.url("/")))
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.into_body().collect().await.unwrap();
    }
    assert_eq!(store.status().retries_succeeded, rotations as u64);
    server.connections()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_401_gives_its_connection_back_to_the_pool() {
    // A Kubernetes `Status`, as the API server sends with a 401: read away before the
    // retry, so the keep-alive connection is reused.
    let status = Bytes::from_static(
        br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
    );
    let reused = connections_after_revoking_rotations(status, 5).await;
    // Two suffice (the retry may check one out before the first is back in the pool);
    // dropping the 401 unread makes a connection per rotation, six.
    assert!(reused <= 3, "{reused} connections for 5 revoking rotations");
    // A refusal body over the drain limit is dropped unread, and its connection with it.
    // Larger than hyper buffers whole (its read buffer stops at ~400 KiB): left unread.
    let big = Bytes::from(vec![b'x'; 4 << 20]);
    let dropped = connections_after_revoking_rotations(big, 5).await;
    assert!(
        dropped >= 6,
        "{dropped} connections: a connection per refused request"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_during_its_401_reload_does_not_cancel_it() {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};
    // A source that takes as long as the test says: the 401's read waits at a gate, and
    // says when it has begun.
    let token = Arc::new(Mutex::new("old"));
    let gate = Arc::new(tokio::sync::Semaphore::new(1));
    let begun = Arc::new(AtomicUsize::new(0));
    let store = support::loader("gated", {
        let (token, gate, begun) = (token.clone(), gate.clone(), begun.clone());
        move || {
            let (token, gate, begun) = (token.clone(), gate.clone(), begun.clone());
            async move {
                begun.fetch_add(1, Ordering::SeqCst);
                drop(gate.acquire().await.unwrap());
                Ok::<_, std::io::Error>(token.lock().unwrap().as_bytes().to_vec())
            }
        }
    })
    .no_periodic_refresh()
    .load()
    .await
    .unwrap();
    gate.forget_permits(1);
    let server = AuthServer::start("new").await;
    *token.lock().unwrap() = "new";
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client());

    // The caller gives up while the store re-reads its source after the 401.
    let mut generations = store.subscribe();
    let request = tokio::spawn(client.clone().oneshot(get(&server.url("/"))));
    eventually("the 401's read begun", || begun.load(Ordering::SeqCst) == 2).await;
    assert!(
        !request.is_finished(),
        "the request waits for the gated read"
    );
    request.abort();
    assert!(request.await.unwrap_err().is_cancelled());
    assert_eq!(server.refused(), 1);
    gate.add_permits(1);

    // The read finishes without its caller, and the next request goes out with the new
    // token the first time: no second 401.
    tokio::time::timeout(DEADLINE, generations.wait_for(|g| *g == 2))
        .await
        .expect("the reload finished for everyone")
        .unwrap();
    let res = client.oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(server.refused(), 1);
    assert_eq!(server.seen(), ["old", "new"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_half_written_token_is_used_until_the_rest_arrives() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "old-token").unwrap();
    let store = support::file(&path)
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    // The server knows only the whole new token: "old-token" is revoked as the write starts.
    let server = AuthServer::start("whole-new-token").await;
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client());
    // A slow writer: it truncates the file, writes the first half, and the rest only when
    // the test says so (its own handle, as `write_in_chunks` does with a pause).
    let (go_on, wait) = std::sync::mpsc::channel::<()>();
    let writer = tokio::task::spawn_blocking({
        let path = path.clone();
        move || -> std::io::Result<()> {
            use std::io::Write;
            let mut f = std::fs::OpenOptions::new()
                .write(true)
                .truncate(true)
                .open(&path)?;
            f.write_all(b"whole-new")?;
            wait.recv().unwrap();
            f.write_all(b"-token")
        }
    });
    // The half is a token like any other: installed, and refused by the server. The 401
    // re-reads the file, which still holds the half: its 401 goes back.
    support::wait_for_token(&store, "whole-new").await;
    let res = client.clone().oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(store.status().unauthorized_reloads, 1);
    // The rest is written: the write's event installs the whole token, and requests pass.
    go_on.send(()).unwrap();
    writer.await.unwrap().unwrap();
    support::wait_for_token(&store, "whole-new-token").await;
    let res = client.oneshot(get(&server.url("/"))).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(server.seen(), ["whole-new", "whole-new-token"]);
}
