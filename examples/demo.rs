//! The rotation demo: three kube clients against one API server while the token rotates.
//!
//! ```text
//! cargo run --release --example demo [-- --duration 30 --rotate-every 3 --no-revoke]
//! ```
//!
//! Everything is local: an HTTPS Kubernetes-like API server on 127.0.0.1 that verifies signed
//! service-account tokens, a token issuer that rotates the token file the way the kubelet
//! does, and three clients listing ConfigMaps side by side.

#[path = "../tests/support/kube_api.rs"]
mod kube_api;
#[path = "../tests/support/serve.rs"]
mod serve;
#[path = "../tests/support/tls.rs"]
mod tls;

use bearer_reload::kube::Credentials;
use std::io::IsTerminal;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine;
use bearer_reload::testing::ProjectedTokenDir;
use clap::Parser;
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube_api::{KubeApi, User};
use serde_json::json;

const LONG_ABOUT: &str = "\
A Kubernetes workload reads its service-account token from a file that the kubelet rewrites \
before the token expires. This demo plays the whole scene on your machine, no cluster needed:

  - an HTTPS API server that accepts only signed, unexpired service-account tokens, and (with \
--revoke, the default) refuses a token the instant a newer one has been written;
  - a token issuer that rotates the token file every few seconds, exactly as the kubelet does \
(a new timestamped directory, then a rename of the `..data` symlink), with short lifetimes;
  - three clients listing ConfigMaps concurrently:
      bearer-reload  kube::Client built by bearer_reload::kube (directory watch + 401 retry)
      kube-builtin   kube::Client with kube's own tokenFile handling (re-read about once a minute)
      read-once      a token read once at start, as a naive app does.

At the end, one line per client: requests, successes, failures, and stale_s_max, the longest \
time the client kept sending a token after a newer one had been written.";

/// Rotation demo: bearer-reload against kube's built-in token file handling.
#[derive(Parser, Debug)]
#[command(about, long_about = LONG_ABOUT)]
struct Args {
    /// How long to run, in seconds.
    #[arg(long, default_value_t = 30)]
    duration: u64,
    /// Seconds between rotations of the token file; each token lives 25% longer.
    #[arg(long, default_value_t = 3.0)]
    rotate_every: f64,
    /// Refuse a token as soon as a newer one is written (the default).
    #[arg(long, overrides_with = "no_revoke")]
    revoke: bool,
    /// Accept every token until it expires.
    #[arg(long, overrides_with = "revoke")]
    no_revoke: bool,
    /// Concurrent callers per client.
    #[arg(long, default_value_t = 2)]
    clients: usize,
}

/// Issues and verifies HS256-signed service-account tokens.
struct Issuer {
    key: [u8; 32],
    lifetime: Duration,
    revoke: bool,
    /// Tokens with a lower serial are refused (when revoking).
    oldest_valid: AtomicU64,
}

const ISSUER: &str = "https://kubernetes.default.svc.cluster.local";

impl Issuer {
    fn issue(&self, serial: u64) -> String {
        let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
        let iat = now.as_secs();
        let exp = (now + self.lifetime).as_secs();
        let warnafter = (now + self.lifetime.mul_f64(0.8)).as_secs();
        let claims = json!({
            "iss": ISSUER,
            "sub": "system:serviceaccount:default:demo",
            "aud": [ISSUER],
            "iat": iat,
            "nbf": iat,
            "exp": exp,
            "jti": serial.to_string(),
            "kubernetes.io": {
                "namespace": "default",
                "serviceaccount": { "name": "demo", "uid": "5e0c9f7a-demo" },
                "pod": { "name": "demo-0", "uid": "1b2c3d4e-demo" },
                "warnafter": warnafter,
            },
        });
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &claims,
            &EncodingKey::from_secret(&self.key),
        )
        .expect("claims serialize")
    }

    fn verify(&self, token: &str) -> bool {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_audience(&[ISSUER]);
        validation.set_issuer(&[ISSUER]);
        let Ok(data) = jsonwebtoken::decode::<serde_json::Value>(
            token,
            &DecodingKey::from_secret(&self.key),
            &validation,
        ) else {
            return false;
        };
        let current = serial_of(token).unwrap_or(0) >= self.oldest_valid.load(Ordering::SeqCst);
        data.claims["sub"] == "system:serviceaccount:default:demo" && (!self.revoke || current)
    }
}

/// The serial (`jti`) of a token, read without verifying it.
fn serial_of(token: &str) -> Option<u64> {
    let payload = token.split('.').nth(1)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .ok()?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).ok()?;
    claims["jti"].as_str()?.parse().ok()
}

#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    ok: AtomicU64,
    failed: AtomicU64,
}

struct ClientRun {
    name: &'static str,
    client: kube::Client,
    counts: Arc<Counts>,
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = Args::parse();
    let revoke = !args.no_revoke;
    let duration = Duration::from_secs(args.duration);
    let rotate_every = Duration::from_secs_f64(args.rotate_every.max(0.2));
    let issuer = Arc::new(Issuer {
        key: rand_key(),
        lifetime: rotate_every
            .mul_f64(1.25)
            .max(rotate_every + Duration::from_secs(1)),
        revoke,
        oldest_valid: AtomicU64::new(1),
    });

