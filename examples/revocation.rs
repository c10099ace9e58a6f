//! What a revoked token costs, with and without the 401 retry.
//!
//! Four clients send requests as fast as they can to a local server. Every `--rotate-every`
//! seconds (default 2) the token file is rotated the way the kubelet does it and the server
//! revokes the old token at that instant. Three runs, one line each:
//!
//! - `mode=retry`: watcher + 401 retry (what this crate is for);
//! - `mode=no-retry`: watcher, and a 401 reloads the token but goes back to the caller;
//! - `mode=timer-only`: no watcher, no reaction to a 401: the 60 s re-read every peer
//!   relies on.
//!
//! ```text
//! cargo run --release --example revocation [-- --duration 20 --rotate-every 2]
//! ```

#[path = "../tests/support/serve.rs"]
mod serve;
#[path = "../tests/support/server.rs"]
mod server;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bearer_reload::source::FileSource;
use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Empty;
use server::{AuthServer, http1_client};
use tower::{Layer, ServiceExt};

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Retry,
    NoRetry,
    TimerOnly,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Retry => "retry",
            Mode::NoRetry => "no-retry",
            Mode::TimerOnly => "timer-only",
        }
    }
}

fn arg(name: &str, default: u64) -> u64 {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| v.parse().expect("a whole number of seconds"))
        .unwrap_or(default)
}

/// Nothing counts as refused: the timer alone refreshes the token, as kube-rs and
/// client-go do.
#[derive(Debug, Clone, Copy)]
struct NeverUnauthorized;

impl bearer_reload::classify::Unauthorized for NeverUnauthorized {
    fn is_unauthorized<B>(&self, _: &http::Response<B>) -> bool {
        false
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let duration = Duration::from_secs(arg("--duration", 20));
    let rotate_every = Duration::from_secs(arg("--rotate-every", 2));
    for mode in [Mode::Retry, Mode::NoRetry, Mode::TimerOnly] {
        let (requests, failed, rotations) = run(mode, duration, rotate_every).await?;
        println!(
            "revocation mode={} requests={requests} failed={failed} rotations={rotations}",
            mode.name()
        );
    }
    Ok(())
}

async fn run(
    mode: Mode,
    duration: Duration,
    rotate_every: Duration,
) -> Result<(u64, u64, u64), Box<dyn std::error::Error + Send + Sync>> {
    let dir = tempfile::tempdir()?;
    let mut serial = 0u64;
    let mut token = || {
        serial += 1;
        format!("token-{}-{serial}", mode.name())
    };
    let first = token();
    let projected = ProjectedTokenDir::create(dir.path(), first.as_bytes())?;
    let server = AuthServer::start(&first).await;
    let builder = TokenStore::builder(FileSource::new(projected.token_path()));
    let store: TokenStore = match mode {
        Mode::TimerOnly => builder.no_watch(),
        Mode::Retry | Mode::NoRetry => builder,
    }
    .load()
    .await?;

    let stop = Arc::new(AtomicBool::new(false));
    let (requests, failed) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    let url = server.url("/");
    let clients: Vec<_> = (0..4)
        .map(|_| {
            let (stop, requests, failed, url) =
                (stop.clone(), requests.clone(), failed.clone(), url.clone());
            let layer = BearerLayer::new(store.clone());
            let client = tower::util::BoxCloneService::new(match mode {
                Mode::Retry => tower::util::Either::Left(
                    layer
                        .retry_unauthorized()
                        .layer(http1_client::<Empty<Bytes>>()),
                ),
                Mode::NoRetry => tower::util::Either::Right(tower::util::Either::Left(
                    layer.layer(http1_client::<Empty<Bytes>>()),
                )),
                Mode::TimerOnly => tower::util::Either::Right(tower::util::Either::Right(
                    layer
                        .classifier(NeverUnauthorized)
                        .layer(http1_client::<Empty<Bytes>>()),
                )),
            });
            tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let req = Request::get(url.as_str()).body(Empty::new()).unwrap();
                    let ok = matches!(
                        client.clone().oneshot(req).await,
                        Ok(res) if res.status() == StatusCode::OK
                    );
                    requests.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();

    let started = Instant::now();
    let mut rotations = 0;
    while started.elapsed() + rotate_every <= duration {
        tokio::time::sleep(rotate_every).await;
        let next = token();
        // Issued (valid) before it is written, and the old one revoked once it is.
        server.accept_also(&next);
        projected.rotate(next.as_bytes())?;
        server.accept_only(&next);
        rotations += 1;
    }
    tokio::time::sleep(duration.saturating_sub(started.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    for client in clients {
        client.await?;
    }
    Ok((
        requests.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        rotations,
    ))
}
