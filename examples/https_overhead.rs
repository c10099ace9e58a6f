//! What the rotating-TLS clients cost on the way: requests per second through each of this
//! crate's clients over the same requests through the plain client it wraps, against one
//! local HTTPS server that requires a client certificate, with no rotation during the run.
//!
//! ```text
//! cargo run --release --example https_overhead [-- --processes 5 --rounds 9 --run-ms 200 --concurrency 8]
//! ```
//!
//! The pairs (ours, then plain):
//!
//! - `hyper-util-h1`, `hyper-util-h2`: `tls::HttpsClient<Full<Bytes>>`, and a bare
//!   hyper-util legacy client over `hyper_rustls::HttpsConnector`, with the same pool
//!   settings as `HttpsClient`'s (hyper-util's defaults, tokio's timer) and the same TCP
//!   connector (`nodelay`). HTTP/1.1 (keep-alive, a connection per concurrent request)
//!   against a server that offers only `http/1.1` by ALPN, HTTP/2 (one connection) against
//!   one that offers `h2` too.
//! - `reqwest`: a reqwest-middleware client with `reqwest::TlsMiddleware`, and a plain
//!   `reqwest::Client` built with `tls_backend_preconfigured` (the `#` line also shows a
//!   `ClientWithMiddleware` with no middleware over the plain client: reqwest-middleware's
//!   own share).
//! - `tonic`: tonic-health's `HealthClient` (`Check`) over `tonic::TlsChannel`, and over a
//!   `tonic::transport::Channel` with a `ClientTlsConfig` (the CA, the client identity).
//!
//! The plain clients get the same rustls `ClientConfig` as ours, built once from the same
//! files: trust the server's CA, present the client certificate, session resumption off
//! (as `RootStore::client_config`). Ours read the same files through an `IdentityStore`
//! and a `RootStore`.
//!
//! Method: `--processes` processes (5) one after another, each measuring every pair; the
//! figure is the median over processes of each process's ratio. One process's figure is
//! not the clients': the ratio holds still within a process (a few percent over its
//! rounds) but moves from one process to the next (HTTP/1.1: from 0.87 to 1.02 over ten
//! processes of the same binary; something fixed per process, such as the heap's layout
//! or where the threads run), as in `benches/overhead` (`processes.rs`). In each process, for each pair: one request each
//! and a warm-up run each (the connections all later runs share), then `--rounds` rounds;
//! each round runs ours and plain back to back (alternating which goes first), each for
//! `--run-ms` with `--concurrency` tasks sending one request at a time, and takes
//! `ours_rps / plain_rps` (any other variants run after them, in rotating order). The
//! process's ratio is the median over rounds of those per-round ratios, which the
//! machine's drift between rounds does not move (see `benches/overhead/main.rs`, "Why
//! paired ratios"). Each pair prints
//!
//! ```text
//! # pN https client=<name> protocol=<p> ours_rps=<median> plain_rps=<median> ratio_range=<min>..<max> ...
//! # pN https client=<name> ratio_vs_plain=<r>
//! ```
//!
//! for each process N, and at the end, per pair, the median over processes and their range:
//!
//! ```text
//! https client=<name> ratio_vs_plain=<median> range=<min>..<max> processes=<n>
//! ```
//!
//! Fully local: a CA made with rcgen, the server (`tests/support/mtls.rs`, one per pair, in
//! this process) on 127.0.0.1. The clients run on a tokio runtime of their own
//! (`--client-threads`, 1 by default), the server on another (`--server-threads`, 1): on a
//! shared runtime the scheduler moves HTTP/2's connection tasks between the two threads,
//! and one run's throughput differs from the next one's by up to 3x. `--verbose` prints
//! each round's figures.

#[path = "../tests/support/mtls.rs"]
mod mtls;
#[path = "../tests/support/pki.rs"]
mod pki;

use std::path::Path;
use std::time::{Duration, Instant};

