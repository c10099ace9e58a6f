//! An HTTPS server (rustls, ring unless told otherwise) that requires client certificates
//! from a CA, refuses the ones it is told to (at the handshake for new connections, with a
//! 401 on connections already made), and records which certificate each request arrived
//! with; its own certificate and the CA it trusts can be changed while it runs.
//!
//! Self-contained beside `pki.rs`, so that examples can include both with `#[path]`.
#![allow(dead_code, unreachable_pub)]

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use bytes::Bytes;
use http::{Response, StatusCode};
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::client::danger::HandshakeSignatureValid;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer, UnixTime};
use rustls::server::danger::{ClientCertVerified, ClientCertVerifier};
use rustls::server::{ClientHello, ResolvesServerCert, WebPkiClientVerifier};
use rustls::sign::CertifiedKey;
use rustls::{DigitallySignedStruct, DistinguishedName, SignatureScheme};
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::pki::{Ca, Issued, fingerprint};

/// The header that tells the client which certificate its request arrived with.
pub const PRESENTED: &str = "x-client-cert";

/// The gRPC health service's path prefix: its `Check` and `Watch` calls are answered as a
/// gRPC server would (`SERVING`; a refused token as `UNAUTHENTICATED`, trailers only),
/// so that tonic's `HealthClient` can call this server. A refused certificate is a 401
/// there too, as on every path.
pub const GRPC_HEALTH: &str = "/grpc.health.v1.Health/";

/// A gRPC answer of the health service: `SERVING` (one message, then `grpc-status: 0`),
/// or `UNAUTHENTICATED` with no message.
fn grpc(unauthenticated: bool) -> Response<BoxBody<Bytes, Infallible>> {
    let builder = Response::builder()
        .status(StatusCode::OK)
        .header(http::header::CONTENT_TYPE, "application/grpc");
    if unauthenticated {
        return builder
            .header("grpc-status", "16")
            .header("grpc-message", "invalid bearer token")
            .body(Full::new(Bytes::new()).boxed())
            .unwrap();
    }
    // HealthCheckResponse { status: SERVING }: field 1, varint 1; framed uncompressed.
    let message = Bytes::from_static(&[0, 0, 0, 0, 2, 0x08, 0x01]);
    let mut trailers = http::HeaderMap::new();
    trailers.insert("grpc-status", http::HeaderValue::from_static("0"));
    let body = Full::new(message)
        .with_trailers(async move { Some(Ok(trailers)) })
        .boxed();
    builder.body(body).unwrap()
}

/// One request, as the server saw it.
#[derive(Debug, Clone)]
pub struct Arrival {
    pub at: Instant,
    /// The fingerprint of the client certificate of its connection.
    pub fingerprint: String,
    /// The connection's number, from 1.
    pub connection: u64,
    /// Whether the server answered 401 (the certificate had been refused since).
    pub refused: bool,
    /// The request's `x-client` header: which of several clients sent it.
    pub client: Option<String>,
    /// The request's `Authorization` header (test tokens only).
    pub authorization: Option<String>,
    /// Its headers.
    pub headers: http::HeaderMap,
    /// Its method, and its path with the query.
    pub method: http::Method,
    pub path: String,
    /// Its body, read whole before it is recorded.
    pub body: Bytes,
}

pub struct MtlsServer {
    addr: SocketAddr,
    shared: Arc<Shared>,
    task: JoinHandle<()>,
}

impl Drop for MtlsServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

struct Shared {
    provider: Arc<rustls::crypto::CryptoProvider>,
    clients: Mutex<Arc<dyn ClientCertVerifier>>,
    refused: Mutex<HashSet<String>>,
    server: Mutex<Arc<CertifiedKey>>,
    arrivals: Mutex<Vec<Arrival>>,
    requests: watch::Sender<u64>,
    connections: AtomicU64,
    /// Connections served that have ended (closed by either side).
    closed: watch::Sender<u64>,
    refused_handshakes: AtomicU64,
    /// The bearer tokens accepted, when the server checks them (`None`: it does not).
    tokens: Mutex<Option<HashSet<String>>>,
    /// Every connection's task, to cut them.
    tasks: Mutex<Vec<tokio::task::AbortHandle>>,
    /// While true, new connections wait before their handshake.
    held: watch::Sender<bool>,
    /// TCP connections accepted, held or not.
    accepted: watch::Sender<u64>,
    /// Bumped to close every connection gracefully (an HTTP/2 `GOAWAY`, then the close
    /// once its streams are done), as a server that restarts does.
    shutdown: watch::Sender<u64>,
}

