//! `reqwest::TlsMiddleware` built exactly as its docs show, with the crate's default
//! features and no process-wide rustls provider: it sends its request. In a process of its
//! own (`support::alone`), as the process default is set once and no other test may
//! install it there.
//! `reqwest_middleware::ClientBuilder::new(reqwest::Client::new())`, the construction the
//! docs showed before, panicked here.

use crate::support::{self, mtls, pki};

use std::time::Duration;

use bearer_reload::reqwest::TlsMiddleware;
use bearer_reload::source::FileSource;
use bearer_reload::tls::{IdentityStore, RootStore};
use rustls::crypto::CryptoProvider;

#[tokio::test]
async fn the_documented_construction_needs_no_process_default_provider() {
    if !support::alone::in_own_process(
        module_path!(),
        "the_documented_construction_needs_no_process_default_provider",
    ) {
        return;
    }
    assert!(
        CryptoProvider::get_default().is_none(),
        "a provider installed"
    );
    let ca = pki::Ca::new("vault");
    let issued = ca.client("app", Duration::from_secs(3600));
    let server = mtls::MtlsServer::start(&ca, &ca.server()).await;
    let dir = tempfile::tempdir().unwrap();
    let (cert, key, ca_file) = (
        dir.path().join("tls.crt"),
        dir.path().join("tls.key"),
        dir.path().join("ca.crt"),
    );
    std::fs::write(&cert, &issued.cert_pem).unwrap();
    std::fs::write(&key, &issued.key_pem).unwrap();
    std::fs::write(&ca_file, ca.pem()).unwrap();

    // The example of `TlsMiddleware`'s docs, with these files.
    let identity = IdentityStore::files(&cert, &key).load().await.unwrap();
    let roots = RootStore::builder(FileSource::new(&ca_file))
        .load()
        .await
        .unwrap();
    let tls = TlsMiddleware::new(roots)
        .identity(identity)
        .client_builder(|| reqwest::Client::builder().timeout(Duration::from_secs(10)));
    let client = reqwest_middleware::ClientBuilder::new(tls.client().unwrap())
        .with(tls)
        .build();
    let response = client.get(server.url("/health")).send().await.unwrap();

    assert_eq!(response.status(), reqwest::StatusCode::OK);
    assert_eq!(server.arrivals().len(), 1);
    assert_eq!(server.arrivals()[0].fingerprint, issued.fingerprint());
    assert!(
        CryptoProvider::get_default().is_none(),
        "a provider installed"
    );
}