use bearer_reload::reqwest::TlsMiddleware;
use bearer_reload::source::FileSource;
use bearer_reload::tls::{HttpsClient, IdentityStore, RootStore};
use bearer_reload::tonic::TlsChannel;
use bytes::Bytes;
use clap::Parser;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full};
use hyper_rustls::{HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use mtls::MtlsServer;
use pki::{Ca, Issued};
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tonic::transport::{Channel, ClientTlsConfig, Endpoint};
use tonic_health::pb::HealthCheckRequest;
use tonic_health::pb::health_client::HealthClient;
use tower::{Service, ServiceExt};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[derive(Parser)]
struct Args {
    /// Only the variants at these positions (0 ours, 1 plain, then the others; all by
    /// default): to profile one.
    #[arg(long, value_delimiter = ',', hide = true)]
    variants: Vec<usize>,
    /// Interleaved rounds per client.
    #[arg(long, default_value_t = 9)]
    rounds: usize,
    /// How long each run lasts, in milliseconds (one run of ours and one of plain per round).
    #[arg(long, default_value_t = 200)]
    run_ms: u64,
    /// How long the warm-up run lasts, in milliseconds (`--run-ms` by default):
    /// `benches/https_instructions.sh` keeps it the same at two run lengths.
    #[arg(long)]
    warmup_ms: Option<u64>,
    /// Concurrent requests.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Processes, one after another, each measuring every pair (1: this process alone).
    #[arg(long, default_value_t = 5)]
    processes: usize,
    /// Worker threads of the clients' runtime.
    #[arg(long, default_value_t = 1)]
    client_threads: usize,
    /// Worker threads of the server's runtime.
    #[arg(long, default_value_t = 1)]
    server_threads: usize,
    /// Print each round's figures.
    #[arg(long)]
    verbose: bool,
    /// Only these clients (comma-separated names; all by default).
    #[arg(long, value_delimiter = ',')]
    only: Vec<String>,
}

const NAMES: [&str; 4] = ["hyper-util-h1", "hyper-util-h2", "reqwest", "tonic"];

type BareHyper<B = Full<Bytes>> =
    hyper_util::client::legacy::Client<HttpsConnector<HttpConnector>, B>;

/// One client of a pair; each task of a run has its own clone.
#[derive(Clone)]
#[expect(
    clippy::large_enum_variant,
    reason = "each task holds one; boxing the bare client would add to the plain side alone"
)]
enum Client {
    Https(HttpsClient<Full<Bytes>>, Uri),
    Hyper(BareHyper, Uri),
    Middleware(reqwest_middleware::ClientWithMiddleware, String),
    Reqwest(reqwest::Client, String),
    TonicTls(HealthClient<TlsChannel>),
    TonicChannel(HealthClient<Channel>),
}

impl Client {
    /// One request, its answer read whole; the answer's HTTP version.
    async fn call(&mut self) -> Result<http::Version, BoxError> {
        let (status, version) = match self {
            Client::Https(client, uri) => {
                let request = Request::get(uri.clone()).body(Full::new(Bytes::new()))?;
                let response = client.ready().await?.call(request).await?;
                let (status, version) = (response.status(), response.version());
                response.into_body().collect().await?;
                (status, version)
            }
            Client::Hyper(client, uri) => {
                let request = Request::get(uri.clone()).body(Full::new(Bytes::new()))?;
                let response = client.request(request).await?;
                let (status, version) = (response.status(), response.version());
                response.into_body().collect().await?;
                (status, version)
            }
            Client::Middleware(client, url) => {
                let response = client.get(url.as_str()).send().await?;
                let (status, version) = (response.status(), response.version());
                response.bytes().await?;
                (status, version)
            }
            Client::Reqwest(client, url) => {
                let response = client.get(url.as_str()).send().await?;
                let (status, version) = (response.status(), response.version());
                response.bytes().await?;
                (status, version)
            }
            Client::TonicTls(client) => {
                client.check(HealthCheckRequest::default()).await?;
                (StatusCode::OK, http::Version::HTTP_2)
            }
            Client::TonicChannel(client) => {
                client.check(HealthCheckRequest::default()).await?;
                (StatusCode::OK, http::Version::HTTP_2)
            }
        };
        if status != StatusCode::OK {
            return Err(format!("status {status}").into());
        }
        Ok(version)
    }
}