impl Shared {
    fn is_refused(&self, fingerprint: &str) -> bool {
        self.refused.lock().unwrap().contains(fingerprint)
    }
}

fn client_verifier(
    ca: &Ca,
    provider: &Arc<rustls::crypto::CryptoProvider>,
) -> Arc<dyn ClientCertVerifier> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.der())).unwrap();
    WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider.clone())
        .build()
        .unwrap()
}

fn certified(issued: &Issued, provider: &rustls::crypto::CryptoProvider) -> Arc<CertifiedKey> {
    let key = provider
        .key_provider
        .load_private_key(PrivatePkcs8KeyDer::from(issued.key_der.clone()).into())
        .unwrap();
    Arc::new(CertifiedKey::new(
        vec![CertificateDer::from(issued.cert_der.clone())],
        key,
    ))
}

impl MtlsServer {
    /// Serves with `server`'s certificate, requiring client certificates from `clients`.
    /// HTTP/1.1 and HTTP/2 by ALPN; TLS 1.2 and 1.3, with session resumption on (rustls's
    /// defaults).
    pub async fn start(clients: &Ca, server: &Issued) -> Self {
        Self::start_with(clients, server, &[b"h2", b"http/1.1"]).await
    }

    /// [`start`](Self::start), with HTTP/1.1 only: a client makes a connection per
    /// concurrent request.
    pub async fn start_http1(clients: &Ca, server: &Issued) -> Self {
        Self::start_with(clients, server, &[b"http/1.1"]).await
    }

    /// [`start`](Self::start), with TLS 1.2 only: the server's verdict on the client
    /// certificate comes inside the handshake, before any request is written.
    pub async fn start_tls12(clients: &Ca, server: &Issued) -> Self {
        Self::start_with_versions(
            clients,
            server,
            &[b"h2", b"http/1.1"],
            &[&rustls::version::TLS12],
        )
        .await
    }

    /// [`start`](Self::start), verifying the clients' certificates and signatures with
    /// `provider` (aws-lc-rs for an ECDSA P-521 client key, which ring cannot verify).
    pub async fn start_with_provider(
        clients: &Ca,
        server: &Issued,
        provider: rustls::crypto::CryptoProvider,
    ) -> Self {
        Self::start_full(
            clients,
            server,
            &[b"h2", b"http/1.1"],
            rustls::DEFAULT_VERSIONS,
            provider,
        )
        .await
    }

    async fn start_with(clients: &Ca, server: &Issued, alpn: &[&[u8]]) -> Self {
        Self::start_with_versions(clients, server, alpn, rustls::DEFAULT_VERSIONS).await
    }

