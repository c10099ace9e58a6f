//! `tonic::TlsChannel`'s own behaviours, against real servers: one dial for a burst of
//! first calls, a stream the server refused (`REFUSED_STREAM`: never processed) sent again
//! with its body while any other reset is not, and a dial that fails naming the origin.
//! Rotations and refusals of each credential are the matrix's (`tests/it/conformance/`); here,
//! what a refused certificate's call counts.

use crate::support;

use std::sync::{Arc, Mutex};
use std::time::Duration;

use bearer_reload::source::FileSource;
use bearer_reload::tls::{IdentityStore, RootStore};
use bearer_reload::tonic::TlsChannel;
use bytes::Bytes;
use support::mtls::MtlsServer;
use support::pki::Ca;
use support::stalled::Stalled;
use support::tls::TestCa;
use tokio::net::TcpListener;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::ServiceExt;

const HOUR: Duration = Duration::from_secs(3600);

async fn roots_of(dir: &std::path::Path, pem: &str) -> RootStore {
    let path = dir.join("ca.crt");
    std::fs::write(&path, pem).unwrap();
    RootStore::builder(FileSource::new(path))
        .load()
        .await
        .unwrap()
}

#[tokio::test]
async fn a_burst_of_first_calls_makes_one_connection() {
    support::tls::install_ring();
    let (server_ca, clients) = (Ca::new("server"), Ca::new("clients"));
    let server = MtlsServer::start(&clients, &server_ca.server()).await;
    let dir = tempfile::tempdir().unwrap();
    let client = clients.client("burst", HOUR);
    std::fs::write(dir.path().join("tls.crt"), &client.cert_pem).unwrap();
    std::fs::write(dir.path().join("tls.key"), &client.key_pem).unwrap();
    let identity = IdentityStore::files(dir.path().join("tls.crt"), dir.path().join("tls.key"))
        .load()
        .await
        .unwrap();
    let roots = roots_of(dir.path(), &server_ca.pem()).await;
    let channel = TlsChannel::new(server.url("").parse().unwrap(), roots)
        .unwrap()
        .identity(identity);
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let mut health = HealthClient::new(channel.clone());
            tokio::spawn(async move { health.check(HealthCheckRequest::default()).await })
        })
        .collect();
    for call in calls {
        call.await.unwrap().unwrap();
    }
    assert_eq!(server.connections(), 1, "one dial for every first call");
    assert_eq!(server.arrivals().len(), 16);
    // Its Debug names the origin and the generations, and holds no key.
    let shown = format!("{channel:?}");
    assert!(
        shown.starts_with("TlsChannel { origin: https://localhost:"),
        "{shown}"
    );
    assert!(
        shown.contains("generations: Generations { identity: 1, roots: 1 }"),
        "{shown}"
    );
    let key_line = client.key_pem.lines().nth(1).unwrap();
    assert!(
        !shown.contains(key_line) && !shown.contains("PRIVATE KEY"),
        "{shown}"
    );
}

/// How the raw HTTP/2 server answers each stream, in order.
#[derive(Clone, Copy, Debug)]
enum Answer {
    /// `RST_STREAM` with this reason, after reading the request body.
    Reset(h2::Reason),
    /// A graceful `GOAWAY` before any stream: the server processes none of this
    /// connection's (only the first answer of a script may be this one).
    GoAway,
    /// A gRPC health `SERVING`.
    Serve,
}

/// An HTTP/2 server over TLS (h2 directly, to reset streams as a server may) that answers
/// its streams as `script` says and records each request body.
async fn h2_server(ca: &TestCa, script: Vec<Answer>) -> (String, Arc<Mutex<Vec<Bytes>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let acceptor = ca.acceptor();
    let bodies = Arc::new(Mutex::new(Vec::new()));
    let seen = bodies.clone();
    tokio::spawn(async move {
        let script = Arc::new(Mutex::new(script.into_iter()));
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, script, seen) = (acceptor.clone(), script.clone(), seen.clone());
            tokio::spawn(async move {
                let tls = acceptor.accept(tcp).await.unwrap();
                let mut connection = h2::server::handshake(tls).await.unwrap();
                let first = script.lock().unwrap().as_slice().first().copied();
                if let Some(Answer::GoAway) = first {
                    script.lock().unwrap().next();
                    connection.abrupt_shutdown(h2::Reason::NO_ERROR);
                }
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    let answer = script.lock().unwrap().next().unwrap_or(Answer::Serve);
                    let (script_seen, body) = (seen.clone(), request.into_body());
                    tokio::spawn(async move {
                        let body = read(body).await;
                        script_seen.lock().unwrap().push(body);
                        match answer {
                            Answer::Reset(reason) => respond.send_reset(reason),
                            Answer::Serve | Answer::GoAway => serve(&mut respond),
                        }
                    });
                }
            });
        }
    });
    (url, bodies)
}

