#![allow(dead_code, unreachable_pub)]
//! A local HTTP server that accepts only the bearer tokens it is told to accept, and records
//! what it sees.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http::{Request, Response, StatusCode, header::AUTHORIZATION};
use std::convert::Infallible;

use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::Incoming;
use hyper_util::client::legacy::{Client, connect::HttpConnector};
use hyper_util::rt::TokioExecutor;
use sha2::{Digest, Sha256};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio_rustls::TlsAcceptor;

/// How the server says "unauthorized".
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// HTTP 401.
    Http,
    /// HTTP 200 with `grpc-status: 16`, as a trailers-only gRPC response.
    Grpc,
}

struct State {
    accepted: Mutex<HashSet<String>>,
    seen: Mutex<Vec<String>>,
    refusal: Refusal,
    requests: watch::Sender<u64>,
    refused: AtomicU64,
    /// Requests wait until this many have arrived before they are answered.
    hold_until: AtomicU64,
    /// TCP connections accepted.
    connections: Arc<AtomicU64>,
    /// The body of a refusal (a Kubernetes `Status`, a proxy's page).
    refusal_body: Mutex<Bytes>,
    /// How long after its status line and headers a refusal's body goes out.
    refusal_delay: Mutex<Duration>,
    /// Refusal bodies sent: not those whose stream the client reset first.
    refusal_bodies_sent: Arc<AtomicU64>,
}

/// The server. Stops accepting when dropped.
pub struct AuthServer {
    pub addr: SocketAddr,
    scheme: &'static str,
    state: Arc<State>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for AuthServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl AuthServer {
    pub async fn start(accept: &str) -> Self {
        Self::start_with(accept, Refusal::Http).await
    }

    pub async fn start_with(accept: &str, refusal: Refusal) -> Self {
        Self::start_on(accept, refusal, None).await
    }

    /// Over TLS, with the certificate `tls` holds; HTTP/1 or HTTP/2 as ALPN says.
    pub async fn start_tls(accept: &str, tls: TlsAcceptor) -> Self {
        Self::start_on(accept, Refusal::Http, Some(tls)).await
    }

    async fn start_on(accept: &str, refusal: Refusal, tls: Option<TlsAcceptor>) -> Self {
        let scheme = if tls.is_some() { "https" } else { "http" };
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(State {
            accepted: Mutex::new(HashSet::from([accept.to_owned()])),
            seen: Mutex::new(Vec::new()),
            refusal,
            requests: watch::Sender::new(0),
            refused: AtomicU64::new(0),
            hold_until: AtomicU64::new(0),
            connections: Arc::default(),
            refusal_body: Mutex::new(Bytes::from_static(b"Unauthorized")),
            refusal_delay: Mutex::new(Duration::from_millis(5)),
            refusal_bodies_sent: Arc::default(),
        });
        let handler = {
            let state = state.clone();
            move |req| {
                let state = state.clone();
                async move { handle(&state, req).await }
            }
        };
        let task = super::serve::spawn_counting(listener, tls, handler, state.connections.clone());
        Self {
            addr,
            scheme,
            state,
            task,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}://{}{}", self.scheme, self.addr, path)
    }

    /// Accept `token` from now on, and no other.
    pub fn accept_only(&self, token: &str) {
        *self.state.accepted.lock().unwrap() = HashSet::from([token.to_owned()]);
    }

    /// Accept `token` too.
    pub fn accept_also(&self, token: &str) {
        self.state.accepted.lock().unwrap().insert(token.to_owned());
    }

    /// Stop accepting `token`.
    pub fn revoke(&self, token: &str) {
        self.state.accepted.lock().unwrap().remove(token);
    }

    /// The bearer tokens seen since the last call, in order, forgetting them (bounded
    /// memory over a long run).
    pub fn take_seen(&self) -> Vec<String> {
        std::mem::take(&mut *self.state.seen.lock().unwrap())
    }

    /// Every bearer token the server has seen, in order.
    pub fn seen(&self) -> Vec<String> {
        self.state.seen.lock().unwrap().clone()
    }

    pub fn requests(&self) -> u64 {
        *self.state.requests.borrow()
    }

    pub fn refused(&self) -> u64 {
        self.state.refused.load(Ordering::SeqCst)
    }

    /// TCP connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.state.connections.load(Ordering::SeqCst)
    }

