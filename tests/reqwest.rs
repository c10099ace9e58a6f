//! `BearerMiddleware` beyond the conformance scenarios: what it puts on the wire, its
//! options, and the connection a retry goes out on. Real reqwest clients against a local
//! server.

mod support;

use std::convert::Infallible;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bearer_reload::reqwest::BearerMiddleware;
use bytes::Bytes;
use http::Extensions;
use http::header::AUTHORIZATION;
use http_body::Frame;
use http_body_util::{BodyExt, StreamBody};
use hyper::body::Incoming;
use reqwest::{Request, Response, StatusCode};
use reqwest_middleware::{ClientBuilder, ClientWithMiddleware, Middleware, Next};
use support::quiet_store;
use support::server::AuthServer;

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

fn client(middleware: BearerMiddleware, inspect: &Inspect) -> ClientWithMiddleware {
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
    assert_eq!(store.status().unauthorized.seen, 0);
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
    assert_eq!(status.unauthorized.seen, 1);
    assert_eq!(status.unauthorized.retries, 0);
}

/// A server whose 401 carries a page in several chunks, as a proxy sends it (a body that
/// hyper does not read ahead whole on its own), and that counts its connections.
struct PageServer {
    url: String,
    accepted: Arc<Mutex<String>>,
    connections: Arc<AtomicU64>,
    requests: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for PageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

type PageBody =
    StreamBody<futures_util::stream::Iter<std::vec::IntoIter<Result<Frame<Bytes>, Infallible>>>>;

impl PageServer {
    async fn start(accept: &str) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}/", listener.local_addr().unwrap());
        let accepted = Arc::new(Mutex::new(accept.to_owned()));
        let (connections, requests) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
        let task = tokio::spawn({
            let (accepted, connections, requests) =
                (accepted.clone(), connections.clone(), requests.clone());
            async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    connections.fetch_add(1, Ordering::SeqCst);
                    let (accepted, requests) = (accepted.clone(), requests.clone());
                    let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                        requests.fetch_add(1, Ordering::SeqCst);
                        let expected = format!("Bearer {}", accepted.lock().unwrap());
                        let ok = req
                            .headers()
                            .get(AUTHORIZATION)
                            .is_some_and(|v| *v == *expected);
                        async move {
                            req.into_body().collect().await?;
                            let (status, frames) = if ok {
                                (
                                    StatusCode::OK,
                                    vec![Ok(Frame::data(Bytes::from_static(b"ok")))],
                                )
                            } else {
                                let chunk = Bytes::from(vec![b'p'; 1024]);
                                (
                                    StatusCode::UNAUTHORIZED,
                                    (0..4).map(|_| Ok(Frame::data(chunk.clone()))).collect(),
                                )
                            };
                            let body: PageBody =
                                StreamBody::new(futures_util::stream::iter(frames));
                            let mut res = http::Response::new(body);
                            *res.status_mut() = status;
                            Ok::<_, hyper::Error>(res)
                        }
                    });
                    tokio::spawn(
                        hyper::server::conn::http1::Builder::new()
                            .serve_connection(hyper_util::rt::TokioIo::new(tcp), svc),
                    );
                }
            }
        });
        Self {
            url,
            accepted,
            connections,
            requests,
            task,
        }
    }
}

/// Five revocations, each answered by a 401 whose page comes in chunks, and a retry: the
/// 401's body is read before the retry, so its connection goes back to the pool.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_goes_out_on_the_connection_of_the_401() {
    let dir = tempfile::tempdir().unwrap();
    let (path, store) = quiet_store(dir.path(), "token-0").await;
    let server = PageServer::start("token-0").await;
    let client = client(
        BearerMiddleware::new(store.clone()).retry_unauthorized(),
        &Inspect::default(),
    );
    let send = || async {
        let res = client.post(&server.url).body("x").send().await.unwrap();
        let status = res.status();
        res.bytes().await.unwrap();
        status
    };
    assert_eq!(send().await, StatusCode::OK);
    for i in 1..=5 {
        let token = format!("token-{i}");
        *server.accepted.lock().unwrap() = token.clone();
        std::fs::write(&path, &token).unwrap();
        assert_eq!(send().await, StatusCode::OK);
    }
    let status = store.status();
    assert_eq!(status.unauthorized.retries_succeeded, 5);
    assert_eq!(server.requests.load(Ordering::SeqCst), 11);
    // The first retry may leave before the pool has the 401's connection back; after
    // that, two connections take turns. Without the drain, each retry needs a new one.
    let connections = server.connections.load(Ordering::SeqCst);
    assert!(connections <= 2, "{connections} connections for 11 requests");
}
