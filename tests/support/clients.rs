//! The client kinds the conformance suite runs its scenarios against, each with its own
//! real server: a hyper-util client under `BearerLayer` (HTTP/1), a reqwest-middleware
//! client with `BearerMiddleware` (HTTPS), and a tonic `Channel` under `BearerLayer` with
//! the gRPC classifier and the retry, its bodies made replayable by tower-http's
//! `MapRequestBody` on either side (gRPC over TLS). All three send the 401 (or
//! `UNAUTHENTICATED`) retry.
//!
//! Included with `#[path = "support/clients.rs"] mod clients;` next to `mod support;` and
//! `mod grpc;`, like `grpc.rs`.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::time::Duration;

use bearer_reload::body::ReplayBody;
use bearer_reload::classify::{GrpcUnauthenticated, Http401};
use bearer_reload::layer::RetryUnauthorized;
use bearer_reload::reqwest::BearerMiddleware;
use bearer_reload::{BearerLayer, BearerService, TokenStore};
use bytes::Bytes;
use futures_util::FutureExt;
use http::{Request, StatusCode};
use http_body::Frame;
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use tonic::transport::{Certificate, Channel, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::{Layer, ServiceBuilder, ServiceExt};
use tower_http::map_request_body::{MapRequestBody, MapRequestBodyLayer};

use super::grpc::GrpcServer;
use crate::support::server::{AuthServer, http1_client};
use crate::support::tls::TestCa;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Bigger than the replay limit (64 KiB), sent 1 KiB at a time.
pub const UNREPLAYABLE_BYTES: usize = 100 * 1024;

/// What a scenario asks a client to send.
#[derive(Clone, Copy, Debug)]
pub enum Call<'a> {
    /// A request with a small body that can be copied.
    Plain,
    /// A request that carries its own `Authorization: Bearer <token>`.
    OwnToken(&'a str),
    /// A request whose body cannot be sent again: streamed, and past the replay limit.
    Unreplayable,
}

/// How a call ended, as the caller sees it.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    Ok,
    /// HTTP 401, or gRPC `UNAUTHENTICATED`.
    Refused,
    Failed(String),
}

/// What the scenarios need of a server.
pub trait Gate: Send + Sync + 'static {
    fn accept_only(&self, token: &str);
    fn accept_also(&self, token: &str);
    /// Every bearer token seen, in order.
    fn seen(&self) -> Vec<String>;
    /// Requests received, accepted or not.
    fn requests(&self) -> u64;
    fn wait_requests(&self, n: u64, deadline: Duration) -> impl Future<Output = ()> + Send;
}

impl Gate for AuthServer {
    fn accept_only(&self, token: &str) {
        AuthServer::accept_only(self, token)
    }
    fn accept_also(&self, token: &str) {
        AuthServer::accept_also(self, token)
    }
    fn seen(&self) -> Vec<String> {
        AuthServer::seen(self)
    }
    fn requests(&self) -> u64 {
        AuthServer::requests(self)
    }
    fn wait_requests(&self, n: u64, deadline: Duration) -> impl Future<Output = ()> + Send {
        AuthServer::wait_requests(self, n, deadline)
    }
}

impl Gate for GrpcServer {
    fn accept_only(&self, token: &str) {
        GrpcServer::accept_only(self, token)
    }
    fn accept_also(&self, token: &str) {
        GrpcServer::accept_also(self, token)
    }
    fn seen(&self) -> Vec<String> {
        GrpcServer::seen(self)
    }
    fn requests(&self) -> u64 {
        GrpcServer::requests(self)
    }
    fn wait_requests(&self, n: u64, deadline: Duration) -> impl Future<Output = ()> + Send {
        GrpcServer::wait_requests(self, n, deadline)
    }
}

/// A server and the CA its clients trust.
pub struct Secured<S> {
    pub server: S,
    pub ca: TestCa,
}

impl<S> Deref for Secured<S> {
    type Target = S;
    fn deref(&self) -> &S {
        &self.server
    }
}

impl<S: Gate> Gate for Secured<S> {
    fn accept_only(&self, token: &str) {
        self.server.accept_only(token)
    }
    fn accept_also(&self, token: &str) {
        self.server.accept_also(token)
    }
    fn seen(&self) -> Vec<String> {
        self.server.seen()
    }
    fn requests(&self) -> u64 {
        self.server.requests()
    }
    fn wait_requests(&self, n: u64, deadline: Duration) -> impl Future<Output = ()> + Send {
        self.server.wait_requests(n, deadline)
    }
}

