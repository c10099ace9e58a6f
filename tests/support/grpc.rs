//! A local gRPC server over TLS: tonic-health's generated `Health` service behind a tonic
//! interceptor that accepts only the bearer tokens it is told to accept and refuses every
//! other call with `Status::unauthenticated` (a trailers-only response: HTTP 200 with
//! `grpc-status: 16` in its headers).
//!
//! Like `AuthServer`, it records each call's token and reads
//! the whole request body before the interceptor answers (as a proxy that buffers requests
//! does), so a client has sent all of its body by the time it is refused.
//!
//! Included by the test binaries that use it (`#[path = "support/grpc.rs"] mod grpc;`, next
//! to `mod support;`), so that the others do not compile tonic.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{HeaderMap, Request, Response};
use http_body_util::{BodyExt, Full};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tonic::Status;
use tonic::body::Body;
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tower::Service;

use crate::support::tls::TestCa;

struct State {
    accepted: Mutex<HashSet<String>>,
    seen: Mutex<Vec<String>>,
    requests: watch::Sender<u64>,
    refused: AtomicU64,
}

/// The server. Stops serving when dropped.
pub struct GrpcServer {
    pub addr: SocketAddr,
    state: Arc<State>,
    _reporter: tonic_health::server::HealthReporter,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for GrpcServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl GrpcServer {
    /// Serves over TLS with `ca`'s server certificate, accepting `accept`.
    pub async fn start(accept: &str, ca: &TestCa) -> Self {
        let state = Arc::new(State {
            accepted: Mutex::new(HashSet::from([accept.to_owned()])),
            seen: Mutex::new(Vec::new()),
            requests: watch::Sender::new(0),
            refused: AtomicU64::new(0),
        });
        let (reporter, health) = tonic_health::server::health_reporter();
        let interceptor = {
            let state = state.clone();
            move |req: tonic::Request<()>| {
                let token = req
                    .metadata()
                    .get("authorization")
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.strip_prefix("Bearer "));
                if token.is_some_and(|t| state.accepted.lock().unwrap().contains(t)) {
                    Ok(req)
                } else {
                    state.refused.fetch_add(1, Ordering::SeqCst);
                    Err(Status::unauthenticated("invalid bearer token"))
                }
            }
        };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        // tonic's server TLS takes rustls's process default, which `--all-features` (ring and
        // aws-lc-rs both on) leaves unset.
        crate::support::tls::install_ring();
        let tls = ServerTlsConfig::new().identity(Identity::from_pem(ca.cert_pem(), ca.key_pem()));
        let router = Server::builder()
            .tls_config(tls)
            .unwrap()
            .layer(tower::layer::layer_fn({
                let state = state.clone();
                move |inner| ReadFirst {
                    inner,
                    state: state.clone(),
                }
            }))
            .add_service(InterceptedService::new(health, interceptor));
        let task = tokio::spawn(async move {
            let _ = router
                .serve_with_incoming(TcpIncoming::from(listener))
                .await;
        });
        Self {
            addr,
            state,
            _reporter: reporter,
            task,
        }
    }

    /// `https://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Accept `token` from now on, and no other.
    pub fn accept_only(&self, token: &str) {
        *self.state.accepted.lock().unwrap() = HashSet::from([token.to_owned()]);
    }

    /// Accept `token` too.
    pub fn accept_also(&self, token: &str) {
        self.state.accepted.lock().unwrap().insert(token.to_owned());
    }

    /// Every bearer token the server has seen, in order ("" for a call without one).
    pub fn seen(&self) -> Vec<String> {
        self.state.seen.lock().unwrap().clone()
    }

    /// Calls received (read whole), accepted or not.
    pub fn requests(&self) -> u64 {
        *self.state.requests.borrow()
    }

    /// Calls the interceptor refused.
    pub fn refused(&self) -> u64 {
        self.state.refused.load(Ordering::SeqCst)
    }

    /// Waits, with a deadline, until the server has received `n` calls in all.
    pub async fn wait_requests(&self, n: u64, deadline: Duration) {
        crate::support::serve::wait_requests(&self.state.requests, n, deadline).await;
    }
}

fn bearer(headers: &HeaderMap) -> String {
    headers
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_owned()
}

/// Records the call's token, reads the whole request body, then hands the call on.
#[derive(Clone)]
struct ReadFirst<S> {
    inner: S,
    state: Arc<State>,
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

impl<S> Service<Request<Body>> for ReadFirst<S>
where
    S: Service<Request<Body>, Response = Response<Body>> + Clone + Send + 'static,
    S::Future: Send,
{
    type Response = Response<Body>;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<Body>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<Body>) -> Self::Future {
        // The clone that was made ready goes with the call.
        let inner = self.inner.clone();
        let mut inner = std::mem::replace(&mut self.inner, inner);
        let state = self.state.clone();
        Box::pin(async move {
            let (parts, body) = req.into_parts();
            state.seen.lock().unwrap().push(bearer(&parts.headers));
            let body = match body.collect().await {
                Ok(collected) => collected.to_bytes(),
                Err(status) => return Ok(status.into_http()),
            };
            state.requests.send_modify(|n| *n += 1);
            inner
                .call(Request::from_parts(parts, Body::new(Full::new(body))))
                .await
        })
    }
}
