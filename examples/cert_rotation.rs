//! A client certificate that rotates under load: four clients on the same files, against
//! the same HTTPS server, which refuses each old certificate the moment its successor is
//! written (a revoking rotation: the worst case, and what a CA that rotates on compromise
//! does).
//!
//! - `bearer-reload`: a `kube::Client` built on this crate's `bearer_reload::kube::Credentials`
//!   from a kubeconfig that names the files;
//! - `kube-builtin`: kube's own client, from the same kubeconfig;
//! - `reqwest`: a reqwest-middleware client with `bearer_reload::reqwest::TlsMiddleware` on an
//!   `IdentityStore::files` of the certificate and key and a `RootStore` of the CA file;
//! - `tonic`: tonic-health's `HealthClient` (`Check` calls) over `bearer_reload::tonic::TlsChannel`
//!   on stores of the same files.
//!
//! ```text
//! cargo run --release --example cert_rotation [-- --rotations 5 --workers 4]
//! ```
//!
//! Ends with one line per client: requests sent, failed, rotations, and the time from each
//! rotation to the first request that arrived with the new certificate (p50, p99; `never`
//! where none did). kube reads certificate files once, when its client is built.
//!
//! Fully local: a CA made with rcgen, the server on 127.0.0.1 (HTTP/1.1 and HTTP/2 by ALPN;
//! it answers gRPC health calls too), the files in a temp dir swapped the projected-volume
//! way (`..data`). Each client sends an `x-client` header, by which the server's records tell
//! them apart.

#[path = "../tests/support/mtls.rs"]
mod mtls;
#[path = "../tests/support/pki.rs"]
mod pki;
#[path = "common/rotation.rs"]
mod rotation;

use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use bearer_reload::kube::Credentials;
use bearer_reload::reqwest::TlsMiddleware;
use bearer_reload::source::FileSource;
use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::tls::{IdentityStore, RootStore};
use bearer_reload::tonic::TlsChannel;
use clap::Parser;
use http::{HeaderName, HeaderValue};
use kube::client::Body;
use mtls::MtlsServer;
use pki::{Ca, Issued};
use rotation::{Args, Call, Counts, first_arrivals, percentile, spawn_callers};
use serde_json::json;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::ServiceBuilder;
use tower_http::set_header::{SetRequestHeader, SetRequestHeaderLayer};

const CLIENTS: [&str; 4] = ["bearer-reload", "kube-builtin", "reqwest", "tonic"];

/// The header each client tags its requests with.
const X_CLIENT: HeaderName = HeaderName::from_static("x-client");

/// tonic over `TlsChannel`, under the `x-client` header.
type TonicStack = SetRequestHeader<TlsChannel, HeaderValue>;

/// One of the clients.
#[derive(Clone)]
enum Client {
    Kube(kube::Client),
    Reqwest(reqwest_middleware::ClientWithMiddleware, String),
    Tonic(HealthClient<TonicStack>),
}

impl Call for Client {
    async fn call(&mut self) -> bool {
        match self {
            Client::Kube(client) => {
                let request = http::Request::get("/")
                    .body(Body::empty())
                    .expect("a request");
                match client.send(request).await {
                    Ok(response) => response.status().is_success(),
                    Err(_) => false,
                }
            }
            Client::Reqwest(client, url) => match client.get(url.as_str()).send().await {
                Ok(response) => response.status().is_success(),
                Err(_) => false,
            },
            Client::Tonic(client) => client.check(HealthCheckRequest::default()).await.is_ok(),
        }
    }
}

