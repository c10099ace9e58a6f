//! Metrics an operator scrapes: a Prometheus `/metrics` endpoint beside a client going
//! through token rotations (feature `metrics`).
//!
//! ```text
//! cargo run --release --example metrics [-- --duration 12 --listen 127.0.0.1:9184]
//! ```
//!
//! A token file rotated the kubelet's way every 2 s, a local server that refuses the old
//! token the moment a new one is written, and a client sending requests through
//! `BearerLayer` with the 401 retry. `metrics-exporter-prometheus` serves `/metrics` on
//! `--listen` for as long as the example runs (`curl http://127.0.0.1:9184/metrics`); at the
//! end the example scrapes it once and prints the `bearer_reload_*` samples.

#[path = "../tests/support/prometheus.rs"]
mod prometheus;
#[path = "../tests/support/serve.rs"]
mod serve;
#[path = "../tests/support/server.rs"]
mod server;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bearer_reload::source::FileSource;
use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use http::Request;
use http_body_util::Empty;
use metrics_exporter_prometheus::PrometheusBuilder;
use server::{AuthServer, http1_client};
use tower::{Layer, ServiceExt};

fn arg<T: std::str::FromStr>(name: &str, default: T) -> T {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().ok().expect("a valid value"))
        .unwrap_or(default)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let duration = Duration::from_secs(arg("--duration", 12));
    let listen: SocketAddr = arg("--listen", "127.0.0.1:9184".parse()?);
    PrometheusBuilder::new()
        .with_http_listener(listen)
        .install()?;
    println!("metrics        http://{listen}/metrics");

    let dir = tempfile::tempdir()?;
    let volume = ProjectedTokenDir::create(dir.path().join("serviceaccount"), "token-1")?;
    let store = TokenStore::builder(FileSource::new(volume.token_path()))
        .name("payments-api")
        .load()
        .await?;
    let server = AuthServer::start("token-1").await;
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client::<Empty<Bytes>>());

    let started = Instant::now();
    let mut serial = 1;
    let mut next_rotation = started + Duration::from_secs(2);
    let (mut requests, mut failed) = (0u64, 0u64);
    while started.elapsed() < duration {
        if Instant::now() >= next_rotation {
            serial += 1;
            let token = format!("token-{serial}");
            server.accept_also(&token);
            volume.rotate(&token)?;
            server.accept_only(&token);
            next_rotation += Duration::from_secs(2);
        }
        let req = Request::get(server.url("/")).body(Empty::new())?;
        let res = client.clone().oneshot(req).await?;
        requests += 1;
        if !res.status().is_success() {
            failed += 1;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }

    let exposition = prometheus::scrape(listen).await;
    for (key, value) in exposition.starting_with("bearer_reload_") {
        println!("{key} {value}");
    }
    println!(
        "metrics requests={requests} failed={failed} rotations={} generation={}",
        serial - 1,
        store.generation()
    );
    Ok(())
}