/// Requests for `duration` from `concurrency` tasks, each with its own clone of `client`
/// and one request at a time: requests/s (those completed, over the time until the last
/// task finished its last one).
async fn run(
    client: &Client,
    duration: Duration,
    concurrency: usize,
) -> Result<(f64, u64), BoxError> {
    let start = Instant::now();
    let deadline = start + duration;
    let mut tasks = tokio::task::JoinSet::new();
    for _ in 0..concurrency {
        let mut client = client.clone();
        tasks.spawn(async move {
            let mut done = 0u64;
            while Instant::now() < deadline {
                client.call().await?;
                done += 1;
            }
            Ok::<_, BoxError>(done)
        });
    }
    let mut done = 0;
    while let Some(task) = tasks.join_next().await {
        done += task??;
    }
    Ok((done as f64 / start.elapsed().as_secs_f64(), done))
}

/// The median of `values` (the mean of the middle two for an even count).
fn median(values: &[f64]) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    let n = sorted.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        sorted[n / 2]
    } else {
        (sorted[n / 2 - 1] + sorted[n / 2]) / 2.0
    }
}

/// The files and the certificates both clients of a pair are made from.
struct Pki {
    ca: Ca,
    server: Issued,
    client: Issued,
    ca_path: std::path::PathBuf,
    cert_path: std::path::PathBuf,
    key_path: std::path::PathBuf,
}

impl Pki {
    fn new(dir: &Path) -> Result<Self, BoxError> {
        let ca = Ca::new("https-overhead");
        let server = ca.server();
        let client = ca.client("bench", Duration::from_secs(3600));
        let (ca_path, cert_path, key_path) =
            (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
        std::fs::write(&ca_path, ca.pem())?;
        std::fs::write(&cert_path, &client.cert_pem)?;
        std::fs::write(&key_path, &client.key_pem)?;
        Ok(Self {
            ca,
            server,
            client,
            ca_path,
            cert_path,
            key_path,
        })
    }

    /// The plain clients' rustls configuration: the CA, the client certificate, session
    /// resumption off (as `RootStore::client_config`), the process's provider (ring).
    fn config(&self, alpn: &[&[u8]]) -> Result<rustls::ClientConfig, BoxError> {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(CertificateDer::from(self.ca.der()))?;
        let key = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(self.client.key_der.clone()));
        let mut config = rustls::ClientConfig::builder()
            .with_root_certificates(roots)
            .with_client_auth_cert(
                vec![CertificateDer::from(self.client.cert_der.clone())],
                key,
            )?;
        config.resumption = rustls::client::Resumption::disabled();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Ok(config)
    }

    /// Our clients' stores, on the same files.
    async fn stores(&self) -> Result<(RootStore, IdentityStore), BoxError> {
        let roots = RootStore::builder(FileSource::new(&self.ca_path))
            .load()
            .await?;
        let identity = IdentityStore::files(&self.cert_path, &self.key_path)
            .load()
            .await?;
        Ok((roots, identity))
    }
}

/// A bare hyper-util client as `HttpsClient` builds each of its pools: the same TCP
/// connector, the same pool settings, ALPN `h2` and `http/1.1` (hyper-rustls sets them:
/// `config` must have none), the server choosing.
fn bare_hyper<B>(config: rustls::ClientConfig) -> BareHyper<B>
where
    B: http_body::Body + Send + 'static,
    B::Data: Send,
{
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(Duration::from_secs(30)));
    let connector = HttpsConnectorBuilder::new()
        .with_tls_config(config)
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http);
    hyper_util::client::legacy::Client::builder(TokioExecutor::new())
        .pool_timer(TokioTimer::new())
        .build(connector)
}

