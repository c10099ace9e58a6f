//! A hyper-util client over TLS (hyper-rustls, ring) whose requests carry the token from a
//! file, through a rotation.
//!
//! Fully local: it starts an HTTPS server on 127.0.0.1 with a certificate made at start,
//! which accepts one token at a time, and writes the token file in a temporary directory.
//!
//! ```text
//! cargo run --example hyper_client
//! ```

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bearer_reload::source::FileSource;
use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use http::{Request, Response, StatusCode, header::AUTHORIZATION};
use http_body_util::{BodyExt, Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tower::{ServiceBuilder, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());

    // A CA and a server certificate for 127.0.0.1, made now.
    let ca_key = rcgen::KeyPair::generate()?;
    let mut ca_params = rcgen::CertificateParams::new(Vec::<String>::new())?;
    ca_params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
    let ca = ca_params.self_signed(&ca_key)?;
    let server_key = rcgen::KeyPair::generate()?;
    let server_cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])?.signed_by(
        &server_key,
        &ca,
        &ca_key,
    )?;

    // The server accepts exactly one token: the one in `accepted`.
    let accepted = Arc::new(Mutex::new("first-token".to_owned()));
    let server_config = rustls::ServerConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(
            vec![server_cert.der().clone()],
            PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(server_key.serialize_der())),
        )?;
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(server_config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
    let addr = listener.local_addr()?;
    tokio::spawn({
        let accepted = accepted.clone();
        async move {
            while let Ok((tcp, _)) = listener.accept().await {
                let (acceptor, accepted) = (acceptor.clone(), accepted.clone());
                tokio::spawn(async move {
                    let Ok(tls) = acceptor.accept(tcp).await else {
                        return;
                    };
                    let svc = hyper::service::service_fn(move |req: Request<_>| {
                        let ok = req.headers().get(AUTHORIZATION).is_some_and(|v| {
                            *v == format!("Bearer {}", accepted.lock().unwrap()).as_str()
                        });
                        let status = if ok {
                            StatusCode::OK
                        } else {
                            StatusCode::UNAUTHORIZED
                        };
                        let mut res =
                            Response::new(Full::new(Bytes::from(status.as_str().to_owned())));
                        *res.status_mut() = status;
                        async move { Ok::<_, Infallible>(res) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(tls), svc)
                        .await;
                });
            }
        }
    });

    // The client: hyper-rustls trusting our CA, wrapped in BearerLayer.
    let dir = tempfile::tempdir()?;
    let token_path = dir.path().join("token");
    std::fs::write(&token_path, "first-token\n")?;
    let store = TokenStore::builder(FileSource::new(&token_path))
        .load()
        .await?;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(ca.der().to_vec()))?;
    let tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_only()
        .enable_http1()
        .build();
    let client = ServiceBuilder::new()
        .layer(BearerLayer::new(store.clone()).retry_unauthorized())
        .service(Client::builder(TokioExecutor::new()).build::<_, Empty<Bytes>>(https));

    let url = format!("https://{addr}/");
    let send = |client: &_| {
        let client: &tower::util::BoxCloneService<_, _, _> = client;
        client
            .clone()
            .oneshot(Request::get(url.as_str()).body(Empty::new()).unwrap())
    };
    let client = tower::util::BoxCloneService::new(client);

    let res = send(&client).await?;
    println!(
        "request 1: {} with token {}",
        res.status(),
        store.current().fingerprint()
    );

    // Rotate: the server now takes only the new token, and the file is rewritten.
    let mut generations = store.subscribe();
    *accepted.lock().unwrap() = "second-token".to_owned();
    std::fs::write(&token_path, "second-token\n")?;
    tokio::time::timeout(Duration::from_secs(5), generations.changed()).await??;
    let res = send(&client).await?;
    let status = res.status();
    let body = res.into_body().collect().await?.to_bytes();
    println!(
        "request 2: {status} ({}) with token {} (generation {})",
        String::from_utf8_lossy(&body),
        store.current().fingerprint(),
        store.generation()
    );
    if status != StatusCode::OK {
        return Err("the rotated token was not used".into());
    }
    println!("hyper_client ok generation={}", store.generation());
    Ok(())
}
