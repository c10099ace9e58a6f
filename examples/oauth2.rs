//! Short-lived OAuth 2.0 tokens under load, with a revocation: this crate's store against
//! an expiry-only cache.
//!
//! A real authorization server (oidc-provider, started from
//! `tests/support/oauth2_server.rs`; needs Node.js and npm) issues client-credentials
//! tokens that live `--ttl` seconds (default 2), and a resource server introspects every
//! token it is shown (RFC 7662) and answers 401 to one that is not active. Two clients
//! send requests to it for `--duration` seconds (default 12), four workers each, at the
//! same time, and halfway through the authorization server revokes every token it
//! issued:
//!
//! - `client=bearer-reload` (as `basic-client`): a [`TokenStore`] over
//!   [`ClientCredentials`], under `BearerLayer::new(store).retry_unauthorized()`. The
//!   store fetches a new token before the current one expires, in the background, one
//!   fetch for all workers; the revocation's 401s reload the token once and the refused
//!   requests are sent again with the new one.
//! - `client=expiry-only` (as `post-client`): a cache written here that fetches a token
//!   when it has none or the one it has expired (by `expires_in`), and never on a 401:
//!   what the `oauth2` and `yup-oauth2` crates leave you with. It fails from the
//!   revocation until its token expires, and on requests whose token expires in flight.
//!
//! ```text
//! cargo run --release --example oauth2 [-- --duration 12 --ttl 2]
//! ```
//!
//! The last two lines, `windows` being the run time over the time each client keeps a
//! token before it asks for the next:
//!
//! ```text
//! oauth2 client=bearer-reload requests=N failed=0 token_requests=T windows=W
//! oauth2 client=expiry-only requests=N failed=F token_requests=T windows=W
//! ```
//!
//! The expiry-only cache keeps a token for its lifetime, the store for less: it renews a
//! token before it expires, by a margin of a tenth of its lifetime, at least a minute but
//! never before half the lifetime (so at a 2 s lifetime, every second; at an hour, six
//! minutes before the end). Its window is measured, the median gap between its renewals
//! (printed on stderr). Both make one token request per window, whatever the number of
//! workers; the store one more for the revocation. What matters is `failed=0`.

#[path = "../tests/support/oauth2_server.rs"]
mod oauth2_server;
#[path = "../tests/support/serve.rs"]
mod serve;

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use bearer_reload::oauth2::{ClientAuth, ClientCredentials};
use bearer_reload::source::FnSource;
use bearer_reload::tls::RootStore;
use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use clap::Parser;
use http::{Request, Response, StatusCode, header};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use oauth2_server::{
    AuthServer, BASIC_CLIENT, Credentials, POST_CLIENT, ServerConfig, cluster_key,
};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};

/// Workers per client.
const WORKERS: usize = 4;

#[derive(Parser)]
struct Args {
    /// How long the load runs, in seconds.
    #[arg(long, default_value_t = 12)]
    duration: u64,
    /// How long each access token lives, in seconds.
    #[arg(long, default_value_t = 2)]
    ttl: u64,
}

/// What one client's workers counted.
#[derive(Default)]
struct Counts {
    requests: AtomicU64,
    failed: AtomicU64,
}