/// The pair (ours, plain) named `name`, and any other variants to show, against `server`.
async fn pair(
    name: &str,
    pki: &Pki,
    server: &MtlsServer,
) -> Result<Vec<(&'static str, Client)>, BoxError> {
    let (roots, identity) = pki.stores().await?;
    let alpn: [&[u8]; 2] = [b"h2", b"http/1.1"];
    Ok(match name {
        "hyper-util-h1" | "hyper-util-h2" => {
            let uri: Uri = server.url("/bench").parse()?;
            let ours = HttpsClient::<Full<Bytes>>::new(roots).identity(identity);
            vec![
                ("ours", Client::Https(ours, uri.clone())),
                ("plain", Client::Hyper(bare_hyper(pki.config(&[])?), uri)),
            ]
        }
        "reqwest" => {
            let url = server.url("/bench");
            let ours = reqwest_middleware::ClientBuilder::new(reqwest::Client::new())
                .with(TlsMiddleware::new(roots).identity(identity))
                .build();
            let plain = reqwest::Client::builder()
                .tls_backend_preconfigured(pki.config(&alpn)?)
                .build()?;
            let bare = reqwest_middleware::ClientBuilder::new(plain.clone()).build();
            vec![
                ("ours", Client::Middleware(ours, url.clone())),
                ("plain", Client::Reqwest(plain, url.clone())),
                ("middleware-alone", Client::Middleware(bare, url)),
            ]
        }
        "tonic" => {
            let origin: Uri = server.url("").parse()?;
            let ours = TlsChannel::new(origin, roots)?.identity(identity);
            let tls = ClientTlsConfig::new()
                .ca_certificate(tonic::transport::Certificate::from_pem(pki.ca.pem()))
                .identity(tonic::transport::Identity::from_pem(
                    &pki.client.cert_pem,
                    &pki.client.key_pem,
                ))
                .domain_name("localhost");
            let channel = Endpoint::from_shared(server.url(""))?
                .tls_config(tls)?
                .connect()
                .await?;
            vec![
                ("ours", Client::TonicTls(HealthClient::new(ours))),
                ("plain", Client::TonicChannel(HealthClient::new(channel))),
            ]
        }
        other => return Err(format!("no client {other}").into()),
    })
}

/// Measures the pair `name`; prints its `#` line and its ratio.
async fn measure(name: &str, pki: &Pki, server: &MtlsServer, args: &Args) -> Result<f64, BoxError> {
    let variants = pair(name, pki, server).await?;
    // The server counts a connection once its side of the handshake is done: let those
    // made so far (tonic's `Channel` connects when built) be counted before the first.
    tokio::time::sleep(Duration::from_millis(100)).await;
    // Each: one request (one connection at first: HTTP/2 then shares it), then a warm-up
    // run (HTTP/1.1: a connection per task); the connections each made.
    let duration = Duration::from_millis(args.run_ms);
    let (mut versions, mut made, mut warmed) = (Vec::new(), Vec::new(), Vec::new());
    let selected = |v: usize| args.variants.is_empty() || args.variants.contains(&v);
    for (v, (_, client)) in variants.iter().enumerate() {
        let before = server.connections();
        if !selected(v) {
            versions.push(http::Version::default());
            warmed.push(0);
            made.push(0);
            continue;
        }
        versions.push(client.clone().call().await?);
        let warmup = Duration::from_millis(args.warmup_ms.unwrap_or(args.run_ms));
        let (_, done) = run(client, warmup, args.concurrency).await?;
        warmed.push(1 + done);
        made.push(server.connections() - before);
    }
    let connections = server.connections();

    let mut rps: Vec<Vec<f64>> = vec![Vec::new(); variants.len()];
    // Requests sent by each, warm-up included.
    let mut sent = warmed;
    for round in 0..args.rounds {
        // Ours and plain back to back, alternating which goes first; then the others.
        let pair = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        let others = variants.len() - 2;
        let rest = (0..others).map(|k| 2 + (round + k) % others);
        for v in pair.into_iter().chain(rest) {
            if !selected(v) {
                rps[v].push(f64::NAN);
                continue;
            }
            let (figure, done) = run(&variants[v].1, duration, args.concurrency).await?;
            rps[v].push(figure);
            sent[v] += done;
        }
        if args.verbose {
            let figures: Vec<String> = variants
                .iter()
                .zip(&rps)
                .map(|((label, _), rps)| format!("{label}={:.0}", rps[round]))
                .collect();
            println!("#   {name} round {round}: {}", figures.join(" "));
        }
    }
    if args.verbose {
        println!("#   {name} requests sent (warm-up included): {sent:?}");
    }
    if server.connections() != connections {
        eprintln!(
            "{name}: {} connections made during the rounds (after {connections} at warm-up)",
            server.connections() - connections
        );
    }

    let ratios =
        |k: usize| -> Vec<f64> { rps[k].iter().zip(&rps[1]).map(|(a, b)| a / b).collect() };
    let ours = ratios(0);
    let min = ours.iter().copied().fold(f64::INFINITY, f64::min);
    let max = ours.iter().copied().fold(0.0, f64::max);
    let mut line = format!(
        "# https client={name} protocol={:?} ours_rps={:.0} plain_rps={:.0} ratio_range={min:.3}..{max:.3}",
        versions[0],
        median(&rps[0]),
        median(&rps[1]),
    );
    for (k, (label, _)) in variants.iter().enumerate().skip(2) {
        line += &format!(
            " {label}_rps={:.0} {label}_ratio_vs_plain={:.3}",
            median(&rps[k]),
            median(&ratios(k))
        );
    }
    line += &format!(
        " rounds={} run_ms={} concurrency={} connections={made:?}",
        args.rounds, args.run_ms, args.concurrency
    );
    if versions.iter().any(|v| *v != versions[0]) {
        line += &format!(" versions={versions:?}");
    }
    println!("{line}");
    let ratio = median(&ours);
    println!("https client={name} ratio_vs_plain={ratio:.3}");
    Ok(ratio)
}