/// A client of one kind, on a store, with the retry on, and the server it talks to.
pub trait ClientKind: Clone + Send + Sync + 'static {
    /// The kind's name in the suite's output.
    const NAME: &'static str;
    type Server: Gate;

    /// Starts a server of this kind that accepts `accept`.
    fn start(accept: &str) -> impl Future<Output = Self::Server> + Send;

    /// A client of `server` whose requests carry `store`'s token, with the 401 retry.
    fn connect(store: &TokenStore, server: &Self::Server) -> impl Future<Output = Self> + Send;

    /// Sends one request and says how it ended.
    fn call(&self, call: Call<'_>) -> impl Future<Output = Outcome> + Send;
}

/// A streamed body of [`UNREPLAYABLE_BYTES`], 1 KiB a chunk.
fn big_stream() -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static
{
    futures_util::stream::iter(
        (0..UNREPLAYABLE_BYTES / 1024).map(|_| Ok(Bytes::from(vec![b'x'; 1024]))),
    )
}

/// A body type that cannot be copied.
pub type Opaque = UnsyncBoxBody<Bytes, BoxError>;

fn opaque<B>(body: B) -> Opaque
where
    B: http_body::Body<Data = Bytes> + Send + 'static,
    B::Error: Into<BoxError>,
{
    body.map_err(Into::into).boxed_unsync()
}

fn status_outcome(status: StatusCode) -> Outcome {
    match status {
        StatusCode::OK => Outcome::Ok,
        StatusCode::UNAUTHORIZED => Outcome::Refused,
        other => Outcome::Failed(format!("status {other}")),
    }
}

/// tower over hyper-util: `BearerLayer` with the retry, bodies wrapped in `ReplayBody`.
#[derive(Clone)]
pub struct HyperUtil {
    client: BearerService<Client<HttpConnector, ReplayBody<Opaque>>, Http401, RetryUnauthorized>,
    url: String,
}

impl ClientKind for HyperUtil {
    const NAME: &'static str = "hyper-util";
    type Server = AuthServer;

    async fn start(accept: &str) -> AuthServer {
        AuthServer::start(accept).await
    }

    async fn connect(store: &TokenStore, server: &AuthServer) -> Self {
        let client = BearerLayer::new(store.clone())
            .retry_unauthorized()
            .layer(http1_client());
        Self {
            client,
            url: server.url("/"),
        }
    }

    async fn call(&self, call: Call<'_>) -> Outcome {
        let body = match call {
            Call::Plain | Call::OwnToken(_) => opaque(Full::new(Bytes::from_static(b"payload"))),
            Call::Unreplayable => opaque(StreamBody::new(futures_util::StreamExt::map(
                big_stream(),
                |c| c.map(Frame::data),
            ))),
        };
        let mut req = Request::post(self.url.as_str())
            .body(ReplayBody::new(body))
            .unwrap();
        if let Call::OwnToken(token) = call {
            let value = format!("Bearer {token}").parse().unwrap();
            req.headers_mut().insert(http::header::AUTHORIZATION, value);
        }
        // Boxed with its type spelled out: rustc cannot otherwise prove this future `Send`
        // for every lifetime of the boxed error type (a known limitation).
        let exchange: Pin<Box<dyn Future<Output = Outcome> + Send>> =
            Box::pin(self.client.clone().oneshot(req).then(|result| async move {
                match result {
                    Ok(res) => {
                        let status = res.status();
                        // Read to the end, so that the connection is reused.
                        match res.into_body().collect().await {
                            Ok(_) => status_outcome(status),
                            Err(e) => Outcome::Failed(format!("response body: {e}")),
                        }
                    }
                    Err(e) => Outcome::Failed(format!("request: {e}")),
                }
            }));
        exchange.await
    }
}

/// reqwest-middleware over HTTPS (rustls, ring): `BearerMiddleware` with the retry.
#[derive(Clone)]
pub struct Reqwest {
    client: reqwest_middleware::ClientWithMiddleware,
    url: String,
}

pub use crate::support::tls::install_ring;

impl ClientKind for Reqwest {
    const NAME: &'static str = "reqwest";
    type Server = Secured<AuthServer>;