async fn read(mut body: h2::RecvStream) -> Bytes {
    let mut all = Vec::new();
    while let Some(chunk) = body.data().await {
        let chunk = chunk.unwrap();
        body.flow_control().release_capacity(chunk.len()).unwrap();
        all.extend_from_slice(&chunk);
    }
    Bytes::from(all)
}

fn serve(respond: &mut h2::server::SendResponse<Bytes>) {
    let response = http::Response::builder()
        .header("content-type", "application/grpc")
        .body(())
        .unwrap();
    let mut stream = respond.send_response(response, false).unwrap();
    // HealthCheckResponse { status: SERVING }, framed uncompressed.
    stream
        .send_data(Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 0x01]), false)
        .unwrap();
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    stream.send_trailers(trailers).unwrap();
}

#[tokio::test]
async fn a_refused_stream_is_sent_again_with_its_body_and_no_other_reset_is() {
    support::tls::install_ring();
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let request = HealthCheckRequest {
        service: "inventory".into(),
    };

    // REFUSED_STREAM: the server did not process it, so the call goes again, whole.
    let script = vec![Answer::Reset(h2::Reason::REFUSED_STREAM), Answer::Serve];
    let (url, bodies) = h2_server(&ca, script).await;
    let roots = roots_of(dir.path(), ca.ca_pem()).await;
    let mut health =
        HealthClient::new(TlsChannel::new(url.parse().unwrap(), roots.clone()).unwrap());
    health.check(request.clone()).await.unwrap();
    let bodies = bodies.lock().unwrap().clone();
    assert_eq!(
        bodies.len(),
        2,
        "the refused stream and the call sent again"
    );
    assert!(!bodies[0].is_empty());
    assert_eq!(bodies[0], bodies[1], "the same body, replayed");

    // A graceful GOAWAY that came before the call: sent again, on a new connection.
    let (url, bodies) = h2_server(&ca, vec![Answer::GoAway, Answer::Serve]).await;
    let mut health =
        HealthClient::new(TlsChannel::new(url.parse().unwrap(), roots.clone()).unwrap());
    health.check(request.clone()).await.unwrap();
    assert_eq!(
        bodies.lock().unwrap().len(),
        1,
        "processed once, by the second connection"
    );

    // Any other reset may come after the server acted: the call's error, sent once.
    for reason in [h2::Reason::INTERNAL_ERROR, h2::Reason::NO_ERROR] {
        let script = vec![Answer::Reset(reason), Answer::Serve];
        let (url, bodies) = h2_server(&ca, script).await;
        let mut health =
            HealthClient::new(TlsChannel::new(url.parse().unwrap(), roots.clone()).unwrap());
        let status = health.check(request.clone()).await.unwrap_err();
        assert_eq!(
            bodies.lock().unwrap().len(),
            1,
            "{reason:?} not sent again: {status}"
        );
    }
}

/// A server that closes each connection it accepts at once, after `release` is notified,
/// until `up` is set; then it serves every call. `accepted` counts the connections.
async fn gated_server(
    ca: &TestCa,
) -> (
    String,
    tokio::sync::watch::Receiver<usize>,
    Arc<tokio::sync::Notify>,
    Arc<std::sync::atomic::AtomicBool>,
) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!(
        "https://localhost:{}",
        listener.local_addr().unwrap().port()
    );
    let (counted, accepted) = tokio::sync::watch::channel(0);
    let release = Arc::new(tokio::sync::Notify::new());
    let up = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (acceptor, gate, serving) = (ca.acceptor(), release.clone(), up.clone());
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            counted.send_modify(|n| *n += 1);
            if !serving.load(std::sync::atomic::Ordering::SeqCst) {
                gate.notified().await;
                drop(tcp);
                continue;
            }
            let tls = acceptor.accept(tcp).await.unwrap();
            tokio::spawn(async move {
                let mut connection = h2::server::handshake(tls).await.unwrap();
                while let Some(Ok((request, mut respond))) = connection.accept().await {
                    read(request.into_body()).await;
                    serve(&mut respond);
                }
            });
        }
    });
    (url, accepted, release, up)
}

