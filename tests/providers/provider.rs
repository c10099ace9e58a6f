//! The rustls provider the TLS stores use when the application installed a process
//! default: that one, before the provider of the crate's feature. In a process of its own
//! (`support::alone`), as the default is process-wide and set once.

use crate::support::{self, pki};

use std::sync::Arc;

use bearer_reload::source::FileSource;
use bearer_reload::tls::{IdentityStore, RootStore};
use rustls::crypto::CryptoProvider;

#[tokio::test]
async fn the_process_default_the_application_installed_is_the_one_used() {
    if !support::alone::in_own_process(
        module_path!(),
        "the_process_default_the_application_installed_is_the_one_used",
    ) {
        return;
    }
    // One cipher suite only: no feature's provider looks like it.
    let mut provider = rustls::crypto::ring::default_provider();
    provider
        .cipher_suites
        .retain(|s| s.suite() == rustls::CipherSuite::TLS13_AES_128_GCM_SHA256);
    provider.install_default().unwrap();
    let installed = CryptoProvider::get_default().unwrap();

    let dir = tempfile::tempdir().unwrap();
    let ca = pki::Ca::new("cluster");
    let client = ca.client("node-1", std::time::Duration::from_secs(3600));
    std::fs::write(dir.path().join("ca.crt"), ca.pem()).unwrap();
    std::fs::write(dir.path().join("client.pem"), client.combined()).unwrap();
    let roots = RootStore::builder(FileSource::new(dir.path().join("ca.crt")))
        .load()
        .await
        .unwrap();
    let identity = IdentityStore::builder(FileSource::new(dir.path().join("client.pem")))
        .load()
        .await
        .unwrap();

    let mut config = roots.client_config();
    config.client_auth_cert_resolver = identity.resolver();
    assert!(Arc::ptr_eq(config.crypto_provider(), installed));
    assert_eq!(config.crypto_provider().cipher_suites.len(), 1);
}
