//! The accept loop the test servers share: plain TCP or TLS, HTTP/1 or HTTP/2.
//!
//! Included next to `server.rs` and `kube_api.rs` wherever they are (`super::serve`), also
//! from examples with `#[path = "../tests/support/serve.rs"] mod serve;`.
#![allow(dead_code, unreachable_pub)]

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bytes::Bytes;
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

/// Serves every connection on `listener` with `handle`, over TLS when `tls` is given, until
/// the returned task is aborted.
pub fn spawn<H, F, B>(listener: TcpListener, tls: Option<TlsAcceptor>, handle: H) -> JoinHandle<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    spawn_counting(listener, tls, handle, Arc::default())
}

/// [`spawn`], counting the connections accepted in `connections`.
pub fn spawn_counting<H, F, B>(
    listener: TcpListener,
    tls: Option<TlsAcceptor>,
    handle: H,
    connections: Arc<AtomicU64>,
) -> JoinHandle<()>
where
    H: Fn(Request<Incoming>) -> F + Clone + Send + Sync + 'static,
    F: Future<Output = Response<B>> + Send + 'static,
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            connections.fetch_add(1, Ordering::SeqCst);
            let (tls, handle) = (tls.clone(), handle.clone());
            tokio::spawn(async move {
                let svc = hyper::service::service_fn(move |req| {
                    let response = handle(req);
                    async move { Ok::<_, Infallible>(response.await) }
                });
                let mut builder =
                    hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                builder.http2().max_concurrent_streams(4096);
                let _ = match tls {
                    Some(acceptor) => {
                        let Ok(stream) = acceptor.accept(tcp).await else {
                            return;
                        };
                        builder.serve_connection(TokioIo::new(stream), svc).await
                    }
                    None => builder.serve_connection(TokioIo::new(tcp), svc).await,
                };
            });
        }
    })
}

/// Waits, with a deadline, until a server's request counter reaches `n`.
pub async fn wait_requests(requests: &watch::Sender<u64>, n: u64, deadline: std::time::Duration) {
    let mut rx = requests.subscribe();
    if tokio::time::timeout(deadline, rx.wait_for(|&seen| seen >= n))
        .await
        .is_err()
    {
        panic!("server saw {} of {n} requests", *requests.borrow());
    }
}
