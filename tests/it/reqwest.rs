//! `BearerMiddleware` beyond the conformance scenarios: what it puts on the wire, its
//! options, and the connection a retry goes out on. Real reqwest clients against a local
//! server.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bearer_reload::reqwest::BearerMiddleware;
use bytes::Bytes;
use http::Extensions;
use http::header::AUTHORIZATION;
use reqwest::{Request, Response, StatusCode};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use support::server::AuthServer;
use support::{behind_a_rotation, quiet_store};

const DEADLINE: Duration = Duration::from_secs(10);

/// What the next middleware saw of `Authorization`: its value and whether it is sensitive.
#[derive(Clone, Default)]
struct Inspect(Arc<Mutex<Vec<(String, bool)>>>);

#[async_trait::async_trait]
impl Middleware for Inspect {
    async fn handle(
        &self,
        req: Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<Response> {
        if let Some(value) = req.headers().get(AUTHORIZATION) {
            let seen = (value.to_str().unwrap().to_owned(), value.is_sensitive());
            self.0.lock().unwrap().push(seen);
        }
        next.run(req, extensions).await
    }
}

fn client(
    middleware: impl reqwest_middleware::Middleware,
    inspect: &Inspect,
) -> ClientWithMiddleware {
    let _ = rustls::crypto::ring::default_provider().install_default();
    ClientBuilder::new(reqwest::Client::new())
        .with(middleware)
        .with(inspect.clone())
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_header_is_sensitive_and_a_callers_own_is_kept_unless_overwritten() {
    let dir = tempfile::tempdir().unwrap();
    let (_path, store) = quiet_store(dir.path(), "tok").await;
    let server = AuthServer::start("tok").await;
    let url = server.url("/");

    let inspect = Inspect::default();
    let keep = client(BearerMiddleware::new(store.clone()), &inspect);
    let res = keep.get(&url).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let res = keep.get(&url).bearer_auth("theirs").send().await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    let replace = client(
        BearerMiddleware::new(store.clone()).overwrite_existing(),
        &inspect,
    );
    let res = replace
        .get(&url)
        .bearer_auth("theirs")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    let seen = inspect.0.lock().unwrap().clone();
    assert_eq!(
        seen,
        [
            ("Bearer tok".to_owned(), true),
            ("Bearer theirs".to_owned(), true),
            ("Bearer tok".to_owned(), true),
        ]
    );
    assert_eq!(server.seen(), ["tok", "theirs", "tok"]);
    assert_eq!(store.status().unauthorized, 0);
}

/// Its `Debug` says what the builder calls set (and shows the store, never its token).
#[tokio::test]
async fn debug_shows_the_store_and_what_the_builder_set() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store) = quiet_store(dir.path(), "debug-secret").await;
    let plain = format!("{:?}", BearerMiddleware::new(store.clone()));
    assert!(
        plain.starts_with("BearerMiddleware { store: TokenStore"),
        "{plain}"
    );
    assert!(plain.contains("own_header: Keep, retry: ()"), "{plain}");
    let set = BearerMiddleware::new(store)
        .retry_unauthorized()
        .overwrite_existing();
    let set = format!("{set:?}");
    assert!(
        set.contains("own_header: Replace, retry: RetryUnauthorized"),
        "{set}"
    );
    assert!(!set.contains("debug-secret"), "{set}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_retry_a_401_goes_back_and_the_next_request_has_the_new_token() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "old").await;
    let server = AuthServer::start("new").await;
    let client = client(BearerMiddleware::new(store.clone()), &Inspect::default());
    std::fs::write(&path, "new\n").unwrap();
    let mut generations = store.subscribe();

    let res = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    tokio::time::timeout(DEADLINE, generations.wait_for(|&g| g == 2))
        .await
        .expect("the 401 reloaded the token")
        .unwrap();
    let res = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);

    assert_eq!(server.seen(), ["old", "new"]);
    let status = store.status();
    assert_eq!(status.unauthorized, 1);
    assert_eq!(status.retries, 0);
}

/// Over HTTP/2 too, the 401's body is read before the retry rather than its stream reset
/// (why: `tests/it/retry.rs`, `over_http2_a_401s_body_is_read_to_its_end_not_reset`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_http2_a_401s_body_is_read_to_its_end_not_reset() {
    let dir = tempfile::tempdir().unwrap();
    let (store, server) = behind_a_rotation(dir.path()).await;
    // Sent 10 ms after the headers: dropped at once, the stream would be reset before.
    server.refusal_body_after(Duration::from_millis(10));
    let _ = rustls::crypto::ring::default_provider().install_default();
    let http2 = reqwest::Client::builder()
        .http2_prior_knowledge()
        .build()
        .unwrap();
    let client = ClientBuilder::new(http2)
        .with(BearerMiddleware::new(store.clone()).retry_unauthorized())
        .build();
    let res = client.get(server.url("/")).send().await.unwrap();
    assert_eq!(res.version(), reqwest::Version::HTTP_2);
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(store.status().retries_succeeded, 1);
    assert_eq!(
        server.refusal_bodies_sent(),
        1,
        "the 401's stream was reset"
    );
}

