//! A `reqwest_middleware::ClientWithMiddleware` over rustls (ring, no aws-lc) whose requests
//! carry the token from a kubelet-style projected token file, through a rotation that the
//! server enforces at once (it revokes the old token as the new one is written).
//!
//! Fully local: it starts an HTTPS server on 127.0.0.1 with a certificate made at start,
//! which accepts one token at a time, and writes the token directory in a temporary folder.
//!
//! ```text
//! cargo run --example reqwest_client
//! ```
//!
//! The dependencies it needs (see Cargo.toml):
//!
//! ```toml
//! bearer-reload = { version = "0.1", features = ["reqwest"] }
//! reqwest = { version = "0.13", default-features = false, features = ["rustls-no-provider", "http2"] }
//! reqwest-middleware = "0.5"
//! rustls = { version = "0.23", default-features = false, features = ["ring", "std", "tls12"] }
//! ```

#[path = "../tests/support/serve.rs"]
mod serve;
#[path = "../tests/support/server.rs"]
mod server;
#[path = "../tests/support/tls.rs"]
mod tls;

use bearer_reload::TokenStore;
use bearer_reload::reqwest::BearerMiddleware;
use bearer_reload::source::FileSource;
use bearer_reload::testing::ProjectedTokenDir;
use server::AuthServer;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    // reqwest's `rustls-no-provider` feature: the application picks the crypto provider.
    rustls::crypto::ring::default_provider()
        .install_default()
        .map_err(|_| "another rustls provider was installed first")?;

    // An HTTPS server for 127.0.0.1 that accepts exactly one token at a time.
    let ca = tls::TestCa::new();
    let server = AuthServer::start_tls("first-token", ca.acceptor()).await;

    // The token, written the way the kubelet writes a projected service-account token.
    let dir = tempfile::tempdir()?;
    let projected = ProjectedTokenDir::create(dir.path().join("sa"), "first-token")?;
    let store = TokenStore::builder(FileSource::new(projected.token_path()))
        .load()
        .await?;

    // The client: reqwest trusting our CA only, with the middleware and its 401 retry.
    let client = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(ca.ca_pem().as_bytes())?])
        .build()?;
    let client = reqwest_middleware::ClientBuilder::new(client)
        .with(BearerMiddleware::new(store.clone()).retry_unauthorized())
        .build();
    let url = server.url("/upload");

    let res = client.post(&url).body("payload one").send().await?;
    println!(
        "request 1: {} with token {} (generation {})",
        res.status(),
        store.current().fingerprint(),
        store.generation()
    );
    res.error_for_status()?;

    // Rotate: the server takes only the new token from the moment it is written. The next
    // request may leave before the watcher has installed it: it then gets a 401, which
    // reloads the token and sends the request again, body included.
    server.accept_also("second-token");
    projected.rotate("second-token")?;
    server.accept_only("second-token");
    let res = client.post(&url).body("payload two").send().await?;
    let status = res.status();
    let body_len = res.headers().get("x-body-len").cloned();
    println!(
        "request 2: {status} with token {} (generation {}), body length seen by the server: {:?}",
        store.current().fingerprint(),
        store.generation(),
        body_len
    );
    res.error_for_status()?;

    let status = store.status();
    println!(
        "reqwest_client ok generation={} refused={} retried={}",
        status.generation, status.unauthorized, status.retries
    );
    Ok(())
}