/// On a single-threaded runtime: every call below is spawned, and has asked for the
/// connection, before the server sees the first dial.
#[tokio::test]
async fn the_calls_waiting_for_a_dial_that_fails_share_its_error_and_the_next_call_dials_again() {
    support::tls::install_ring();
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let (url, mut accepted, release, up) = gated_server(&ca).await;
    let roots = roots_of(dir.path(), ca.ca_pem()).await;
    let channel = TlsChannel::new(url.parse().unwrap(), roots).unwrap();
    let calls: Vec<_> = (0..8)
        .map(|_| {
            let mut health = HealthClient::new(channel.clone());
            tokio::spawn(async move { health.check(HealthCheckRequest::default()).await })
        })
        .collect();
    accepted.wait_for(|&n| n == 1).await.unwrap();
    release.notify_one();
    for call in calls {
        // A second dial would wait for a release that never comes.
        let outcome = tokio::time::timeout(support::DEADLINE, call).await;
        outcome
            .expect("no call waits for a second dial")
            .unwrap()
            .unwrap_err();
    }
    assert_eq!(
        *accepted.borrow(),
        1,
        "one dial for the calls that waited on it"
    );

    // The server is back: the next call dials again rather than repeating the error.
    up.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut health = HealthClient::new(channel);
    health.check(HealthCheckRequest::default()).await.unwrap();
    assert_eq!(*accepted.borrow(), 2);
}

#[tokio::test]
async fn a_dial_that_fails_names_the_origin() {
    support::tls::install_ring();
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let roots = roots_of(dir.path(), ca.ca_pem()).await;
    // A port nothing listens on any more.
    let port = {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        listener.local_addr().unwrap().port()
    };
    let origin = format!("https://127.0.0.1:{port}");
    let channel = TlsChannel::new(origin.parse().unwrap(), roots).unwrap();
    let request = http::Request::post("/grpc.health.v1.Health/Check")
        .body(tonic::body::Body::empty())
        .unwrap();
    let error = channel.oneshot(request).await.unwrap_err();
    let chain = support::chain(&*error);
    assert!(
        chain.starts_with(&format!("cannot connect to {origin}/: ")),
        "{chain}"
    );
}

#[test]
fn an_origin_that_is_not_https_is_refused_at_once() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ca = TestCa::new();
    let dir = tempfile::tempdir().unwrap();
    let roots = runtime.block_on(roots_of(dir.path(), ca.ca_pem()));
    let refused = |origin: &str| {
        let origin: http::Uri = origin.parse().unwrap();
        TlsChannel::<tonic::body::Body>::new(origin, roots.clone()).unwrap_err()
    };
    let err = refused("http://localhost:8080");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err:?}");
    assert_eq!(
        err.to_string(),
        "http://localhost:8080/ is not an https:// URI: credentials are never sent in plain text"
    );
    // A path alone, with no scheme or host.
    let err = refused("/grpc.health.v1.Health/Check");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err:?}");
    assert!(
        err.to_string().contains("/grpc.health.v1.Health/Check"),
        "{err}"
    );
    // An https origin without a host.
    let err = refused("https://:8443");
    assert_eq!(err.kind(), std::io::ErrorKind::InvalidInput, "{err:?}");
    assert_eq!(err.to_string(), "https://:8443/ names no host");
    // An https origin is taken.
    let origin = "https://localhost:8443".parse().unwrap();
    assert!(TlsChannel::<tonic::body::Body>::new(origin, roots).is_ok());
}

/// A certificate refused on its open connection (HTTP 401): the call is sent again with the
/// certificate read after the refusal, and the identity store counts the retry, and whether
/// it succeeded.
#[tokio::test]
async fn a_refused_certificate_is_reloaded_and_its_call_sent_again_and_counted() {
    support::tls::install_ring();
    let (server_ca, clients) = (Ca::new("server"), Ca::new("clients"));
    let server = MtlsServer::start(&clients, &server_ca.server()).await;
    let dir = tempfile::tempdir().unwrap();
    let (crt, key) = (dir.path().join("tls.crt"), dir.path().join("tls.key"));
    let first = clients.client("first", HOUR);
    std::fs::write(&crt, &first.cert_pem).unwrap();
    std::fs::write(&key, &first.key_pem).unwrap();
    // Only the refusal reads the files again.
    let identity = IdentityStore::files(&crt, &key)
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let roots = roots_of(dir.path(), &server_ca.pem()).await;
    let channel = TlsChannel::new(server.url("").parse().unwrap(), roots)
        .unwrap()
        .identity(identity.clone());
    let mut health = HealthClient::new(channel);
    health.check(HealthCheckRequest::default()).await.unwrap();

    let second = clients.client("second", HOUR);
    std::fs::write(&crt, &second.cert_pem).unwrap();
    std::fs::write(&key, &second.key_pem).unwrap();
    server.refuse(&first.fingerprint());
    health.check(HealthCheckRequest::default()).await.unwrap();
    assert_eq!(identity.generation(), 2);
    let status = identity.status();
    assert_eq!((status.retries, status.retries_succeeded), (1, 1));

    // A successor the server refuses too: sent again once, refused again, counted so.
    let third = clients.client("third", HOUR);
    std::fs::write(&crt, &third.cert_pem).unwrap();
    std::fs::write(&key, &third.key_pem).unwrap();
    server.refuse(&second.fingerprint());
    server.refuse(&third.fingerprint());
    let refused = health
        .check(HealthCheckRequest::default())
        .await
        .unwrap_err();
    assert!(refused.to_string().contains("failed"), "{refused}");
    assert_eq!(identity.generation(), 3);
    let status = identity.status();
    assert_eq!((status.retries, status.retries_succeeded), (2, 1));
}

