//! The TLS matrix (features `tonic` and `kube`): every client kind × every credential ×
//! every scenario, against one HTTPS server ([`MtlsServer`]) that requires client
//! certificates, checks bearer tokens, answers gRPC health calls, and records which
//! certificate and connection each request came on.
//!
//! - Clients: hyper-util through `HttpsClient` (with `BearerLayer`), reqwest through
//!   `BearerMiddleware` and `TlsMiddleware`, tonic (unary and server-streaming calls of
//!   tonic-health's `HealthClient`) through `tonic::TlsChannel` (with `BearerLayer` and the
//!   gRPC classifier), and kube (`Credentials` with all three stores).
//! - Credentials: the bearer token, the client certificate (`tls.crt` and `tls.key`), a pod
//!   certificate (Kubernetes 1.37's `podCertificate` source: one `credentialbundle.pem`,
//!   the key then the chain, leaf first, from a signer's intermediate), the CA bundle that
//!   verifies the server (`ca.crt`), and a cluster trust bundle (`clusterTrustBundle`
//!   source: the same authorities in another order); each a file of one projected volume,
//!   rotated the kubelet's way.
//! - Scenarios: (1) the credential rotated three times under load, the old one refused the
//!   moment the new one is written; (2) the same with the stores' watcher and timer off,
//!   so that only the refusal tells; (3) the CA bundle moving to a new authority in three
//!   steps (both, the server moves, the new one alone) while the credential rotates too.
//!
//! Every cell must pass with 0 failed requests, and for the certificate and the bundle no
//! request that started 1 s or more after a rotation went out on a connection made before
//! it. Each cell prints `matrix client=<c> credential=<k> scenario=<s> requests=<n>
//! failed=<f> old_connections=<o>`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bearer_reload::body::ReplayBody;
use bearer_reload::classify::GrpcUnauthenticated;
use bearer_reload::kube::Credentials;
use bearer_reload::layer::{BearerService, RetryUnauthorized};
use bearer_reload::reqwest::{BearerMiddleware, TlsMiddleware};
use bearer_reload::source::FileSource;
use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::tls::{HttpsClient, IdentityStore, RootStore};
use bearer_reload::tonic::TlsChannel;
use bearer_reload::{BearerLayer, StoreBuilder, TokenStore};
use bytes::Bytes;
use http_body_util::Full;
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::{ServiceBuilder, ServiceExt};
use tower_http::map_request_body::{MapRequestBody, MapRequestBodyLayer};

use crate::support::mtls::MtlsServer;
use crate::support::pki::{Ca, Issued};

const HOUR: Duration = Duration::from_secs(3600);
const DEADLINE: Duration = Duration::from_secs(10);
/// Scenario 1: rotations, the load's requests between two of them, and how long the load
/// goes on after the last (past the 1 s after which no request may use an old connection).
const ROTATIONS: usize = 3;
const BETWEEN: u64 = 100;
const AFTER_LAST: Duration = Duration::from_millis(1500);
const WORKERS: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    HyperUtil,
    Reqwest,
    TonicUnary,
    TonicStreaming,
    Kube,
}

