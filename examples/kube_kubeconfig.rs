//! A kubeconfig whose user has a `tokenFile` (a token another process keeps fresh: a Vault
//! agent sink, a workload-identity file, a token handed over for a few minutes): the client
//! reloads it the moment it changes.
//!
//! ```sh
//! cargo run --example kube_kubeconfig            # $KUBECONFIG or ~/.kube/config
//! ```
//!
//! Without a kubeconfig it says what it would do and exits.

use bearer_reload::kube::Credentials;
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
             - if the user entry has a tokenFile (or an exec plugin), reload that file on every\n\
             \x20 change (run the plugin before its token expires) and retry a 401 once with the\n\
             \x20 new token (otherwise use kube's own client)\n\
             - list the config maps of the context's namespace"
        );
        return Ok(());
    };
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default()).await?;
    let client = match Credentials::token_store_builder(&config)? {
        Some(builder) => {
            let store = builder.load().await?;
            println!("reloading {} ({})", store.current(), store.status().source);
            Credentials::from(store).client(config)?
        }
        None => {
            println!("this user has neither a tokenFile nor an exec plugin: kube's own client");
            kube::Client::try_from(config)?
        }
    };

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