/// Rotations in the connection test.
const ROTATIONS: u64 = 20;

/// Rotates `store`'s file (at `path`) [`ROTATIONS`] times under `server`, which revokes the
/// old token at once, one POST through `client` each time; returns the server's TCP
/// connections.
async fn connections_after_revoking_rotations(
    client: &ClientWithMiddleware,
    server: &AuthServer,
    path: &std::path::Path,
    store: &bearer_reload::TokenStore,
) -> u64 {
    for i in 1..=ROTATIONS {
        let token = format!("t{i}");
        server.accept_only(&token);
        std::fs::write(path, &token).unwrap();
        let res = client.post(server.url("/")).body("x").send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.bytes().await.unwrap();
    }
    assert_eq!(server.requests(), 2 * ROTATIONS);
    assert_eq!(store.status().unauthorized_reloads, ROTATIONS);
    server.connections()
}

/// The 401's body is read before the retry, so its connection goes back to the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_goes_out_on_the_connection_of_the_401() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "t0").await;
    let server = AuthServer::start("t0").await;
    // A Kubernetes `Status`, arriving a moment after the headers.
    server.refusal_body(Bytes::from_static(
        br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Unauthorized","reason":"Unauthorized","code":401}"#,
    ));
    let client = client(
        BearerMiddleware::new(store.clone()).retry_unauthorized(),
        &Inspect::default(),
    );
    let connections = connections_after_revoking_rotations(&client, &server, &path, &store).await;
    assert_eq!(store.status().retries_succeeded, ROTATIONS);
    // Dropping each 401 unread costs a connection per rotation. With the drain, a few
    // suffice: the pool may open one while the drained connection is on its way back.
    assert!(
        connections <= ROTATIONS / 2,
        "{connections} connections for {ROTATIONS} revoking rotations"
    );
}

/// Through `TlsMiddleware`, which takes the refusal of the `BearerMiddleware` before it, the
/// 401's body is read before the resend too: over HTTP/1.1 the resend goes out on the 401's
/// connection, not a new handshake.
#[cfg(feature = "tls")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn through_tls_middleware_a_resend_goes_out_on_the_connection_of_the_401() {
    use bearer_reload::reqwest::TlsMiddleware;
    use bearer_reload::tls::RootStore;

    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "t0").await;
    let ca = support::tls::TestCa::new();
    let mut config = ca.server_config();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let server = AuthServer::start_tls("t0", acceptor).await;
    let bundle = ca.ca_pem().to_owned();
    let roots = RootStore::builder(bearer_reload::source::FnSource::new("ca", move || {
        let pem = bundle.clone();
        async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
    }))
    .load()
    .await
    .unwrap();
    let tls = TlsMiddleware::new(roots);
    let client = ClientBuilder::new(tls.client().unwrap())
        .with(BearerMiddleware::new(store.clone()).retry_unauthorized())
        .with(tls)
        .build();
    let connections = connections_after_revoking_rotations(&client, &server, &path, &store).await;
    assert!(
        connections <= ROTATIONS / 2,
        "{connections} connections for {ROTATIONS} revoking rotations"
    );
}

/// A store loaded on a runtime that ended (a start-up step's) is followed again from the
/// middleware's next request on a live runtime.
#[test]
fn a_store_whose_runtime_ended_is_followed_again_from_its_next_request() {
    use bearer_reload::WatchState;
    use bearer_reload::testing::ProjectedTokenDir;

    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path().join("sa"), "one").unwrap();
    let store = support::load_on_a_runtime_that_ends(volume.token_path());
    assert!(matches!(store.status().watch, WatchState::Stopped { .. }));

    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    main.block_on(async {
        let server = AuthServer::start("one").await;
        let inspect = Inspect::default();
        let client = client(BearerMiddleware::new(store.clone()), &inspect);
        let res = client.get(server.url("/")).send().await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        support::eventually("the store watches again", || {
            store.status().watch == WatchState::Active
        })
        .await;
        volume.rotate("two").unwrap();
        support::wait_for_token(&store, "two").await;
    });
}