    let api = KubeApi::start().await;
    api.accept_with({
        let issuer = issuer.clone();
        move |token| issuer.verify(token)
    });
    let files = tempfile::tempdir()?;
    let first = issuer.issue(1);
    let projected = ProjectedTokenDir::create(files.path(), &first)?;
    let written = Arc::new(Mutex::new(vec![(1u64, Instant::now())]));

    println!("API server     {}", api.url());
    println!("token file     {}", projected.token_path().display());
    println!(
        "scenario       rotate every {:.1} s, token lifetime {:.1} s, revoke superseded tokens: {}, {} s, {} callers per client",
        rotate_every.as_secs_f64(),
        issuer.lifetime.as_secs_f64(),
        if revoke { "yes" } else { "no" },
        duration.as_secs(),
        args.clients
    );

    let kubeconfig = api.kubeconfig(&projected.token_path(), "default");
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let store = Credentials::token_store_builder(&config)?
        .expect("the kubeconfig uses a token file")
        .load()
        .await?;
    let ours = Credentials::from(store.clone()).client(config.clone())?;
    let builtin = kube::Client::try_from(config.clone())?;
    let read_once = {
        let token = std::fs::read_to_string(projected.token_path())?;
        let path = api.kubeconfig_for(
            &User {
                token: Some(token.trim()),
                ..User::default()
            },
            "default",
        );
        let config = kube::Config::from_custom_kubeconfig(
            Kubeconfig::read_from(&path)?,
            &KubeConfigOptions::default(),
        )
        .await?;
        kube::Client::try_from(config)?
    };
    let runs = [
        ("bearer-reload", ours),
        ("kube-builtin", builtin),
        ("read-once", read_once),
    ]
    .map(|(name, client)| ClientRun {
        name,
        client,
        counts: Arc::new(Counts::default()),
    });

    // Each client lists ConfigMaps in a namespace of its own, so the server's record tells
    // which client sent which token.
    let stop = Arc::new(AtomicBool::new(false));
    let mut workers = Vec::new();
    for run in &runs {
        for _ in 0..args.clients {
            let (stop, counts) = (stop.clone(), run.counts.clone());
            let cms: Api<ConfigMap> = Api::namespaced(run.client.clone(), run.name);
            workers.push(tokio::spawn(async move {
                let mut pace = tokio::time::interval(Duration::from_millis(20));
                while !stop.load(Ordering::Relaxed) {
                    pace.tick().await;
                    let result = cms.list(&ListParams::default()).await;
                    counts.requests.fetch_add(1, Ordering::Relaxed);
                    match result {
                        Ok(_) => counts.ok.fetch_add(1, Ordering::Relaxed),
                        Err(_) => counts.failed.fetch_add(1, Ordering::Relaxed),
                    };
                }
            }));
        }
    }

    // The issuer: a new token every `rotate_every`, valid before it is written; the old one
    // revoked once it is.
    let stop_rotating = Arc::new(AtomicBool::new(false));
    let rotator = tokio::spawn({
        let (issuer, written, stop) = (issuer.clone(), written.clone(), stop_rotating.clone());
        async move {
            let mut serial = 1;
            let mut ticks =
                tokio::time::interval_at(tokio::time::Instant::now() + rotate_every, rotate_every);
            loop {
                ticks.tick().await;
                if stop.load(Ordering::Relaxed) {
                    return projected;
                }
                serial += 1;
                let token = issuer.issue(serial);
                projected.rotate(&token).expect("rotate the token file");
                written.lock().unwrap().push((serial, Instant::now()));
                issuer.oldest_valid.store(serial, Ordering::SeqCst);
            }
        }
    });

    let progress = Progress::new(&runs);
    let started = Instant::now();
    let mut second = tokio::time::interval(Duration::from_secs(1));
    second.tick().await;
    while started.elapsed() < duration {
        second.tick().await;
        progress.update(started.elapsed(), &runs, &api, &written.lock().unwrap());
    }
    // Wind down: the rotations stop first and the callers go on for a moment, so the last
    // frame shows where each client stands once the file has settled.
    stop_rotating.store(true, Ordering::Relaxed);
    let _projected = rotator.await?;
    second.tick().await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await?;
    }
    progress.update(started.elapsed(), &runs, &api, &written.lock().unwrap());
    progress.finish();

    let rotations = written.lock().unwrap().len() - 1;
    let status = store.status();
    println!();
    println!(
        "{} rotations; bearer-reload store: generation {}, {} reads, {} 401s seen, {} retries ({} succeeded), watch {:?}",
        rotations,
        status.generation,
        status.reads,
        status.unauthorized,
        status.retries,
        status.retries_succeeded,
        status.watch
    );
    println!();
    println!(
        "{:<14} {:>9} {:>9} {:>9} {:>12}",
        "client", "requests", "ok", "failed", "stale_s_max"
    );
    let stale = stale_per_namespace(&api, &written.lock().unwrap());
    let mut lines = Vec::new();
    for run in &runs {
        let c = &run.counts;
        let (requests, ok, failed) = (
            c.requests.load(Ordering::Relaxed),
            c.ok.load(Ordering::Relaxed),
            c.failed.load(Ordering::Relaxed),
        );
        let stale_s = stale
            .iter()
            .find(|(ns, _)| ns == run.name)
            .map_or(0.0, |(_, s)| *s);
        println!(
            "{:<14} {requests:>9} {ok:>9} {failed:>9} {stale_s:>12.3}",
            run.name
        );
        lines.push(format!(
            "demo client={} requests={requests} ok={ok} failed={failed} stale_s_max={stale_s:.3}",
            run.name
        ));
    }
    println!();
    for line in lines {
        println!("{line}");
    }
    Ok(())
}