/// Set in the processes [`processes`] starts.
const CHILD: &str = "HTTPS_OVERHEAD_CHILD";

/// Runs this program `args.processes` times, one process after another, with the same
/// arguments; prints each one's lines (`# pN` before them), then per pair the median over
/// processes of their ratios and the range.
fn processes(args: &Args) -> Result<(), BoxError> {
    let mut ratios: Vec<(String, Vec<f64>)> = Vec::new();
    for p in 0..args.processes {
        let output = std::process::Command::new(std::env::current_exe()?)
            .args(std::env::args_os().skip(1))
            .env(CHILD, "1")
            .stderr(std::process::Stdio::inherit())
            .output()?;
        if !output.status.success() {
            return Err(format!("process {p}: {}", output.status).into());
        }
        for line in String::from_utf8(output.stdout)?.lines() {
            println!("# p{p} {}", line.trim_start_matches("# "));
            let Some(rest) = line.strip_prefix("https client=") else {
                continue;
            };
            let Some((name, ratio)) = rest.split_once(" ratio_vs_plain=") else {
                continue;
            };
            let ratio: f64 = ratio.parse()?;
            match ratios.iter_mut().find(|(n, _)| n == name) {
                Some((_, all)) => all.push(ratio),
                None => ratios.push((name.to_owned(), vec![ratio])),
            }
        }
    }
    for (name, all) in &ratios {
        let min = all.iter().copied().fold(f64::INFINITY, f64::min);
        let max = all.iter().copied().fold(0.0, f64::max);
        println!(
            "https client={name} ratio_vs_plain={:.3} range={min:.3}..{max:.3} processes={}",
            median(all),
            all.len()
        );
    }
    Ok(())
}

fn main() -> Result<(), BoxError> {
    // The examples build rustls with ring and aws-lc-rs: the plain clients take the
    // process default.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let args = Args::parse();
    if args.processes > 1 && std::env::var_os(CHILD).is_none() {
        return processes(&args);
    }
    let tmp = tempfile::tempdir()?;
    let pki = Pki::new(tmp.path())?;
    // The clients on a runtime of their own, the server on another: the scheduler does
    // not move the client's and the server's tasks between threads, which (HTTP/2's one
    // connection task each side) changes a run's throughput several-fold from one run to
    // the next.
    let clients = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(args.client_threads.max(1))
        .thread_name("client")
        .enable_all()
        .build()?;
    for name in NAMES {
        if !args.only.is_empty() && !args.only.iter().any(|o| o == name) {
            continue;
        }
        let servers = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.server_threads.max(1))
            .thread_name("server")
            .enable_all()
            .build()?;
        // Started within the server's runtime: its tasks run there.
        let server = servers.block_on(async {
            if name == "hyper-util-h1" {
                MtlsServer::start_http1(&pki.ca, &pki.server).await
            } else {
                MtlsServer::start(&pki.ca, &pki.server).await
            }
        });
        clients.block_on(measure(name, &pki, &server, &args))?;
        drop(server);
        servers.shutdown_background();
    }
    Ok(())
}
