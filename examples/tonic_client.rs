//! A tonic client (tonic-health's generated `HealthClient`) over a TLS `Channel`, whose calls
//! carry the token from a file, through a rotation that the gRPC server enforces at once.
//!
//! The stack: `BearerLayer` with the gRPC classifier and the retry, which reloads the token
//! and sends a call again when the server answers `UNAUTHENTICATED`, between two of
//! tower-http's `MapRequestBodyLayer`s, which make tonic's request bodies replayable
//! (`ReplayBody`) and turn them back into tonic's. Unary and server-streaming calls both go
//! through it.
//!
//! Fully local: it starts a tonic server on 127.0.0.1 (TLS with a certificate made at
//! start, ring) whose interceptor accepts one token at a time.
//!
//! ```text
//! cargo run --example tonic_client
//! ```

#[path = "../tests/support/tls.rs"]
mod tls;

use std::sync::{Arc, Mutex};

use bearer_reload::body::ReplayBody;
use bearer_reload::classify::GrpcUnauthenticated;
use bearer_reload::source::FileSource;
use bearer_reload::{BearerLayer, TokenStore};
use tonic::service::interceptor::InterceptedService;
use tonic::transport::server::TcpIncoming;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Identity, Server, ServerTlsConfig};
use tonic::{Code, Status};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::ServiceBuilder;
use tower_http::map_request_body::MapRequestBodyLayer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // The server: the health service behind an interceptor that accepts one token.
    let ca = tls::TestCa::new();
    let accepted = Arc::new(Mutex::new("first-token".to_owned()));
    let interceptor = {
        let accepted = accepted.clone();
        move |req: tonic::Request<()>| {
            let expected = format!("Bearer {}", accepted.lock().unwrap());
            match req.metadata().get("authorization") {
                Some(v) if v.to_str().ok() == Some(expected.as_str()) => Ok(req),
                _ => Err(Status::unauthenticated("invalid bearer token")),
            }
        }
    };
    let (_reporter, health) = tonic_health::server::health_reporter();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let url = format!("https://{}", listener.local_addr()?);
    let router = Server::builder()
        .tls_config(
            ServerTlsConfig::new().identity(Identity::from_pem(ca.cert_pem(), ca.key_pem())),
        )?
        .add_service(InterceptedService::new(health, interceptor));
    tokio::spawn(router.serve_with_incoming(TcpIncoming::from(listener)));

    // The token file and its store.
    let dir = tempfile::tempdir()?;
    let path = dir.path().join("token");
    std::fs::write(&path, "first-token\n")?;
    let store = TokenStore::builder(FileSource::new(&path)).load().await?;

    // The client: a TLS channel under the layers.
    let channel = Endpoint::from_shared(url)?
        .tls_config(ClientTlsConfig::new().ca_certificate(Certificate::from_pem(ca.ca_pem())))?
        .connect()
        .await?;
    // Bodies made replayable above the layer and turned back into tonic's below it, so
    // that a refused call can be sent again.
    let service = ServiceBuilder::new()
        .layer(MapRequestBodyLayer::new(ReplayBody::new))
        .layer(
            BearerLayer::new(store.clone())
                .classifier(GrpcUnauthenticated)
                .retry_unauthorized(),
        )
        .layer(MapRequestBodyLayer::new(tonic::body::Body::new))
        .service(channel);
    let mut client = HealthClient::new(service);

    let res = client.check(HealthCheckRequest::default()).await?;
    println!(
        "check 1: {:?} with token {}",
        res.into_inner().status(),
        store.current().fingerprint()
    );

    // Rotate: the server takes only the new token from now on, and the file is rewritten.
    // The next call may leave before the watcher installed the new token: it is then
    // refused with UNAUTHENTICATED, the token is reloaded, and the call is sent again.
    *accepted.lock().unwrap() = "second-token".to_owned();
    std::fs::write(&path, "second-token\n")?;
    let res = client.check(HealthCheckRequest::default()).await?;
    println!(
        "check 2: {:?} with token {} (generation {})",
        res.into_inner().status(),
        store.current().fingerprint(),
        store.generation()
    );

    // A server-streaming call, after one more rotation.
    *accepted.lock().unwrap() = "third-token".to_owned();
    std::fs::write(&path, "third-token\n")?;
    let mut stream = client
        .watch(HealthCheckRequest::default())
        .await?
        .into_inner();
    let first = stream.message().await?.ok_or("the stream ended at once")?;
    println!(
        "watch: {:?} with token {} (generation {})",
        first.status(),
        store.current().fingerprint(),
        store.generation()
    );

    // A call with a token nobody will accept: the refusal reaches the caller.
    *accepted.lock().unwrap() = "someone-else".to_owned();
    let refused = client.check(HealthCheckRequest::default()).await;
    assert_eq!(
        refused.map_err(|s| s.code()).err(),
        Some(Code::Unauthenticated)
    );

    let status = store.status();
    println!(
        "tonic_client ok generation={} refused={} retried={}",
        status.generation, status.unauthorized, status.retries
    );
    Ok(())
}