impl Counts {
    fn record(&self, ok: bool) {
        self.requests.fetch_add(1, Ordering::Relaxed);
        if !ok {
            self.failed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

/// The expiry-only cache: a token and the moment `expires_in` says it ends; a new one
/// when there is none or it ended, one fetch at a time. A 401 changes nothing.
struct ExpiryOnly {
    server: Arc<AuthServer>,
    cached: tokio::sync::Mutex<Option<(String, Instant)>>,
}

impl ExpiryOnly {
    async fn token(&self) -> String {
        let mut cached = self.cached.lock().await;
        if let Some((token, expires)) = &*cached
            && Instant::now() < *expires
        {
            return token.clone();
        }
        let asked = Instant::now();
        let reply = self
            .server
            .client_credentials(
                Credentials::Post(POST_CLIENT.0, POST_CLIENT.1),
                Some("read"),
            )
            .await;
        let token = reply.access_token().to_owned();
        let lifetime = Duration::from_secs(reply.expires_in().expect("an expires_in"));
        *cached = Some((token.clone(), asked + lifetime));
        token
    }
}

/// A resource server that introspects each token: 200 if active, 401 otherwise.
async fn resource_server(auth: Arc<AuthServer>) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api", listener.local_addr().unwrap());
    serve::spawn(
        listener,
        None,
        move |req: Request<hyper::body::Incoming>| {
            let auth = auth.clone();
            async move {
                let status = auth.resource_status(req.headers()).await;
                Response::builder()
                    .status(status)
                    .body(Full::new(Bytes::new()))
                    .unwrap()
            }
        },
    );
    url
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let args = Args::parse();
    let run = Duration::from_secs(args.duration);
    let config = ServerConfig::standard(cluster_key()).ttl(args.ttl);
    let server = Arc::new(AuthServer::start(config).await);
    let url = resource_server(server.clone()).await;
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();

    // Ours: the store over the client-credentials grant, and the layer with its retry.
    let pem = server.ca_pem().to_owned();
    let roots = RootStore::builder(FnSource::new("the test CA", move || {
        let pem = pem.clone();
        async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
    }))
    .load()
    .await?;
    let source = ClientCredentials::new(
        server.token_endpoint().parse()?,
        BASIC_CLIENT.0,
        ClientAuth::client_secret_basic(BASIC_CLIENT.1),
        roots,
    )
    .scope("read");
    let store = TokenStore::builder(source).load().await?;
    let ours = ServiceBuilder::new()
        .layer(BearerLayer::new(store.clone()).retry_unauthorized())
        .service(http.clone());

    let theirs = Arc::new(ExpiryOnly {
        server: server.clone(),
        cached: tokio::sync::Mutex::new(None),
    });

    let (ours_counts, theirs_counts) = (Arc::new(Counts::default()), Arc::new(Counts::default()));
    let started = Instant::now();
    let end = started + run;
    let mut workers = Vec::new();
    for _ in 0..WORKERS {
        let (client, counts, target) = (ours.clone(), ours_counts.clone(), url.clone());
        workers.push(tokio::spawn(async move {
            while Instant::now() < end {
                let request = Request::get(&target).body(Empty::new()).unwrap();
                let answer = client.clone().oneshot(request).await;
                counts.record(answer.is_ok_and(|r| r.status() == StatusCode::OK));
            }
        }));
        let (cache, http, counts, target) = (
            theirs.clone(),
            http.clone(),
            theirs_counts.clone(),
            url.clone(),
        );
        workers.push(tokio::spawn(async move {
            while Instant::now() < end {
                let ok = expiry_only_request(&cache, &http, &target).await;
                counts.record(ok);
            }
        }));
    }

    // When the store installs each new token: the windows it renews in, measured.
    let renewals = Arc::new(std::sync::Mutex::new(Vec::new()));
    let watching = tokio::spawn({
        let (mut generations, renewals) = (store.subscribe(), renewals.clone());
        async move {
            while generations.changed().await.is_ok() {
                renewals.lock().unwrap().push(Instant::now());
            }
        }
    });

    tokio::time::sleep(run / 2).await;
    let revoked_at = Instant::now();
    let revoked = server.revoke_all().await;
    eprintln!("revoked {revoked} tokens at {:?}", started.elapsed());
    for worker in workers {
        worker.await?;
    }
    let elapsed = started.elapsed();

    let stats = server.stats().await;
    // A window is how long a client keeps a token before it asks for the next one: the
    // lifetime for the expiry-only cache; for the store, the renewal interval it keeps
    // (half the lifetime for a token under two minutes, see above), measured as the median
    // gap between its renewals, the revocation's reload left out.
    watching.abort();
    eprintln!("store: {:?}", store.status());
    let renewals = renewals.lock().unwrap().clone();
    let mut gaps: Vec<f64> = renewals
        .windows(2)
        // The reload the revocation's 401s started is not a renewal.
        .filter(|w| !(w[0]..w[1]).contains(&revoked_at))
        .map(|w| (w[1] - w[0]).as_secs_f64())
        .collect();
    gaps.sort_by(f64::total_cmp);
    let renew_every = gaps.get(gaps.len() / 2).copied().unwrap_or(args.ttl as f64);
    eprintln!(
        "the store renewed every {renew_every:.2} s (median), tokens living {} s",
        args.ttl
    );
    let windows_of = |every: f64| (elapsed.as_secs_f64() / every).round() as u64;
    for (name, counts, client_id, windows) in [
        (
            "bearer-reload",
            &ours_counts,
            BASIC_CLIENT.0,
            windows_of(renew_every),
        ),
        (
            "expiry-only",
            &theirs_counts,
            POST_CLIENT.0,
            windows_of(args.ttl as f64),
        ),
    ] {
        println!(
            "oauth2 client={name} requests={} failed={} token_requests={} windows={windows}",
            counts.requests.load(Ordering::Relaxed),
            counts.failed.load(Ordering::Relaxed),
            stats.requests_of(client_id),
        );
    }
    Ok(())
}

/// One request with the expiry-only cache's token; a 401 is the caller's problem.
async fn expiry_only_request(
    cache: &ExpiryOnly,
    http: &Client<HttpConnector, Empty<Bytes>>,
    url: &str,
) -> bool {
    let token = cache.token().await;
    let mut value = http::HeaderValue::try_from(format!("Bearer {token}")).unwrap();
    value.set_sensitive(true);
    let request = Request::get(url)
        .header(header::AUTHORIZATION, value)
        .body(Empty::new())
        .unwrap();
    let answer = http.request(request).await;
    answer.is_ok_and(|r| r.status() == StatusCode::OK)
}