    async fn start(accept: &str) -> Secured<AuthServer> {
        let ca = TestCa::new();
        let server = AuthServer::start_tls(accept, ca.acceptor()).await;
        Secured { server, ca }
    }

    async fn connect(store: &TokenStore, server: &Secured<AuthServer>) -> Self {
        install_ring();
        let client = reqwest::Client::builder()
            .tls_backend_preconfigured(server.ca.client_config())
            .build()
            .unwrap();
        let client = reqwest_middleware::ClientBuilder::new(client)
            .with(BearerMiddleware::new(store.clone()).retry_unauthorized())
            .build();
        Self {
            client,
            url: server.url("/"),
        }
    }

    async fn call(&self, call: Call<'_>) -> Outcome {
        let req = self.client.post(self.url.as_str());
        let req = match call {
            Call::Plain => req.body("payload"),
            Call::OwnToken(token) => req.bearer_auth(token).body("payload"),
            Call::Unreplayable => req.body(reqwest::Body::wrap_stream(big_stream())),
        };
        match req.send().await {
            Ok(res) => {
                let status = res.status();
                match res.bytes().await {
                    Ok(_) => status_outcome(status),
                    Err(e) => Outcome::Failed(format!("response body: {e}")),
                }
            }
            Err(e) => Outcome::Failed(format!("request: {e:?}")),
        }
    }
}

/// The functions that wrap tonic's bodies in `ReplayBody`, and back.
type ToReplay = fn(tonic::body::Body) -> ReplayBody<tonic::body::Body>;
type ToTonic = fn(ReplayBody<tonic::body::Body>) -> tonic::body::Body;

/// The tonic client stack: bodies made replayable above `BearerLayer` with the gRPC
/// retry, and turned back into tonic's below it.
pub type TonicStack = MapRequestBody<
    BearerService<MapRequestBody<Channel, ToTonic>, GrpcUnauthenticated, RetryUnauthorized>,
    ToReplay,
>;

/// tonic over TLS: a `Channel` under `BearerLayer` with the gRPC classifier and the retry,
/// its bodies made replayable on either side; tonic-health's generated client.
#[derive(Clone)]
pub struct Tonic {
    pub client: HealthClient<TonicStack>,
}

impl Tonic {
    /// The stack over a channel.
    pub fn stack(store: &TokenStore, channel: Channel) -> TonicStack {
        ServiceBuilder::new()
            .layer(MapRequestBodyLayer::new(ReplayBody::new as ToReplay))
            .layer(
                BearerLayer::new(store.clone())
                    .classifier(GrpcUnauthenticated)
                    .retry_unauthorized(),
            )
            .layer(MapRequestBodyLayer::new(tonic::body::Body::new as ToTonic))
            .service(channel)
    }
}

impl ClientKind for Tonic {
    const NAME: &'static str = "tonic";
    type Server = Secured<GrpcServer>;

    async fn start(accept: &str) -> Secured<GrpcServer> {
        let ca = TestCa::new();
        let server = GrpcServer::start(accept, &ca).await;
        Secured { server, ca }
    }

    async fn connect(store: &TokenStore, server: &Secured<GrpcServer>) -> Self {
        let tls = ClientTlsConfig::new().ca_certificate(Certificate::from_pem(server.ca.ca_pem()));
        let channel = Endpoint::from_shared(server.url())
            .unwrap()
            .tls_config(tls)
            .unwrap()
            .connect()
            .await
            .unwrap();
        Self {
            client: HealthClient::new(Self::stack(store, channel)),
        }
    }

    async fn call(&self, call: Call<'_>) -> Outcome {
        let service = match call {
            Call::Unreplayable => "x".repeat(UNREPLAYABLE_BYTES),
            _ => String::new(),
        };
        let mut req = tonic::Request::new(HealthCheckRequest { service });
        if let Call::OwnToken(token) = call {
            let value = format!("Bearer {token}").parse().unwrap();
            req.metadata_mut().insert("authorization", value);
        }
        grpc_outcome(self.client.clone().check(req).await.map(|_| ()))
    }
}

/// How a gRPC call ended.
pub fn grpc_outcome(result: Result<(), tonic::Status>) -> Outcome {
    match result {
        Ok(()) => Outcome::Ok,
        Err(status) if status.code() == tonic::Code::Unauthenticated => Outcome::Refused,
        Err(status) => Outcome::Failed(format!("{status:?}")),
    }
}