    async fn start_with_versions(
        clients: &Ca,
        server: &Issued,
        alpn: &[&[u8]],
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Self {
        let ring = rustls::crypto::ring::default_provider();
        Self::start_full(clients, server, alpn, versions, ring).await
    }

    async fn start_full(
        clients: &Ca,
        server: &Issued,
        alpn: &[&[u8]],
        versions: &[&'static rustls::SupportedProtocolVersion],
        provider: rustls::crypto::CryptoProvider,
    ) -> Self {
        let provider = Arc::new(provider);
        let shared = Arc::new(Shared {
            clients: Mutex::new(client_verifier(clients, &provider)),
            server: Mutex::new(certified(server, &provider)),
            provider: provider.clone(),
            refused: Mutex::default(),
            arrivals: Mutex::default(),
            requests: watch::Sender::new(0),
            connections: AtomicU64::new(0),
            closed: watch::Sender::new(0),
            refused_handshakes: AtomicU64::new(0),
            tokens: Mutex::new(None),
            tasks: Mutex::default(),
            held: watch::Sender::new(false),
            accepted: watch::Sender::new(0),
            shutdown: watch::Sender::new(0),
        });
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_client_cert_verifier(Arc::new(Verifier(shared.clone())))
            .with_cert_resolver(Arc::new(ServerCert(shared.clone())));
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let task = tokio::spawn(accept(listener, acceptor, shared.clone()));
        Self { addr, shared, task }
    }

    /// `https://localhost:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("https://localhost:{}{path}", self.addr.port())
    }

    /// Accept only `tokens` as bearer tokens from now on, on every connection: a request
    /// with another, or none, is answered 401 (and recorded as refused).
    pub fn accept_tokens(&self, tokens: &[&str]) {
        *self.shared.tokens.lock().unwrap() =
            Some(tokens.iter().map(|t| format!("Bearer {t}")).collect());
    }

    /// Refuses the certificate with `fingerprint` from now on.
    pub fn refuse(&self, fingerprint: &str) {
        self.shared
            .refused
            .lock()
            .unwrap()
            .insert(fingerprint.to_owned());
    }

    /// Trusts client certificates from `ca` only, from now on.
    pub fn trust_clients_of(&self, ca: &Ca) {
        *self.shared.clients.lock().unwrap() = client_verifier(ca, &self.shared.provider);
    }

    /// Serves with `server`'s certificate from the next handshake on.
    pub fn serve_with(&self, server: &Issued) {
        *self.shared.server.lock().unwrap() = certified(server, &self.shared.provider);
    }

    /// Holds every new connection before its handshake until
    /// [`release_handshakes`](Self::release_handshakes): changes made meanwhile (a new
    /// server certificate) reach every client at once.
    pub fn hold_handshakes(&self) {
        self.shared.held.send_replace(true);
    }

    /// TCP connections accepted so far, held or not.
    pub fn accepted(&self) -> u64 {
        *self.shared.accepted.borrow()
    }

    /// Waits, with a deadline, until `n` TCP connections were accepted (held or not).
    pub async fn wait_accepted(&self, n: u64, deadline: std::time::Duration) {
        let mut rx = self.shared.accepted.subscribe();
        let waited = tokio::time::timeout(deadline, rx.wait_for(|&seen| seen >= n))
            .await
            .is_ok_and(|seen| seen.is_ok());
        assert!(waited, "{} of {n} connections accepted", *rx.borrow());
    }

    /// Lets the held connections and every later one through.
    pub fn release_handshakes(&self) {
        self.shared.held.send_replace(false);
    }

    /// Cuts every connection made so far, without a TLS `close_notify`: requests in flight
    /// on them fail (as when a server process dies).
    pub fn cut_connections(&self) {
        for task in self.shared.tasks.lock().unwrap().drain(..) {
            task.abort();
        }
    }

    /// Every request so far.
    pub fn arrivals(&self) -> Vec<Arrival> {
        self.shared.arrivals.lock().unwrap().clone()
    }

    /// Connections that completed their handshake.
    pub fn connections(&self) -> u64 {
        self.shared.connections.load(Ordering::SeqCst)
    }

    /// Handshakes that failed (a refused or untrusted certificate, or none).
    pub fn refused_handshakes(&self) -> u64 {
        self.shared.refused_handshakes.load(Ordering::SeqCst)
    }

    /// Waits, with a deadline, until `n` served connections have ended.
    /// Closes every connection made so far gracefully, as a server that restarts does
    /// (HTTP/2: `GOAWAY`, so that clients open no new stream on it, and the close once its
    /// streams are done), and waits until they are closed: the next request of a client
    /// makes a new connection.
    pub async fn close_gracefully(&self) {
        let made = self.connections();
        self.shared.shutdown.send_modify(|n| *n += 1);
        self.wait_closed(made, std::time::Duration::from_secs(10))
            .await;
    }

    pub async fn wait_closed(&self, n: u64, deadline: std::time::Duration) {
        let mut rx = self.shared.closed.subscribe();
        if tokio::time::timeout(deadline, rx.wait_for(|&closed| closed >= n))
            .await
            .is_err()
        {
            panic!("{} of {n} connections closed", *rx.borrow());
        }
    }

    /// Waits, with a deadline, until `n` requests have arrived.
    pub async fn wait_requests(&self, n: u64, deadline: std::time::Duration) {
        let mut rx = self.shared.requests.subscribe();
        if tokio::time::timeout(deadline, rx.wait_for(|&seen| seen >= n))
            .await
            .is_err()
        {
            panic!("the server saw {} of {n} requests", *rx.borrow());
        }
    }
}

async fn accept(listener: TcpListener, acceptor: tokio_rustls::TlsAcceptor, shared: Arc<Shared>) {
    loop {
        let Ok((tcp, _)) = listener.accept().await else {
            continue;
        };
        // As servers do: a gRPC answer is three writes (headers, data, trailers), which
        // Nagle's algorithm would hold for the client's delayed ACK.
        let _ = tcp.set_nodelay(true);
        shared.accepted.send_modify(|n| *n += 1);
        let (acceptor, shared) = (acceptor.clone(), shared.clone());
        let tasks = shared.clone();
        let task = tokio::spawn(async move {
            let mut held = shared.held.subscribe();
            let _ = held.wait_for(|held| !held).await;
            let Ok(stream) = acceptor.accept(tcp).await else {
                shared.refused_handshakes.fetch_add(1, Ordering::SeqCst);
                return;
            };
            let presented = stream
                .get_ref()
                .1
                .peer_certificates()
                .and_then(|certs| certs.first())
                .map(|cert| fingerprint(cert))
                .unwrap_or_default();
            let connection = shared.connections.fetch_add(1, Ordering::SeqCst) + 1;
            let ended = shared.clone();
            let svc = hyper::service::service_fn(move |req: http::Request<Incoming>| {
                let shared = shared.clone();
                let presented = presented.clone();
                // `/hang` is answered never: a request in flight (its body read whole),
                // for as long as the test wants one; `cut_connections` then closes it
                // without an answer, as a server that crashed after acting on it does.
                // `/hang-once` is answered never the first time a path and query arrive,
                // and at once after that: a request sent again gets its answer.
                let method = req.method().clone();
                let path = req
                    .uri()
                    .path_and_query()
                    .map_or("", |p| p.as_str())
                    .to_owned();
                let client = req
                    .headers()
                    .get("x-client")
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let authorization = req
                    .headers()
                    .get(http::header::AUTHORIZATION)
                    .and_then(|v| v.to_str().ok())
                    .map(str::to_owned);
                let headers = req.headers().clone();
                async move {
                    let body = req.into_body().collect().await.map(|b| b.to_bytes());
                    let Ok(body) = body else {
                        // The client went away mid-body: nothing arrived.
                        return Ok(Response::new(Full::new(Bytes::new()).boxed()));
                    };
                    let certificate_refused = shared.is_refused(&presented);
                    let token_refused =
                        shared
                            .tokens
                            .lock()
                            .unwrap()
                            .as_ref()
                            .is_some_and(|tokens| {
                                authorization
                                    .as_ref()
                                    .is_none_or(|header| !tokens.contains(header))
                            });
                    let refused = certificate_refused || token_refused;
                    let route = path.split('?').next().unwrap_or_default().to_owned();
                    let hang = {
                        let mut arrivals = shared.arrivals.lock().unwrap();
                        let hang = route == "/hang"
                            || (route == "/hang-once" && arrivals.iter().all(|a| a.path != path));
                        arrivals.push(Arrival {
                            at: Instant::now(),
                            fingerprint: presented.clone(),
                            connection,
                            refused,
                            client,
                            authorization,
                            headers,
                            method,
                            path,
                            body,
                        });
                        hang
                    };
                    shared.requests.send_modify(|n| *n += 1);
                    if hang {
                        std::future::pending::<()>().await;
                    }
                    let response = if route.starts_with(GRPC_HEALTH) && !certificate_refused {
                        grpc(token_refused)
                    } else {
                        let status = if refused {
                            StatusCode::UNAUTHORIZED
                        } else {
                            StatusCode::OK
                        };
                        Response::builder()
                            .status(status)
                            .body(Full::new(Bytes::from_static(b"ok")).boxed())
                            .unwrap()
                    };
                    let mut response = response;
                    response
                        .headers_mut()
                        .insert(PRESENTED, presented.parse().unwrap());
                    Ok::<_, Infallible>(response)
                }
            });
            let mut builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
            builder.http2().max_concurrent_streams(4096);
            let mut shutdown = ended.shutdown.subscribe();
            let conn = builder.serve_connection(TokioIo::new(stream), svc);
            tokio::pin!(conn);
            tokio::select! {
                _ = conn.as_mut() => {}
                _ = shutdown.changed() => {
                    conn.as_mut().graceful_shutdown();
                    let _ = conn.await;
                }
            }
            ended.closed.send_modify(|n| *n += 1);
        });
        tasks.tasks.lock().unwrap().push(task.abort_handle());
    }
}

/// The CA's verifier, and the refusals.
#[derive(Debug)]
struct Verifier(Arc<Shared>);

impl std::fmt::Debug for Shared {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Shared")
    }
}

impl Verifier {
    fn inner(&self) -> Arc<dyn ClientCertVerifier> {
        self.0.clients.lock().unwrap().clone()
    }
}

impl ClientCertVerifier for Verifier {
    fn root_hint_subjects(&self) -> &[DistinguishedName] {
        &[]
    }

    fn verify_client_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        now: UnixTime,
    ) -> Result<ClientCertVerified, rustls::Error> {
        if self.0.is_refused(&fingerprint(end_entity)) {
            return Err(rustls::Error::InvalidCertificate(
                rustls::CertificateError::Revoked,
            ));
        }
        self.inner()
            .verify_client_cert(end_entity, intermediates, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        self.inner().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.inner().supported_verify_schemes()
    }
}

/// The server's current certificate.
#[derive(Debug)]
struct ServerCert(Arc<Shared>);

impl ResolvesServerCert for ServerCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(self.0.server.lock().unwrap().clone())
    }
}
