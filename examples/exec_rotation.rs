//! Exec credential plugins through revoking rotations: `bearer_reload::kube` against kube's
//! own exec handling.
//!
//! A local HTTPS Kubernetes-like API server; two `kube::Client`s whose kubeconfig user runs
//! an exec plugin (a shell script that prints the current `ExecCredential` and counts its
//! runs; one script per client, same credentials). Every `--rotate-every` seconds the
//! plugin starts handing out a new token and the server revokes the old one at that
//! instant, as when a session is revoked or a short-lived credential is re-issued. The
//! tokens carry an `expirationTimestamp` `--ttl` seconds out (default 900, as
//! `aws eks get-token`; 0 for none). `--callers` tasks per client list config maps as fast
//! as they can for `--duration` seconds. One line per client at the end:
//!
//! ```text
//! exec client=bearer-reload requests=N failed=F plugin_runs=R
//! exec client=kube-builtin requests=N failed=F plugin_runs=R
//! ```
//!
//! `plugin_runs` counts every run, the ones made while building the client included.
//!
//! ```text
//! cargo run --release --example exec_rotation [-- --duration 20 --rotate-every 4 --ttl 900 --callers 4]
//! ```

#[path = "../tests/support/exec_plugin.rs"]
mod exec_plugin;
#[path = "../tests/support/kube_api.rs"]
mod kube_api;
#[path = "../tests/support/script.rs"]
mod script;
#[path = "../tests/support/serve.rs"]
mod serve;
#[path = "../tests/support/tls.rs"]
mod tls;

use bearer_reload::kube::Credentials;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use clap::Parser;
use exec_plugin::Plugin;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_api::KubeApi;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Exec plugins through revoking rotations: bearer-reload against kube's own exec handling.
#[derive(Parser)]
struct Args {
    /// How long the callers send requests, in seconds.
    #[arg(long, default_value_t = 20)]
    duration: u64,
    /// Seconds between rotations; the server revokes the old token at each.
    #[arg(long, default_value_t = 4)]
    rotate_every: u64,
    /// Lifetime of each token (its `expirationTimestamp`), in seconds; 0 for none.
    #[arg(long, default_value_t = 900)]
    ttl: u64,
    /// Concurrent callers per client.
    #[arg(long, default_value_t = 4)]
    callers: usize,
}

/// A client under test and what its callers saw.
struct Run {
    name: &'static str,
    plugin: Plugin,
    api: Api<ConfigMap>,
    requests: Arc<AtomicU64>,
    failed: Arc<AtomicU64>,
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let args = Args::parse();
    let duration = Duration::from_secs(args.duration);
    let rotate_every = Duration::from_secs(args.rotate_every.max(1));
    let expiry = || (args.ttl > 0).then(|| SystemTime::now() + Duration::from_secs(args.ttl));

    let server = KubeApi::start().await;
    let (ours, theirs) = (Plugin::new(), Plugin::new());
    let mut serial = 1;
    let token = |n: u64| format!("exec-token-{n}");
    for plugin in [&ours, &theirs] {
        plugin.issue(&token(serial), expiry());
    }
    server.accept_only(&token(serial));

    let config = |plugin: &Plugin| {
        let path = plugin.kubeconfig(&server, "default");
        async move {
            let kubeconfig = Kubeconfig::read_from(&path)?;
            let options = KubeConfigOptions::default();
            Ok::<_, BoxError>(kube::Config::from_custom_kubeconfig(kubeconfig, &options).await?)
        }
    };
    let reloading = {
        let config = config(&ours).await?;
        Credentials::load(&config).await?.client(config)?
    };
    // kube runs the plugin while building its client (blocking): off the async workers.
    let builtin = {
        let config = config(&theirs).await?;
        tokio::task::spawn_blocking(move || kube::Client::try_from(config)).await??
    };
    let runs = [
        ("bearer-reload", ours, reloading),
        ("kube-builtin", theirs, builtin),
    ]
    .map(|(name, plugin, client)| Run {
        name,
        plugin,
        api: Api::default_namespaced(client),
        requests: Arc::default(),
        failed: Arc::default(),
    });

    let stop = Arc::new(AtomicBool::new(false));
    let mut callers = Vec::new();
    for run in &runs {
        for _ in 0..args.callers {
            let (api, requests, failed, stop) = (
                run.api.clone(),
                run.requests.clone(),
                run.failed.clone(),
                stop.clone(),
            );
            callers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let ok = api.list(&ListParams::default()).await.is_ok();
                    requests.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }));
        }
    }

    let started = Instant::now();
    let mut rotations = 0u64;
    while started.elapsed() + rotate_every <= duration {
        tokio::time::sleep(rotate_every).await;
        serial += 1;
        let next = token(serial);
        // Valid before the plugin hands it out; the old one revoked once it does.
        server.accept_also(&next);
        for run in &runs {
            run.plugin.issue(&next, expiry());
        }
        server.accept_only(&next);
        rotations += 1;
    }
    tokio::time::sleep(duration.saturating_sub(started.elapsed())).await;
    stop.store(true, Ordering::Relaxed);
    for caller in callers {
        caller.await?;
    }

    println!(
        "exec scenario duration_s={} rotate_every_s={} ttl_s={} callers={} rotations={rotations}",
        args.duration,
        rotate_every.as_secs(),
        args.ttl,
        args.callers
    );
    for run in &runs {
        println!(
            "exec client={} requests={} failed={} plugin_runs={}",
            run.name,
            run.requests.load(Ordering::Relaxed),
            run.failed.load(Ordering::Relaxed),
            run.plugin.runs()
        );
    }
    Ok(())
}
