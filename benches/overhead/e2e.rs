//! End-to-end requests per second over loopback: a hyper-util legacy client (HTTP/1,
//! keep-alive) with and without the layer, against a local hyper server that answers 200
//! with an empty body; the same client and server for all, runs interleaved.

use std::convert::Infallible;
use std::fmt;
use std::future::ready;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{BodyExt, Empty};
use hyper::body::Incoming;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tower::{Layer, Service, ServiceExt};
use tower_http::auth::AddAuthorizationLayer;

use crate::env_or;
use crate::rounds::Samples;

/// End-to-end requests/s medians: (without the layer, with it, with static AddAuthorization).
pub(crate) struct E2e {
    pub(crate) plain: Samples,
    pub(crate) bearer: Samples,
    pub(crate) stat: Samples,
}

async fn e2e_run<S>(svc: &S, uri: &Uri, n: usize, concurrency: usize) -> f64
where
    S: Service<Request<Empty<Bytes>>, Response = Response<Incoming>> + Clone + Send + 'static,
    S::Future: Send,
    S::Error: fmt::Debug + Send,
{
    let per_task = n / concurrency;
    let start = Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let (mut svc, uri) = (svc.clone(), uri.clone());
        tasks.spawn(async move {
            for _ in 0..per_task {
                let req = Request::get(uri.clone()).body(Empty::new()).unwrap();
                let res = svc.ready().await.unwrap().call(req).await.unwrap();
                assert_eq!(res.status(), StatusCode::OK);
                res.into_body().collect().await.unwrap();
            }
        });
    }
    while let Some(done) = tasks.join_next().await {
        done.unwrap();
    }
    (per_task * concurrency) as f64 / start.elapsed().as_secs_f64()
}

pub(crate) fn run(store: &TokenStore, token: &str) -> E2e {
    let n = env_or("OVERHEAD_E2E_N", 10_000);
    let rounds = env_or("OVERHEAD_E2E_ROUNDS", 25);
    let concurrency = env_or("OVERHEAD_E2E_CONCURRENCY", 8).max(1);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let authorized = Arc::new(AtomicU64::new(0));
        let server = tokio::spawn({
            let authorized = authorized.clone();
            async move {
                while let Ok((tcp, _)) = listener.accept().await {
                    tcp.set_nodelay(true).unwrap();
                    let authorized = authorized.clone();
                    tokio::spawn(async move {
                        let svc = hyper::service::service_fn(move |req: Request<Incoming>| {
                            if req.headers().contains_key(AUTHORIZATION) {
                                authorized.fetch_add(1, Ordering::Relaxed);
                            }
                            ready(Ok::<_, Infallible>(Response::new(Empty::<Bytes>::new())))
                        });
                        let _ = hyper::server::conn::http1::Builder::new()
                            .serve_connection(TokioIo::new(tcp), svc)
                            .await;
                    });
                }
            }
        });

        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let plain: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
        let bearer = BearerLayer::new(store.clone()).layer(plain.clone());
        let stat = AddAuthorizationLayer::bearer(token)
            .as_sensitive(true)
            .layer(plain.clone());
        let uri: Uri = format!("http://{addr}/").parse().unwrap();

        // Warm-up: opens the pooled connections all runs share.
        let warm = (n / 10).max(concurrency);
        e2e_run(&plain, &uri, warm, concurrency).await;
        e2e_run(&bearer, &uri, warm, concurrency).await;
        e2e_run(&stat, &uri, warm, concurrency).await;

        let mut out = E2e {
            plain: Samples::default(),
            bearer: Samples::default(),
            stat: Samples::default(),
        };
        for round in 0..rounds {
            for k in 0..3 {
                match (round + k) % 3 {
                    0 => out
                        .plain
                        .0
                        .push(e2e_run(&plain, &uri, n, concurrency).await),
                    1 => {
                        let before = authorized.load(Ordering::Relaxed);
                        out.bearer
                            .0
                            .push(e2e_run(&bearer, &uri, n, concurrency).await);
                        let sent = authorized.load(Ordering::Relaxed) - before;
                        assert_eq!(sent as usize, n / concurrency * concurrency);
                    }
                    _ => out.stat.0.push(e2e_run(&stat, &uri, n, concurrency).await),
                }
            }
        }
        server.abort();
        out
    })
}