/// This crate's stores of the certificate and key files and the CA file, as an application
/// that reads them itself makes them.
async fn stores(
    dir: &Path,
    ca: &Path,
) -> Result<(IdentityStore, RootStore), Box<dyn std::error::Error>> {
    let identity = IdentityStore::files(dir.join("tls.crt"), dir.join("tls.key"))
        .load()
        .await?;
    let roots = RootStore::builder(FileSource::new(ca)).load().await?;
    Ok((identity, roots))
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The examples build rustls with ring and aws-lc-rs: reqwest (`rustls-no-provider`)
    // takes the process default, and panics without one.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let ca_path = tmp.path().join("ca.crt");
    std::fs::write(&ca_path, ca.pem())?;
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused")?;
    let write = |issued: &Issued| {
        volume.rotate_files(&[
            ("tls.crt", issued.cert_pem.as_bytes()),
            ("tls.key", issued.key_pem.as_bytes()),
        ])
    };
    let mut issued = vec![ca.client("jane", Duration::from_secs(3600))];
    write(&issued[0])?;
    let kubeconfig = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": {
            "server": server.url(""),
            "certificate-authority": ca_path,
        }}],
        "users": [{"name": "jane", "user": {
            "client-certificate": volume.dir().join("tls.crt"),
            "client-key": volume.dir().join("tls.key"),
        }}],
        "contexts": [{"name": "local", "context": {"cluster": "local", "user": "jane"}}],
        "current-context": "local",
    });
    let path = tmp.path().join("kubeconfig");
    std::fs::write(&path, kubeconfig.to_string())?;
    // `Credentials::infer_config()` with KUBECONFIG pointing here: kube's config, and the
    // CA file as `root_cert_file` (kube keeps only its bytes).
    let kubeconfig = kube::config::Kubeconfig::read_from(&path)?;
    let mut config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default()).await?;
    config.root_cert_file = Some(ca_path.clone());

    let tagged = |name: &str| {
        let mut config = config.clone();
        let mut value = HeaderValue::from_str(name).expect("a header value");
        value.set_sensitive(true);
        config.headers.push((X_CLIENT, value));
        config
    };
    let ours = tagged(CLIENTS[0]);
    // reqwest: each generation's `reqwest::Client` from this builder, with the header.
    let (identity, roots) = stores(volume.dir(), &ca_path).await?;
    let tls = TlsMiddleware::new(roots)
        .identity(identity)
        .client_builder(|| {
            let headers =
                http::HeaderMap::from_iter([(X_CLIENT, HeaderValue::from_static("reqwest"))]);
            reqwest::Client::builder().default_headers(headers)
        });
    let reqwest = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(tls)
        .build();
    // tonic: `TlsChannel` under the header.
    let (identity, roots) = stores(volume.dir(), &ca_path).await?;
    let origin = server.url("").parse()?;
    let stack = ServiceBuilder::new()
        .layer(SetRequestHeaderLayer::overriding(
            X_CLIENT,
            HeaderValue::from_static("tonic"),
        ))
        .service(TlsChannel::new(origin, roots)?.identity(identity));
    let clients = [
        Client::Kube(Credentials::load(&ours).await?.client(ours)?),
        Client::Kube(kube::Client::try_from(tagged(CLIENTS[1]))?),
        Client::Reqwest(reqwest, server.url("/")),
        Client::Tonic(HealthClient::new(stack)),
    ];

    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[Counts; CLIENTS.len()]> = Arc::default();
    let workers = spawn_callers(&clients, args.workers, &stop, &counts);

    let mut rotated_at = Vec::new();
    for _ in 0..args.rotations {
        tokio::time::sleep(Duration::from_millis(args.every_ms)).await;
        let next = ca.client("jane", Duration::from_secs(3600));
        write(&next)?;
        rotated_at.push(Instant::now());
        server.refuse(&issued.last().expect("one issued").fingerprint());
        issued.push(next);
    }
    tokio::time::sleep(Duration::from_millis(args.every_ms)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await?;
    }

    let arrivals = server.arrivals();
    for (k, name) in CLIENTS.iter().enumerate() {
        let latencies = first_arrivals(&arrivals, name, &rotated_at, |r, a| {
            a.fingerprint == issued[r + 1].fingerprint()
        });
        println!(
            "cert client={name} requests={} failed={} rotations={} new_identity_p50_ms={} new_identity_p99_ms={}",
            counts[k].requests.load(Ordering::Relaxed),
            counts[k].failed.load(Ordering::Relaxed),
            rotated_at.len(),
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
        );
    }
    Ok(())
}