fn rand_key() -> [u8; 32] {
    // A per-run signing key; uniqueness, not secrecy, is what the demo needs.
    let mut key = [0u8; 32];
    let seed = format!("{:?}{:?}", SystemTime::now(), std::process::id());
    let digest = <sha2::Sha256 as sha2::Digest>::digest(seed.as_bytes());
    key.copy_from_slice(&digest);
    key
}

/// The serial of the last token the server saw from each client's namespace.
fn last_serial_per_namespace(api: &KubeApi) -> Vec<(String, u64)> {
    let mut last: Vec<(String, u64)> = Vec::new();
    for seen in api.seen().iter().rev() {
        let (Some(ns), Some(serial)) = (&seen.namespace, seen.token.as_deref().and_then(serial_of))
        else {
            continue;
        };
        if !last.iter().any(|(n, _)| n == ns) {
            last.push((ns.clone(), serial));
        }
    }
    last
}

/// Per namespace, the longest time between a token being superseded (its successor written)
/// and a request still carrying it.
fn stale_per_namespace(api: &KubeApi, written: &[(u64, Instant)]) -> Vec<(String, f64)> {
    let mut stale: Vec<(String, f64)> = Vec::new();
    for seen in api.seen() {
        let (Some(ns), Some(serial)) = (&seen.namespace, seen.token.as_deref().and_then(serial_of))
        else {
            continue;
        };
        let superseded = written
            .iter()
            .find(|(s, at)| *s == serial + 1 && *at <= seen.at)
            .map(|(_, at)| seen.at.duration_since(*at).as_secs_f64())
            .unwrap_or(0.0);
        match stale.iter_mut().find(|(n, _)| n == ns) {
            Some((_, max)) => *max = max.max(superseded),
            None => stale.push((ns.clone(), superseded)),
        }
    }
    stale
}

/// A live line per client: spinners on a terminal, plain lines otherwise.
struct Progress {
    bars: Option<(MultiProgress, Vec<ProgressBar>)>,
}

impl Progress {
    fn new(runs: &[ClientRun]) -> Self {
        if !std::io::stdout().is_terminal() {
            return Self { bars: None };
        }
        let multi = MultiProgress::with_draw_target(ProgressDrawTarget::stdout());
        let style = ProgressStyle::with_template("{spinner} {msg}").expect("a valid template");
        let bars = runs
            .iter()
            .map(|_| {
                let bar = multi.add(ProgressBar::new_spinner());
                bar.set_style(style.clone());
                bar.enable_steady_tick(Duration::from_millis(120));
                bar
            })
            .collect();
        Self {
            bars: Some((multi, bars)),
        }
    }

    /// One line per client: its counts, and which token it last sent against the newest
    /// one written: `current`, or how long it has been behind.
    fn update(
        &self,
        elapsed: Duration,
        runs: &[ClientRun],
        api: &KubeApi,
        written: &[(u64, Instant)],
    ) {
        let last = last_serial_per_namespace(api);
        let newest = written.last().map_or(0, |(serial, _)| *serial);
        for (i, run) in runs.iter().enumerate() {
            let c = &run.counts;
            let sent = last.iter().find(|(ns, _)| ns == run.name).map(|(_, s)| *s);
            let standing = match sent {
                None => "no request yet".to_owned(),
                Some(serial) if serial >= newest => format!("token #{serial} of {newest}, current"),
                Some(serial) => {
                    let since = written
                        .iter()
                        .find(|(s, _)| *s == serial + 1)
                        .map_or(0.0, |(_, at)| at.elapsed().as_secs_f64());
                    format!("token #{serial} of {newest}, {since:.1} s behind")
                }
            };
            let line = format!(
                "t={:>3}s {:<14} requests={:>6} failed={:>6}  {standing}",
                elapsed.as_secs(),
                run.name,
                c.requests.load(Ordering::Relaxed),
                c.failed.load(Ordering::Relaxed),
            );
            match &self.bars {
                Some((_, bars)) => bars[i].set_message(line),
                None => println!("{line}"),
            }
        }
    }

    fn finish(&self) {
        if let Some((_, bars)) = &self.bars {
            for bar in bars {
                bar.finish();
            }
        }
    }
}
