//! A kubeconfig user whose client certificate rotates under load: a client built on this
//! crate's `bearer_reload::kube::Credentials` and kube's own client, built from the same
//! kubeconfig, against the same HTTPS server, which refuses each old certificate the moment its successor is written
//! (a revoking rotation: the worst case, and what a CA that rotates on compromise does).
//!
//! ```text
//! cargo run --release --example cert_rotation [-- --rotations 5 --workers 4]
//! ```
//!
//! Ends with one line per client: requests sent, failed, rotations, and the time from each
//! rotation to the first request that arrived with the new certificate (p50, p99; `never`
//! where none did). kube reads certificate files once, when its client is built.
//!
//! Fully local: a CA made with rcgen, the server on 127.0.0.1, the files in a temp dir
//! swapped the projected-volume way (`..data`).

#[path = "../tests/support/mtls.rs"]
mod mtls;
#[path = "../tests/support/pki.rs"]
mod pki;

use bearer_reload::kube::Credentials;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bearer_reload::testing::ProjectedTokenDir;
use clap::Parser;
use http::{HeaderName, HeaderValue};
use kube::client::Body;
use mtls::MtlsServer;
use pki::{Ca, Issued};
use serde_json::json;

#[derive(Parser)]
struct Args {
    /// Certificate rotations.
    #[arg(long, default_value_t = 5)]
    rotations: usize,
    /// Concurrent requests per client.
    #[arg(long, default_value_t = 4)]
    workers: usize,
    /// Time between rotations, in milliseconds.
    #[arg(long, default_value_t = 300)]
    every_ms: u64,
}

const CLIENTS: [&str; 2] = ["bearer-reload", "kube-builtin"];

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    failed: AtomicU64,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
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
    config.root_cert_file = Some(ca_path);

    let tagged = |name: &str| {
        let mut config = config.clone();
        let mut value = HeaderValue::from_str(name).expect("a header value");
        value.set_sensitive(true);
        config
            .headers
            .push((HeaderName::from_static("x-client"), value));
        config
    };
    let ours = tagged(CLIENTS[0]);
    let clients = [
        Credentials::load(&ours).await?.client(ours)?,
        kube::Client::try_from(tagged(CLIENTS[1]))?,
    ];

    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[Counts; 2]> = Arc::default();
    let mut workers = Vec::new();
    for (k, client) in clients.iter().enumerate() {
        for _ in 0..args.workers {
            let (client, stop, counts) = (client.clone(), stop.clone(), counts.clone());
            workers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let request = http::Request::get("/")
                        .body(Body::empty())
                        .expect("a request");
                    let ok = match client.send(request).await {
                        Ok(response) => response.status().is_success(),
                        Err(_) => false,
                    };
                    counts[k].requests.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        counts[k].failed.fetch_add(1, Ordering::Relaxed);
                        // A client that fails fast would spin: pace its retries as a
                        // controller's requeue would.
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }));
        }
    }

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
        // Milliseconds from each rotation to the first of this client's requests that
        // arrived with the new certificate; `None` where none did.
        let latencies: Vec<Option<f64>> = rotated_at
            .iter()
            .enumerate()
            .map(|(r, at)| {
                let fingerprint = issued[r + 1].fingerprint();
                arrivals
                    .iter()
                    .filter(|a| a.client.as_deref() == Some(*name) && a.fingerprint == fingerprint)
                    .map(|a| a.at.saturating_duration_since(*at).as_secs_f64() * 1e3)
                    .reduce(f64::min)
            })
            .collect();
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

/// The `q` quantile of `latencies` (nearest rank), a rotation never picked up counting as
/// the slowest: `never` when the rank falls on one.
fn percentile(latencies: &[Option<f64>], q: f64) -> String {
    let mut sorted: Vec<f64> = latencies
        .iter()
        .map(|l| l.unwrap_or(f64::INFINITY))
        .collect();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    match sorted.get(rank - 1) {
        Some(ms) if ms.is_finite() => format!("{ms:.2}"),
        _ => "never".to_owned(),
    }
}
