//! mTLS with a pod certificate (Kubernetes 1.37, KEP-4317): the kubelet writes the pod's key
//! and certificate chain into a `podCertificate` projected volume and rotates them before
//! they expire; a cluster trust bundle (KEP-3257) in the same volume is the CA the clients
//! trust. The server trusts the signer's CA and refuses each certificate the moment its
//! successor is written (a revoking rotation: the worst case).
//!
//! - `https-client`: this crate's `tls::HttpsClient` on an `IdentityStore` of the volume's
//!   credential bundle and a `RootStore` of the trust bundle;
//! - `reqwest`: a reqwest-middleware client with `bearer_reload::reqwest::TlsMiddleware` on
//!   stores of the same files;
//! - `tonic`: tonic-health's `HealthClient` (`Check` calls) over
//!   `bearer_reload::tonic::TlsChannel` on stores of the same files;
//! - `rustls-config-once`: for comparison, what a user writes without the crate: a rustls
//!   `ClientConfig` made once from the files (`with_client_auth_cert`), under a hyper-util
//!   client.
//!
//! ```text
//! cargo run --release --example pod_certificate [-- --rotations 6 --lifetime-s 4 --layout bundle]
//! ```
//!
//! The kubelet's side, scaled down: each certificate lives `--lifetime-s` seconds, and its
//! successor is written at the signer's `beginRefreshAt` (half the lifetime) plus a jitter
//! of up to a twelfth of the lifetime (the kubelet's 5 minutes of a 1 h certificate), with
//! a new key each time, in the kubelet's `..data` swap: one `credentialbundle.pem` (PKCS#8
//! `PRIVATE KEY` first, then the chain, leaf first: `--layout bundle`) or `key.pem` beside
//! `chain.pem` (`--layout key-and-chain`). The chain is the leaf and the signer's
//! intermediate; the server trusts the cluster's root.
//!
//! Ends with one line per client: requests sent, failed, the time from each rotation to the
//! first request that arrived with the new certificate (p50, p99; `never` where none did),
//! and how many certificates the server saw from it.

// Its `Args` is the other rotation examples': this one has its own.
#[path = "common/rotation.rs"]
#[allow(dead_code)]
mod common;
#[path = "../tests/support/mtls.rs"]
mod mtls;
#[path = "../tests/support/pki.rs"]
mod pki;

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bearer_reload::reqwest::TlsMiddleware;
use bearer_reload::source::FileSource;
use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::tls::{HttpsClient, IdentityStore, RootStore};
use bearer_reload::tonic::TlsChannel;
use bytes::Bytes;
use clap::Parser;
use common::{Call, Counts, first_arrivals, percentile, spawn_callers};
use http::{HeaderName, HeaderValue};
use http_body_util::Empty;
use hyper_util::client::legacy::Client as HyperClient;
use hyper_util::client::legacy::connect::HttpConnector;
use mtls::MtlsServer;
use pki::{Ca, Issued};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::set_header::{SetRequestHeader, SetRequestHeaderLayer};

const CLIENTS: [&str; 4] = ["https-client", "reqwest", "tonic", "rustls-config-once"];

/// The header each client tags its requests with.
const X_CLIENT: HeaderName = HeaderName::from_static("x-client");

/// The volume's files.
const BUNDLE: &str = "credentialbundle.pem";
const KEY: &str = "key.pem";
const CHAIN: &str = "chain.pem";
const TRUST_BUNDLE: &str = "trust-bundle.pem";

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum Layout {
    /// One `credentialBundlePath` file: the key, then the chain.
    Bundle,
    /// `keyPath` and `certificateChainPath`.
    KeyAndChain,
}

#[derive(clap::Parser)]
struct Args {
    /// Rotations of the pod certificate.
    #[arg(long, default_value_t = 6)]
    rotations: usize,
    /// Concurrent requests per client.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Each certificate's lifetime, in seconds.
    #[arg(long, default_value_t = 4)]
    lifetime_s: u64,
    /// The volume's layout.
    #[arg(long, value_enum, default_value_t = Layout::Bundle)]
    layout: Layout,
}

/// tonic over `TlsChannel`, under the `x-client` header.
type TonicStack = SetRequestHeader<TlsChannel, HeaderValue>;

/// A hyper-util client over rustls with a config made once.
type Once = HyperClient<hyper_rustls::HttpsConnector<HttpConnector>, Empty<Bytes>>;

