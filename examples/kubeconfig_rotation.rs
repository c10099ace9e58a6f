//! A kubeconfig mounted from a Secret that something else rewrites (Cluster API's
//! `<cluster>-kubeconfig`, a managed service account's): its inline token and inline client
//! certificate rotate together, under load, against an HTTPS server that checks both and
//! refuses the old ones the moment the new ones are written. Two clients built from the
//! same file: one on `Credentials::from_kubeconfig`, and kube's own, built once.
//!
//! ```text
//! cargo run --release --example kubeconfig_rotation [-- --rotations 5 --workers 4]
//! ```
//!
//! Ends with one line per client: requests sent, failed, rotations, and the time from each
//! rotation to the first of the client's requests that arrived with the new credentials
//! (p50, p99; `never` where none did):
//!
//! ```text
//! kubeconfig client=bearer-reload requests=... failed=0 rotations=5 new_credentials_p50_ms=... new_credentials_p99_ms=...
//! kubeconfig client=kube-builtin requests=... failed=... rotations=5 new_credentials_p50_ms=never ...
//! ```
//!
//! Fully local: a CA made with rcgen, the server on 127.0.0.1, the kubeconfig in a temp
//! dir swapped the mounted-Secret way (`..data`).

#[path = "../tests/support/mtls.rs"]
mod mtls;
#[path = "../tests/support/pki.rs"]
mod pki;
#[path = "common/rotation.rs"]
mod rotation;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bearer_reload::kube::Credentials;
use bearer_reload::testing::ProjectedTokenDir;
use clap::Parser;
use http::{HeaderName, HeaderValue};
use kube::client::Body;
use kube::config::KubeConfigOptions;
use mtls::MtlsServer;
use pki::{Ca, Issued};
use rotation::{Args, Call, Counts, first_arrivals, percentile, spawn_callers};
use serde_json::json;

const CLIENTS: [&str; 2] = ["bearer-reload", "kube-builtin"];

/// The kubeconfig as the Secret holds it: the server, its CA, a token and a client
/// certificate, all inline.
fn kubeconfig(server: &str, ca: &Ca, token: &str, identity: &Issued) -> String {
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "workload", "cluster": {
            "server": server,
            "certificate-authority-data": STANDARD.encode(ca.pem()),
        }}],
        "users": [{"name": "workload-admin", "user": {
            "token": token,
            "client-certificate-data": STANDARD.encode(&identity.cert_pem),
            "client-key-data": STANDARD.encode(&identity.key_pem),
        }}],
        "contexts": [{"name": "workload-admin@workload", "context": {
            "cluster": "workload", "user": "workload-admin",
        }}],
        "current-context": "workload-admin@workload",
    })
    .to_string()
}

/// `config` with an `x-client` header naming the client, for the server's records.
fn tagged(mut config: kube::Config, name: &str) -> kube::Config {
    let mut value = HeaderValue::from_str(name).expect("a header value");
    value.set_sensitive(true);
    config
        .headers
        .push((HeaderName::from_static("x-client"), value));
    config
}

/// A kube client of the example.
#[derive(Clone)]
struct Client(kube::Client);

impl Call for Client {
    async fn call(&mut self) -> bool {
        let request = http::Request::get("/api/v1/namespaces/default/configmaps")
            .body(Body::empty())
            .expect("a request");
        match self.0.send(request).await {
            Ok(response) => response.status().is_success(),
            Err(_) => false,
        }
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = Args::parse();
    let tmp = tempfile::tempdir()?;
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let url = server.url("");
    let mut issued = vec![(
        "token-0".to_owned(),
        ca.client("workload-admin", Duration::from_secs(3600)),
    )];
    server.accept_tokens(&["token-0"]);
    let volume = ProjectedTokenDir::create_named(
        tmp.path().join("secret"),
        "value",
        kubeconfig(&url, &ca, &issued[0].0, &issued[0].1),
    )?;
    let path = volume.token_path();

    let (config, credentials) =
        Credentials::from_kubeconfig(&path, &KubeConfigOptions::default()).await?;
    let builtin = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::read_from(&path)?,
        &KubeConfigOptions::default(),
    )
    .await?;
    let clients = [
        Client(credentials.client(tagged(config, CLIENTS[0]))?),
        Client(kube::Client::try_from(tagged(builtin, CLIENTS[1]))?),
    ];

    let stop = Arc::new(AtomicBool::new(false));
    let counts: Arc<[Counts; 2]> = Arc::default();
    let workers = spawn_callers(&clients, args.workers, &stop, &counts);

    let mut rotated_at = Vec::new();
    for r in 1..=args.rotations {
        tokio::time::sleep(Duration::from_millis(args.every_ms)).await;
        let token = format!("token-{r}");
        let identity = ca.client("workload-admin", Duration::from_secs(3600));
        let (old_token, old_identity) = issued.last().expect("one issued");
        // The issuer's new token is valid before it is written; the old token and the old
        // certificate are refused the moment it is.
        server.accept_tokens(&[old_token, &token]);
        volume.rotate(kubeconfig(&url, &ca, &token, &identity))?;
        rotated_at.push(Instant::now());
        server.accept_tokens(&[&token]);
        server.refuse(&old_identity.fingerprint());
        issued.push((token, identity));
    }
    tokio::time::sleep(Duration::from_millis(args.every_ms)).await;
    stop.store(true, Ordering::Relaxed);
    for worker in workers {
        worker.await?;
    }

    let arrivals = server.arrivals();
    for (k, name) in CLIENTS.iter().enumerate() {
        // Served, and with both new credentials.
        let latencies = first_arrivals(&arrivals, name, &rotated_at, |r, a| {
            let (token, identity) = &issued[r + 1];
            !a.refused
                && a.fingerprint == identity.fingerprint()
                && a.authorization.as_deref() == Some(format!("Bearer {token}").as_str())
        });
        println!(
            "kubeconfig client={name} requests={} failed={} rotations={} \
             new_credentials_p50_ms={} new_credentials_p99_ms={}",
            counts[k].requests.load(Ordering::Relaxed),
            counts[k].failed.load(Ordering::Relaxed),
            rotated_at.len(),
            percentile(&latencies, 0.50),
            percentile(&latencies, 0.99),
        );
    }
    Ok(())
}
