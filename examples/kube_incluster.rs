//! In a pod: a `kube::Client` whose service-account token reloads the moment the kubelet
//! rotates it, and whose 401s are retried once.
//!
//! ```sh
//! cargo run --example kube_incluster
//! ```
//!
//! Outside a cluster (no `KUBERNETES_SERVICE_HOST`) it says what it would do and exits.

use std::time::Duration;

use bearer_reload::kube::Credentials;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .init();

    if std::env::var_os("KUBERNETES_SERVICE_HOST").is_none() {
        println!(
            "not in a cluster (KUBERNETES_SERVICE_HOST is not set). In a pod this example would:\n\
             - read /var/run/secrets/kubernetes.io/serviceaccount/{{token,ca.crt,namespace}}\n\
             - build a kube::Client that reloads the token on every kubelet rotation\n\
             - ask the API server for its version every 10 s and print the token in use"
        );
        return Ok(());
    }

    // Most apps need no more than `Credentials::load(&config).await?.client(config)?`.
    // Here the token store is built by hand and kept, for its status.
    let config = kube::Config::incluster()?;
    let store = Credentials::token_store_builder(&config)?
        .expect("the in-cluster config reads a token file")
        .load()
        .await?;
    let client = Credentials::from(store.clone()).client(config)?;
    for _ in 0..6 {
        let version = client.apiserver_version().await?;
        let status = store.status();
        println!(
            "API server {}.{}; token {} (generation {}, watch {:?})",
            version.major, version.minor, status.fingerprint, status.generation, status.watch
        );
        tokio::time::sleep(Duration::from_secs(10)).await;
    }
    Ok(())
}