/// One of the clients.
#[derive(Clone)]
enum Client {
    Https(HttpsClient<Empty<Bytes>>, String),
    Reqwest(reqwest_middleware::ClientWithMiddleware, String),
    Tonic(HealthClient<TonicStack>),
    Once(Once, String),
}

impl Call for Client {
    async fn call(&mut self) -> bool {
        let request = |url: &str, name: &'static str| {
            http::Request::get(url)
                .header(X_CLIENT, name)
                .body(Empty::new())
                .expect("a request")
        };
        match self {
            Client::Https(client, url) => {
                match client.clone().oneshot(request(url, CLIENTS[0])).await {
                    Ok(response) => response.status().is_success(),
                    Err(_) => false,
                }
            }
            Client::Reqwest(client, url) => match client.get(url.as_str()).send().await {
                Ok(response) => response.status().is_success(),
                Err(_) => false,
            },
            Client::Tonic(client) => client.check(HealthCheckRequest::default()).await.is_ok(),
            Client::Once(client, url) => match client.request(request(url, CLIENTS[3])).await {
                Ok(response) => response.status().is_success(),
                Err(_) => false,
            },
        }
    }
}

/// The pod's volume: the kubelet's projected files, rewritten in one `..data` swap.
struct Volume {
    dir: ProjectedTokenDir,
    layout: Layout,
    trust_bundle: String,
}

impl Volume {
    /// Writes `issued` (and the trust bundle, unchanged) as the kubelet does; returns the
    /// instant of the swap.
    fn write(&self, issued: &Issued) -> std::io::Result<Instant> {
        let trust = (TRUST_BUNDLE, self.trust_bundle.as_bytes());
        match self.layout {
            Layout::Bundle => {
                let bundle = issued.credential_bundle();
                self.dir.rotate_files(&[(BUNDLE, bundle.as_bytes()), trust])
            }
            Layout::KeyAndChain => {
                let chain = issued.chain();
                self.dir.rotate_files(&[
                    (KEY, issued.key_pem.as_bytes()),
                    (CHAIN, chain.as_bytes()),
                    trust,
                ])
            }
        }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.dir().join(name)
    }

    /// The stores of the pod certificate and the trust bundle, as an application makes
    /// them: one identity store on either layout, the trust bundle as the `RootStore`.
    async fn stores(&self) -> Result<(IdentityStore, RootStore), Box<dyn std::error::Error>> {
        let identity = match self.layout {
            Layout::Bundle => IdentityStore::builder(FileSource::new(self.path(BUNDLE))),
            Layout::KeyAndChain => IdentityStore::files(self.path(CHAIN), self.path(KEY)),
        };
        let identity = identity.load().await?;
        let roots = RootStore::builder(FileSource::new(self.path(TRUST_BUNDLE)))
            .load()
            .await?;
        Ok((identity, roots))
    }

    /// What a user writes without the crate: the files read once into a rustls config.
    fn rustls_config_once(&self) -> Result<rustls::ClientConfig, Box<dyn std::error::Error>> {
        let (chain, key) = match self.layout {
            Layout::Bundle => (self.path(BUNDLE), self.path(BUNDLE)),
            Layout::KeyAndChain => (self.path(CHAIN), self.path(KEY)),
        };
        let chain = CertificateDer::pem_file_iter(&chain)?.collect::<Result<Vec<_>, _>>()?;
        let key = PrivateKeyDer::from_pem_file(&key)?;
        let mut roots = rustls::RootCertStore::empty();
        for ca in CertificateDer::pem_file_iter(self.path(TRUST_BUNDLE))? {
            roots.add(ca?)?;
        }
        Ok(rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(chain, key)?)
    }
}

/// A pod certificate from `signer`, valid for `lifetime` from now, on a new key.
fn issue(signer: &Ca, lifetime: Duration) -> Issued {
    let now = SystemTime::now();
    signer.client_valid(
        "default:app-0",
        now - Duration::from_secs(1),
        now + lifetime,
    )
}