impl Kind {
    fn name(self) -> &'static str {
        match self {
            Kind::HyperUtil => "hyper-util",
            Kind::Reqwest => "reqwest",
            Kind::TonicUnary => "tonic-unary",
            Kind::TonicStreaming => "tonic-streaming",
            Kind::Kube => "kube",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Credential {
    Token,
    Certificate,
    PodCertificate,
    Bundle,
    ClusterTrustBundle,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Scenario {
    UnderLoad,
    WatcherAndTimerOff,
    NewAuthority,
}

impl Scenario {
    fn name(self) -> &'static str {
        match self {
            Scenario::UnderLoad => "rotation-under-load",
            Scenario::WatcherAndTimerOff => "refusal-watcher-timer-off",
            Scenario::NewAuthority => "bundle-to-new-ca",
        }
    }
}

/// The credentials' files: one projected volume, written whole at each change.
struct Files {
    volume: ProjectedTokenDir,
    token: String,
    identity: Issued,
    /// The pod certificate.
    pod: Issued,
    bundle: String,
}

impl Files {
    fn write(&self) {
        let (pod, trust) = (self.pod.credential_bundle(), reversed(&self.bundle));
        self.volume
            .rotate_files(&[
                ("token", self.token.as_bytes()),
                ("tls.crt", self.identity.cert_pem.as_bytes()),
                ("tls.key", self.identity.key_pem.as_bytes()),
                ("credentialbundle.pem", pod.as_bytes()),
                ("ca.crt", self.bundle.as_bytes()),
                ("trust-bundle.pem", trust.as_bytes()),
            ])
            .unwrap();
    }
}

/// The certificates of `pem` in the reverse order: a cluster trust bundle's file holds the
/// same authorities as the CA bundle, in an order of its own.
fn reversed(pem: &str) -> String {
    const END: &str = "-----END CERTIFICATE-----\n";
    let mut certs: Vec<&str> = pem.split_inclusive(END).collect();
    certs.reverse();
    certs.concat()
}

/// One cell's world: the server, the authorities, the files and the stores.
struct Cell {
    _dir: tempfile::TempDir,
    server: MtlsServer,
    /// Issues the client certificates the server trusts (never rotated).
    clients_ca: Ca,
    /// The pod certificates' signer: an intermediate of `clients_ca`.
    pod_signer: Ca,
    /// The authority of the server's certificate, and of the bundle.
    server_ca: Ca,
    files: Files,
    token: TokenStore,
    identity: IdentityStore,
    roots: RootStore,
    rotations: u64,
}

impl Cell {
    async fn new(credential: Credential, scenario: Scenario) -> Cell {
        crate::support::tls::install_ring();
        let dir = tempfile::tempdir().unwrap();
        let clients_ca = Ca::new("clients");
        let pod_signer = clients_ca.intermediate("example.com/pod-signer");
        let server_ca = Ca::new("server 0");
        let server = MtlsServer::start(&clients_ca, &server_ca.server()).await;
        let token = "token-0".to_owned();
        server.accept_tokens(&[&token]);
        let volume =
            ProjectedTokenDir::create_named(dir.path().join("creds"), "token", "").unwrap();
        let files = Files {
            volume,
            token,
            identity: clients_ca.client("matrix", HOUR),
            pod: pod_signer.client("pod", HOUR),
            bundle: server_ca.pem(),
        };
        files.write();
        let d = files.volume.dir().to_owned();
        let quiet = scenario == Scenario::WatcherAndTimerOff;
        let token = options(TokenStore::builder(FileSource::new(d.join("token"))), quiet);
        // The pod certificate's cells present it, the others the pair of files; the cluster
        // trust bundle's cells trust it, the others the CA bundle.
        let identity = match credential {
            Credential::PodCertificate => {
                IdentityStore::builder(FileSource::new(d.join("credentialbundle.pem")))
            }
            _ => IdentityStore::files(d.join("tls.crt"), d.join("tls.key")),
        };
        let identity = options(identity, quiet);
        let roots = match credential {
            Credential::ClusterTrustBundle => d.join("trust-bundle.pem"),
            _ => d.join("ca.crt"),
        };
        let roots = options(RootStore::builder(FileSource::new(roots)), quiet);
        Cell {
            _dir: dir,
            server,
            clients_ca,
            pod_signer,
            server_ca,
            files,
            token: token.load().await.unwrap(),
            identity: identity.load().await.unwrap(),
            roots: roots.load().await.unwrap(),
            rotations: 0,
        }
    }

    /// Rotates `credential` and has the server refuse the old one at once.
    fn rotate(&mut self, credential: Credential) {
        self.rotations += 1;
        let n = self.rotations;
        match credential {
            Credential::Token => {
                let (old, new) = (self.files.token.clone(), format!("token-{n}"));
                // Valid before it is written; the old one refused the moment it is.
                self.server.accept_tokens(&[&old, &new]);
                self.files.token = new.clone();
                self.files.write();
                self.server.accept_tokens(&[&new]);
            }
            Credential::Certificate => {
                let old = self.files.identity.fingerprint();
                self.files.identity = self.clients_ca.client("matrix", HOUR);
                self.files.write();
                self.server.refuse(&old);
            }
            Credential::PodCertificate => {
                let old = self.files.pod.fingerprint();
                self.files.pod = self.pod_signer.client("pod", HOUR);
                self.files.write();
                self.server.refuse(&old);
            }
            Credential::Bundle | Credential::ClusterTrustBundle => {
                // The server moves to a new authority the moment the bundle names it,
                // beside the one it leaves (a bundle that named only the new one would
                // refuse the server until it moved): a client with the old bundle cannot
                // verify the server any more. The authority before is dropped.
                let next = Ca::new(&format!("server {n}"));
                self.files.bundle = format!("{}{}", next.pem(), self.server_ca.pem());
                self.files.write();
                self.server.serve_with(&next.server());
                self.server_ca = next;
            }
        }
    }
}

impl Cell {
    /// The generation of `credential`'s store, as a closure to poll.
    fn generation(&self, credential: Credential) -> impl Fn() -> u64 + use<> {
        let (token, identity, roots) = (
            self.token.clone(),
            self.identity.clone(),
            self.roots.clone(),
        );
        move || match credential {
            Credential::Token => token.generation(),
            Credential::Certificate | Credential::PodCertificate => identity.generation(),
            Credential::Bundle | Credential::ClusterTrustBundle => roots.generation(),
        }
    }
}

/// The builder with the watcher and the timer off when `quiet`.
fn options<S>(builder: StoreBuilder<S>, quiet: bool) -> StoreBuilder<S> {
    if quiet {
        builder.no_watch().no_periodic_refresh()
    } else {
        builder
    }
}

type Hyper =
    BearerService<HttpsClient<Full<Bytes>>, bearer_reload::classify::Http401, RetryUnauthorized>;

type ToReplay = fn(tonic::body::Body) -> ReplayBody<tonic::body::Body>;

/// tonic over `TlsChannel`: bodies made replayable for the token's retry, the token with
/// the gRPC classifier.
type TonicStack = MapRequestBody<
    BearerService<
        TlsChannel<ReplayBody<tonic::body::Body>>,
        GrpcUnauthenticated,
        RetryUnauthorized,
    >,
    ToReplay,
>;

/// A client of one kind, built on a cell's stores.
#[derive(Clone)]
enum Client {
    Hyper(Hyper, String),
    Reqwest(reqwest_middleware::ClientWithMiddleware, String),
    Tonic(HealthClient<TonicStack>, bool),
    Kube(kube::Client),
}

impl Client {
    fn new(kind: Kind, cell: &Cell) -> Client {
        let url = cell.server.url("/matrix");
        match kind {
            Kind::HyperUtil => {
                let https = HttpsClient::new(cell.roots.clone()).identity(cell.identity.clone());
                let service = ServiceBuilder::new()
                    .layer(BearerLayer::new(cell.token.clone()).retry_unauthorized())
                    .service(https);
                Client::Hyper(service, url)
            }
            Kind::Reqwest => {
                let client = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                    .with(BearerMiddleware::new(cell.token.clone()).retry_unauthorized())
                    .with(TlsMiddleware::new(cell.roots.clone()).identity(cell.identity.clone()))
                    .build();
                Client::Reqwest(client, url)
            }
            Kind::TonicUnary | Kind::TonicStreaming => {
                let origin = cell.server.url("").parse().unwrap();
                let channel = TlsChannel::new(origin, cell.roots.clone())
                    .unwrap()
                    .identity(cell.identity.clone());
                let stack = ServiceBuilder::new()
                    .layer(MapRequestBodyLayer::new(ReplayBody::new as ToReplay))
                    .layer(
                        BearerLayer::new(cell.token.clone())
                            .classifier(GrpcUnauthenticated)
                            .retry_unauthorized(),
                    )
                    .service(channel);
                Client::Tonic(HealthClient::new(stack), kind == Kind::TonicStreaming)
            }
            Kind::Kube => {
                let config = kube::Config::new(cell.server.url("").parse().unwrap());
                let client = Credentials::default()
                    .token(cell.token.clone())
                    .identity(cell.identity.clone())
                    .roots(cell.roots.clone())
                    .client(config)
                    .unwrap();
                Client::Kube(client)
            }
        }
    }

    /// One request (or call): `Err` with what went wrong unless it succeeded.
    async fn call(&self) -> Result<(), String> {
        match self {
            Client::Hyper(service, url) => {
                let request = http::Request::get(url.as_str())
                    .body(Full::new(Bytes::new()))
                    .unwrap();
                let response = service
                    .clone()
                    .oneshot(request)
                    .await
                    .map_err(|e| e.to_string())?;
                status(response.status())
            }
            Client::Reqwest(client, url) => {
                let response = client
                    .get(url.as_str())
                    .send()
                    .await
                    .map_err(|e| format!("{e:#}"))?;
                status(response.status())
            }
            Client::Tonic(client, streaming) => {
                let mut client = client.clone();
                let request = HealthCheckRequest {
                    service: String::new(),
                };
                if *streaming {
                    let mut stream = client
                        .watch(request)
                        .await
                        .map_err(|s| format!("{s}"))?
                        .into_inner();
                    match stream.message().await {
                        Ok(Some(_)) => Ok(()),
                        Ok(None) => Err("the stream ended without a message".into()),
                        Err(s) => Err(format!("{s}")),
                    }
                } else {
                    client
                        .check(request)
                        .await
                        .map(drop)
                        .map_err(|s| format!("{s}"))
                }
            }
            Client::Kube(client) => {
                let request = http::Request::get("/matrix")
                    .body(kube::client::Body::empty())
                    .unwrap();
                let response = client.send(request).await.map_err(|e| e.to_string())?;
                status(response.status())
            }
        }
    }
}

fn status(status: http::StatusCode) -> Result<(), String> {
    if status.is_success() {
        Ok(())
    } else {
        Err(format!("status {status}"))
    }
}

/// What one cell measured.
#[derive(Debug, Default)]
struct Tally {
    requests: u64,
    failed: Vec<String>,
    old_connections: u64,
}

/// Runs one cell.
async fn cell(kind: Kind, credential: Credential, scenario: Scenario) -> Tally {
    let mut cell = Cell::new(credential, scenario).await;
    let client = Client::new(kind, &cell);
    let mut tally = Tally::default();
    let once = |tally: &mut Tally, result: Result<(), String>| {
        tally.requests += 1;
        if let Err(e) = result {
            tally.failed.push(e);
        }
    };
    once(&mut tally, client.call().await);
    match scenario {
        Scenario::UnderLoad => {
            let stop = Arc::new(AtomicBool::new(false));
            let (requests, failures) = (
                Arc::new(AtomicU64::new(0)),
                Arc::new(std::sync::Mutex::new(Vec::new())),
            );
            let workers: Vec<_> = (0..WORKERS)
                .map(|_| {
                    let (client, stop) = (client.clone(), stop.clone());
                    let (requests, failures) = (requests.clone(), failures.clone());
                    tokio::spawn(async move {
                        while !stop.load(Ordering::Relaxed) {
                            let result = client.call().await;
                            requests.fetch_add(1, Ordering::Relaxed);
                            if let Err(e) = result {
                                failures.lock().unwrap().push(e);
                            }
                        }
                    })
                })
                .collect();
            // (when, connections made by then) of each rotation.
            let mut rotated = Vec::new();
            for _ in 0..ROTATIONS {
                let seen = cell.server.arrivals().len() as u64;
                cell.server.wait_requests(seen + BETWEEN, DEADLINE).await;
                // The connections made before the rotation: counted before it, as one made
                // just after it (with the new credential) would count too.
                let made = cell.server.connections();
                cell.rotate(credential);
                rotated.push((Instant::now(), made));
                // The next rotation once this one is installed: a request meets one
                // rotation, as a refused request is sent again once (real rotations are
                // minutes apart, these milliseconds).
                let rotated_store = cell.generation(credential);
                let want = 1 + rotated.len() as u64;
                crate::support::eventually("the rotation installed", || rotated_store() == want)
                    .await;
            }
            let seen = cell.server.arrivals().len() as u64;
            cell.server.wait_requests(seen + BETWEEN, DEADLINE).await;
            // The load goes on past the second after the last rotation.
            tokio::time::sleep(AFTER_LAST).await;
            stop.store(true, Ordering::Relaxed);
            for worker in workers {
                worker.await.unwrap();
            }
            tally.requests += requests.load(Ordering::Relaxed);
            tally.failed.extend(failures.lock().unwrap().drain(..));
            if credential != Credential::Token {
                tally.old_connections = old_connections(&cell.server, &rotated);
            }
        }
        Scenario::WatcherAndTimerOff => {
            for _ in 0..ROTATIONS {
                cell.rotate(credential);
                if matches!(
                    credential,
                    Credential::Bundle | Credential::ClusterTrustBundle
                ) {
                    // Old connections verified the old server: it restarts, and new ones
                    // meet the new certificate.
                    cell.server.close_gracefully().await;
                }
                once(&mut tally, client.call().await);
            }
            let generation = cell.generation(credential)();
            if generation != 1 + ROTATIONS as u64 {
                tally.failed.push(format!(
                    "the refusals installed generation {generation}, not {}",
                    1 + ROTATIONS
                ));
            }
        }
        Scenario::NewAuthority => {
            let next = Ca::new("server next");
            // 1. The bundle trusts both.
            cell.files.bundle = format!("{}{}", cell.server_ca.pem(), next.pem());
            cell.files.write();
            crate::support::eventually("the bundle of both", || cell.roots.generation() == 2).await;
            once(&mut tally, client.call().await);
            // 2. The credential rotates too (and its store has it: a certificate refused
            // at a TLS 1.3 handshake can close a new connection under a call that may not
            // be sent again, which scenario 1 is about), then the server moves to the new
            // authority and restarts.
            match credential {
                Credential::Token => {
                    cell.rotate(credential);
                    let token = cell.token.clone();
                    crate::support::eventually("the new token", || token.generation() == 2).await;
                }
                Credential::Certificate | Credential::PodCertificate => {
                    cell.rotate(credential);
                    let identity = cell.identity.clone();
                    crate::support::eventually("the new certificate", || {
                        identity.generation() == 2
                    })
                    .await;
                }
                Credential::Bundle | Credential::ClusterTrustBundle => {}
            }
            cell.server.serve_with(&next.server());
            cell.server.close_gracefully().await;
            once(&mut tally, client.call().await);
            // 3. The bundle drops the old authority.
            cell.files.bundle = next.pem();
            cell.files.write();
            crate::support::eventually("the bundle of the new one", || {
                cell.roots.generation() == 3
            })
            .await;
            cell.server.close_gracefully().await;
            once(&mut tally, client.call().await);
        }
    }
    tally
}

/// Requests that started 1 s or more after a rotation and went out on a connection made
/// before it.
fn old_connections(server: &MtlsServer, rotated: &[(Instant, u64)]) -> u64 {
    let arrivals = server.arrivals();
    let mut old = 0;
    for (at, made) in rotated {
        old += arrivals
            .iter()
            .filter(|a| a.at >= *at + Duration::from_secs(1) && a.connection <= *made)
            .count() as u64;
    }
    old
}

/// Every cell of one client kind; fails naming every failed cell.
async fn matrix(kind: Kind) {
    let mut failed = Vec::new();
    for credential in [
        Credential::Token,
        Credential::Certificate,
        Credential::PodCertificate,
        Credential::Bundle,
        Credential::ClusterTrustBundle,
    ] {
        for scenario in [
            Scenario::UnderLoad,
            Scenario::WatcherAndTimerOff,
            Scenario::NewAuthority,
        ] {
            let tally = cell(kind, credential, scenario).await;
            println!(
                "matrix client={} credential={credential:?} scenario={} requests={} failed={} \
                 old_connections={}",
                kind.name(),
                scenario.name(),
                tally.requests,
                tally.failed.len(),
                tally.old_connections,
            );
            if !tally.failed.is_empty() || tally.old_connections > 0 {
                failed.push(format!(
                    "{credential:?} × {}: {} failed ({:?}), {} on old connections",
                    scenario.name(),
                    tally.failed.len(),
                    tally.failed.first(),
                    tally.old_connections
                ));
            }
        }
    }
    assert!(failed.is_empty(), "{}: {failed:#?}", kind.name());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_hyper_util() {
    matrix(Kind::HyperUtil).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_reqwest() {
    matrix(Kind::Reqwest).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_tonic_unary() {
    matrix(Kind::TonicUnary).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_tonic_streaming() {
    matrix(Kind::TonicStreaming).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn matrix_kube() {
    matrix(Kind::Kube).await;
}

/// The token and the client certificate rotated in one swap, with the stores' watcher and
/// timer off, and the server refusing the old pair on the connection the client holds:
/// each client handles the refusal once, between its token's retry and its transport. The
/// request arrives exactly twice, with the old pair and then the new one.
async fn refused_together(kind: Kind) {
    let mut cell = Cell::new(Credential::Certificate, Scenario::WatcherAndTimerOff).await;
    let client = Client::new(kind, &cell);
    client.call().await.unwrap();
    let before = cell.server.arrivals().len();
    let (old_token, old_identity) = (cell.files.token.clone(), cell.files.identity.clone());
    cell.files.token = "token-1".to_owned();
    cell.files.identity = cell.clients_ca.client("matrix", HOUR);
    cell.files.write();
    cell.server.accept_tokens(&["token-1"]);
    cell.server.refuse(&old_identity.fingerprint());
    client.call().await.unwrap();
    let seen: Vec<_> = cell.server.arrivals()[before..]
        .iter()
        .map(|a| {
            (
                a.authorization.clone().unwrap_or_default(),
                a.fingerprint.clone(),
            )
        })
        .collect();
    let pair = |token: &str, identity: &crate::support::pki::Issued| {
        (format!("Bearer {token}"), identity.fingerprint())
    };
    assert_eq!(
        seen,
        [
            pair(&old_token, &old_identity),
            pair("token-1", &cell.files.identity)
        ],
        "{}",
        kind.name()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_of_token_and_certificate_together_sends_the_request_once_more_in_every_client() {
    for kind in [Kind::HyperUtil, Kind::Reqwest, Kind::TonicUnary, Kind::Kube] {
        refused_together(kind).await;
    }
}