/// A channel to `server` (of `ca`) with a connect timeout of `limit`, and a call on it.
async fn call_stalled(ca: &Ca, server: &Stalled, limit: Duration) -> (String, Duration) {
    support::tls::install_ring();
    let dir = tempfile::tempdir().unwrap();
    let roots = roots_of(dir.path(), &ca.pem()).await;
    let channel = TlsChannel::new(server.url().parse().unwrap(), roots)
        .unwrap()
        .connect_timeout(Some(limit));
    let request = http::Request::post("/grpc.health.v1.Health/Check")
        .body(tonic::body::Body::empty())
        .unwrap();
    let start = std::time::Instant::now();
    let called = tokio::time::timeout(support::DEADLINE, channel.oneshot(request)).await;
    let error = called.expect("the call ends").unwrap_err();
    (support::chain(&*error), start.elapsed())
}

#[tokio::test]
async fn a_dial_to_a_server_that_never_speaks_tls_ends_at_the_connect_timeout() {
    let limit = Duration::from_secs(1);
    let (chain, took) = call_stalled(&Ca::new("server"), &Stalled::before_tls().await, limit).await;
    assert!(chain.contains("no connection within 1s"), "{chain}");
    assert!(took >= limit, "failed in {took:?}");
}

#[tokio::test]
async fn a_server_that_does_not_choose_http2_is_refused_saying_so() {
    let ca = Ca::new("server");
    let server = Stalled::after_request(&ca.server()).await;
    let (chain, _) = call_stalled(&ca, &server, Duration::from_secs(30)).await;
    assert!(
        chain.contains("the server did not choose HTTP/2 (ALPN h2), which gRPC needs"),
        "{chain}"
    );
}

/// A token and a client certificate rotated together, nothing but the refusal reloading
/// them, a `Buffer` between the `BearerLayer` and the channel (which it calls from its
/// own task), and a server that refuses the old pair: the call is received twice, with
/// the old pair and then the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_refused_for_its_token_and_certificate_behind_a_buffer_is_received_twice() {
    use bearer_reload::{BearerLayer, TokenStore};
    use http_body_util::Full;
    support::tls::install_ring();
    let (server_ca, clients) = (Ca::new("server"), Ca::new("clients"));
    let server = MtlsServer::start(&clients, &server_ca.server()).await;
    let dir = tempfile::tempdir().unwrap();
    let (crt, key, token) = (
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        dir.path().join("token"),
    );
    let first = clients.client("first", HOUR);
    std::fs::write(&crt, &first.cert_pem).unwrap();
    std::fs::write(&key, &first.key_pem).unwrap();
    std::fs::write(&token, "one").unwrap();
    let identity = IdentityStore::files(&crt, &key)
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let tokens = TokenStore::builder(FileSource::new(&token))
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let roots = roots_of(dir.path(), &server_ca.pem()).await;
    let channel = TlsChannel::<Full<Bytes>>::new(server.url("").parse().unwrap(), roots)
        .unwrap()
        .identity(identity);
    let client = tower::ServiceBuilder::new()
        .layer(BearerLayer::new(tokens).retry_unauthorized())
        .service(tower::buffer::Buffer::new(channel, 16));
    let call = |path: &'static str| {
        let request = http::Request::post(path)
            .body(Full::new(Bytes::from_static(b"call")))
            .unwrap();
        client.clone().oneshot(request)
    };
    server.accept_tokens(&["one"]);
    assert_eq!(call("/warm").await.unwrap().status(), http::StatusCode::OK);

    let second = clients.client("second", HOUR);
    std::fs::write(&crt, &second.cert_pem).unwrap();
    std::fs::write(&key, &second.key_pem).unwrap();
    std::fs::write(&token, "two").unwrap();
    server.accept_tokens(&["two"]);
    server.refuse(&first.fingerprint());
    assert_eq!(call("/both").await.unwrap().status(), http::StatusCode::OK);
    let seen: Vec<_> = (server.arrivals().into_iter())
        .filter(|a| a.path == "/both")
        .map(|a| (a.authorization.unwrap_or_default(), a.fingerprint))
        .collect();
    let want = [
        ("Bearer one", first.fingerprint()),
        ("Bearer two", second.fingerprint()),
    ];
    assert_eq!(seen, want.map(|(t, f)| (t.to_owned(), f)));
}