/// When the kubelet starts the refresh of `issued` (made at `at`): the signer's
/// `beginRefreshAt` (half the lifetime), plus a jitter of up to a twelfth of the lifetime,
/// drawn from the certificate's fingerprint.
fn refresh_at(issued: &Issued, at: Instant, lifetime: Duration) -> Instant {
    let draw = u32::from(issued.cert_der.iter().fold(0u8, |a, b| a ^ b));
    at + lifetime / 2 + lifetime / 12 * draw / 255
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // The examples build rustls with ring and aws-lc-rs: reqwest (`rustls-no-provider`) and
    // rustls's own `ClientConfig::builder` take the process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    let lifetime = Duration::from_secs(args.lifetime_s.max(2));
    let tmp = tempfile::tempdir()?;
    let root = Ca::new("cluster root");
    let signer = root.intermediate("example.com/pod-signer");
    let server = MtlsServer::start(&root, &root.server()).await;
    let first_name = match args.layout {
        Layout::Bundle => BUNDLE,
        Layout::KeyAndChain => KEY,
    };
    let volume = Volume {
        dir: ProjectedTokenDir::create_named(tmp.path().join("pod-cert"), first_name, "")?,
        layout: args.layout,
        trust_bundle: root.pem(),
    };
    let mut issued = vec![issue(&signer, lifetime)];
    let mut issued_at = Instant::now();
    volume.write(&issued[0])?;

    let (identity, roots) = volume.stores().await?;
    let https = HttpsClient::new(roots).identity(identity);
    let (identity, roots) = volume.stores().await?;
    let tls = TlsMiddleware::new(roots)
        .identity(identity)
        .client_builder(|| {
            let headers =
                http::HeaderMap::from_iter([(X_CLIENT, HeaderValue::from_static(CLIENTS[1]))]);
            reqwest::Client::builder().default_headers(headers)
        });
    let reqwest = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
        .with(tls)
        .build();
    let (identity, roots) = volume.stores().await?;
    let stack = ServiceBuilder::new()
        .layer(SetRequestHeaderLayer::overriding(
            X_CLIENT,
            HeaderValue::from_static(CLIENTS[2]),
        ))
        .service(TlsChannel::new(server.url("").parse()?, roots)?.identity(identity));
    let connector = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(volume.rustls_config_once()?)
        .https_only()
        .enable_http1()
        .enable_http2()
        .build();
    let once = HyperClient::builder(hyper_util::rt::TokioExecutor::new()).build(connector);
    let clients = [
        Client::Https(https, server.url("/")),
        Client::Reqwest(reqwest, server.url("/")),
        Client::Tonic(HealthClient::new(stack)),
        Client::Once(once, server.url("/")),
    ];

    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[Counts; CLIENTS.len()]> = Arc::default();
    let workers = spawn_callers(&clients, args.workers, &stop, &counts);

    // The kubelet: each certificate refreshed at its `beginRefreshAt` plus jitter, and the
    // old one refused by the server the moment the new one is written.
    let mut rotated_at = Vec::new();
    for _ in 0..args.rotations {
        let at = refresh_at(issued.last().expect("one issued"), issued_at, lifetime);
        tokio::time::sleep_until(at.into()).await;
        let next = issue(&signer, lifetime);
        issued_at = Instant::now();
        rotated_at.push(volume.write(&next)?);
        server.refuse(&issued.last().expect("one issued").fingerprint());
        issued.push(next);
    }
    tokio::time::sleep(lifetime / 4).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await?;
    }

    report(&server, &issued, &rotated_at, &counts);
    Ok(())
}

/// One line per client.
fn report(
    server: &MtlsServer,
    issued: &[Issued],
    rotated_at: &[Instant],
    counts: &[Counts; CLIENTS.len()],
) {
    let arrivals = server.arrivals();
    for (k, name) in CLIENTS.iter().enumerate() {
        let latencies = first_arrivals(&arrivals, name, rotated_at, |r, a| {
            a.fingerprint == issued[r + 1].fingerprint()
        });
        let mut presented: Vec<&str> = arrivals
            .iter()
            .filter(|a| a.client.as_deref() == Some(*name))
            .map(|a| a.fingerprint.as_str())
            .collect();
        presented.sort_unstable();
        presented.dedup();
        println!(
            "pod-cert client={name} requests={} failed={} new_cert_p50_ms={} new_cert_p99_ms={} \
             rotations={} certificates_presented={}",
            counts[k].requests.load(Ordering::Relaxed),
            counts[k].failed.load(Ordering::Relaxed),
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
            rotated_at.len(),
            presented.len(),
        );
    }
}