    /// Refuse with this body from now on.
    pub fn refusal_body(&self, body: impl Into<Bytes>) {
        *self.state.refusal_body.lock().unwrap() = body.into();
    }

    /// Send a refusal's body `delay` after its headers from now on (5 ms at first).
    pub fn refusal_body_after(&self, delay: Duration) {
        *self.state.refusal_delay.lock().unwrap() = delay;
    }

    /// How many refusal bodies were sent: a client that resets a refusal's stream (drops
    /// its body) before the body is due stops it (hyper drops the body then).
    pub fn refusal_bodies_sent(&self) -> u64 {
        self.state.refusal_bodies_sent.load(Ordering::SeqCst)
    }

    /// Answer nothing until `n` requests have arrived.
    pub fn hold_until(&self, n: u64) {
        self.state.hold_until.store(n, Ordering::SeqCst);
    }

    /// Waits, with a deadline, until the server has received `n` requests in all.
    pub async fn wait_requests(&self, n: u64, deadline: Duration) {
        super::serve::wait_requests(&self.state.requests, n, deadline).await;
    }
}

type Body = UnsyncBoxBody<Bytes, Infallible>;

async fn handle(state: &State, req: Request<Incoming>) -> Response<Body> {
    let token = req
        .headers()
        .get(AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("")
        .to_owned();
    state.seen.lock().unwrap().push(token.clone());
    let body = req.into_body().collect().await.map(|b| b.to_bytes());
    state.requests.send_modify(|n| *n += 1);
    let hold = state.hold_until.load(Ordering::SeqCst);
    if hold > 0 {
        let mut rx = state.requests.subscribe();
        let _ = rx.wait_for(|&n| n >= hold).await;
    }
    let Ok(body) = body else {
        return status(StatusCode::BAD_REQUEST, "unreadable body").map(BodyExt::boxed_unsync);
    };
    let ok = state.accepted.lock().unwrap().contains(&token);
    if !ok {
        state.refused.fetch_add(1, Ordering::SeqCst);
        return match state.refusal {
            // The status line and headers go out first and the body a moment later, as a
            // server that streams its answer sends them: a client that drops the response
            // at once leaves the body unread on the connection.
            Refusal::Http => {
                let refusal = state.refusal_body.lock().unwrap().clone();
                let delay = *state.refusal_delay.lock().unwrap();
                let sent = state.refusal_bodies_sent.clone();
                let later = futures_util::stream::once(async move {
                    tokio::time::sleep(delay).await;
                    sent.fetch_add(1, Ordering::SeqCst);
                    Ok::<_, Infallible>(http_body::Frame::data(refusal))
                });
                Response::builder()
                    .status(StatusCode::UNAUTHORIZED)
                    .body(StreamBody::new(later).boxed_unsync())
                    .unwrap()
            }
            Refusal::Grpc => Response::builder()
                .header("content-type", "application/grpc")
                .header("grpc-status", "16")
                .header("grpc-message", "invalid token")
                .body(Full::default().boxed_unsync())
                .unwrap(),
        };
    }
    let digest: String = Sha256::digest(&body)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    Response::builder()
        .header("x-body-sha256", digest)
        .header("x-body-len", body.len())
        .body(Full::new(Bytes::from_static(b"ok")).boxed_unsync())
        .unwrap()
}

fn status(code: StatusCode, text: &'static str) -> Response<Full<Bytes>> {
    Response::builder()
        .status(code)
        .body(Full::new(Bytes::from_static(text.as_bytes())))
        .unwrap()
}

/// A hyper-util client (HTTP/1) for bodies of type `B`.
pub fn http1_client<B>() -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Client::builder(TokioExecutor::new()).build_http()
}

/// A hyper-util client speaking HTTP/2 without TLS, many requests over one connection.
pub fn http2_client<B>() -> Client<HttpConnector, B>
where
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build_http()
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    Sha256::digest(bytes)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}
