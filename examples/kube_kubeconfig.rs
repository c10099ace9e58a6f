//! A kubeconfig whose user has a `tokenFile` (a token another process keeps fresh: a Vault
//! agent sink, a workload-identity file, a token handed over for a few minutes): the client
//! reloads it the moment it changes.
//!
//! ```sh
//! cargo run --example kube_kubeconfig            # $KUBECONFIG or ~/.kube/config
//! ```
//!
//! Without a kubeconfig it says what it would do and exits.

use bearer_reload::Options;
use bearer_reload::kube::{ReloadingClient, client_with};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Api, Config};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    tracing_subscriber::fmt()
        .with_env_filter(std::env::var("RUST_LOG").unwrap_or_else(|_| "info".into()))
        .init();

    let Ok(kubeconfig) = Kubeconfig::read() else {
        println!(
            "no kubeconfig found ($KUBECONFIG or ~/.kube/config). With one, this example would:\n\
             - build a kube::Client from its current context\n\
             - if the user entry has a tokenFile, reload that file on every change and retry\n\
             \x20 a 401 once with the new token (otherwise use kube's own client)\n\
             - list the config maps of the context's namespace"
        );
        return Ok(());
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let ReloadingClient { client, store, .. } = client_with(config, Options::new()).await?;
    match &store {
        Some(store) => println!("reloading {} ({})", store.current(), store.status().source),
        None => println!("this user has no tokenFile: kube's own client, unchanged"),
    }

    let configmaps: Api<ConfigMap> = Api::default_namespaced(client.clone());
    let list = configmaps.list(&ListParams::default()).await?;
    println!(
        "{} config maps in namespace {}:",
        list.items.len(),
        client.default_namespace()
    );
    for cm in list {
        println!("  {}", cm.metadata.name.unwrap_or_default());
    }
    Ok(())
}
