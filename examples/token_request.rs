//! A simulated day of audience-bound tokens from the TokenRequest API.
//!
//! ```text
//! cargo run --release --example token_request -- --simulate-hours 24
//! ```
//!
//! A workload calls a service ("vault") that accepts only unexpired tokens for its
//! audience, through `BearerLayer`, with tokens of the service account `team-a/payments`
//! that a `TokenRequestSource` asks the project's HTTPS API server for. Two parts of the
//! workload build their own layer for the same audience on one store, shared by cloning
//! it. Time is
//! simulated (tokio's paused clock, jumping from timer to timer while no HTTP exchange is
//! in flight, and the same clock for the store's dates and the API server's), so a day runs
//! in seconds; every socket, TLS handshake and signature is real.
//!
//! The last line: `api_calls`, the TokenRequests the API server received from both layers;
//! `windows`, the kubelet refresh windows the simulated time holds (a window is 80% of the
//! TTL less the kubelet's mean jitter of 4.5 s, plus the first load); `expired_served`,
//! requests that reached the service with an expired token; `failed`, requests that did
//! not succeed.

#[path = "../tests/support/kube_api.rs"]
mod kube_api;
#[path = "../tests/support/serve.rs"]
mod serve;
#[path = "../tests/support/sim.rs"]
mod sim;
#[path = "../tests/support/tls.rs"]
mod tls;
#[path = "../tests/support/token_request.rs"]
mod token_request;

use std::time::{Duration, Instant};

use bearer_reload::source::TokenRequestSource;
use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use clap::Parser;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_api::{KubeApi, User};
use sim::{GuardLayer, SimClock, guarded};
use token_request::{AudienceService, TokenApi};
use tower::{Layer, ServiceExt};

const NS: &str = "team-a";
const SA: &str = "payments";
const AUDIENCE: &str = "vault";
const REQUESTER: &str = "workload-own-token";

/// A simulated day of TokenRequest tokens through BearerLayer.
#[derive(Parser, Debug)]
#[command(about)]
struct Args {
    /// Simulated hours to run.
    #[arg(long, default_value_t = 24)]
    simulate_hours: u64,
    /// The tokens' lifetime (expirationSeconds), in seconds.
    #[arg(long, default_value_t = 600)]
    ttl: u64,
    /// Layers (parts of the workload) asking for the same audience.
    #[arg(long, default_value_t = 2)]
    layers: usize,
    /// Simulated seconds between two requests of each layer.
    #[arg(long, default_value_t = 10)]
    request_every: u64,
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()?;
    runtime.block_on(run(args))
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let started = Instant::now();
    let clock = SimClock::start();
    let api = KubeApi::start().await;
    api.accept_only(REQUESTER);
    let tokens = TokenApi::install(&api, move || clock.now());
    tokens.add_service_account(NS, SA);
    let vault = AudienceService::start(&tokens, AUDIENCE).await;

    // The workload's kube client, as `kube::Config` reads a kubeconfig.
    let user = User {
        token: Some(REQUESTER),
        ..User::default()
    };
    let kubeconfig = Kubeconfig::read_from(api.kubeconfig_for(&user, NS))?;
    let mut config =
        kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    // kube's 429/503/504 retry sleeps inside an exchange, where the simulated clock is
    // held; nothing here fails, so it has nothing to do anyway.
    config.default_retry = false;
    let client = kube::client::ClientBuilder::try_from(config)?
        .with_layer(&GuardLayer)
        .build();

    // One store for the audience; each part of the workload builds its own layer on a
    // clone of it.
    let source = TokenRequestSource::new(client.clone(), SA)
        .audience(AUDIENCE)
        .expiration(Duration::from_secs(args.ttl));
    let store = TokenStore::builder(source)
        .simulated_clock(clock.origin, clock.start)
        .load()
        .await?;
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let layers: Vec<_> = (0..args.layers)
        .map(|_| {
            BearerLayer::new(store.clone())
                .retry_unauthorized()
                .layer(http.clone())
        })
        .collect();
    println!(
        "simulating {} h: {} layers for audience {AUDIENCE:?} on one store, tokens of \
         {NS}/{SA} living {} s",
        args.simulate_hours, args.layers, args.ttl
    );

    let url = vault.url("/v1/secret/data/app");
    let total = args.simulate_hours * 3600;
    let (mut requests, mut failed) = (0u64, 0u64);
    let mut t = 0;
    while t < total {
        t += args.request_every;
        tokio::time::sleep_until(clock.start + Duration::from_secs(t)).await;
        for layer in &layers {
            let request = Request::get(&url).body(Empty::new())?;
            let status = guarded(async {
                let response = layer.clone().oneshot(request).await?;
                let status = response.status();
                response.into_body().collect().await?;
                Ok::<_, Box<dyn std::error::Error>>(status)
            })
            .await;
            requests += 1;
            if !matches!(status, Ok(StatusCode::OK)) {
                failed += 1;
            }
        }
        if t % (4 * 3600) == 0 {
            let status = store.status();
            println!(
                "  t={:>2}h api_calls={} generation={} failures={} expired={}",
                t / 3600,
                tokens.received(),
                status.generation,
                status.failures,
                status.expired
            );
        }
    }

    let tally = vault.tally();
    let api_calls = tokens.received();
    // The kubelet's window: 80% of the TTL (exp − 20%), less its mean jitter (0–9 s).
    let window = args.ttl as f64 - (args.ttl * 20 / 100) as f64 - 4.5;
    let windows = 1 + (total as f64 / window).floor() as u64;
    println!(
        "requests={requests} accepted={} refused={} real_s={:.1}",
        tally.accepted,
        tally.refused(),
        started.elapsed().as_secs_f64()
    );
    println!(
        "tokenrequest simulated_h={} ttl_s={} api_calls={api_calls} windows={windows} \
         expired_served={} failed={failed}",
        args.simulate_hours, args.ttl, tally.expired
    );
    Ok(())
}
