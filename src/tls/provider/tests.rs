use super::*;

fn provider_with_suites(n: usize) -> CryptoProvider {
    let mut provider = FEATURE
        .map(|(feature, _)| feature())
        .unwrap_or_else(test_provider);
    provider.cipher_suites.truncate(n);
    provider
}

/// A provider for the tests built without a provider feature: the dev-dependency's ring.
fn test_provider() -> CryptoProvider {
    rustls::crypto::ring::default_provider()
}

#[test]
fn the_installed_default_comes_before_the_feature() {
    let installed = Arc::new(provider_with_suites(1));
    let (picked, name) = pick(Some(&installed), Some((test_provider, "ring"))).unwrap();
    assert!(Arc::ptr_eq(&picked, &installed));
    assert_eq!(name, INSTALLED);
}

#[test]
fn without_an_installed_default_the_feature_provides() {
    let (picked, name) = pick(None, Some((test_provider, "ring"))).unwrap();
    assert_eq!(name, "ring");
    assert_eq!(
        picked.cipher_suites.len(),
        test_provider().cipher_suites.len()
    );
}

#[test]
fn the_features_provider_is_named_after_its_feature() {
    let name = FEATURE.map(|(_, name)| name);
    let want = if cfg!(feature = "ring") {
        Some("ring")
    } else if cfg!(feature = "aws-lc-rs") {
        Some("aws-lc-rs")
    } else {
        None
    };
    assert_eq!(name, want);
}

#[test]
fn with_neither_the_error_says_what_to_do() {
    let err = pick(None, None).unwrap_err();
    assert_eq!(err, CertificateError::NoCryptoProvider);
    assert_eq!(
        err.to_string(),
        "no rustls crypto provider: enable feature `ring` or `aws-lc-rs` of bearer-reload, \
         or install a process default (`CryptoProvider::install_default`)"
    );
}

/// Built with no provider feature, and no process default (no test of this binary
/// installs one): loading a store is the clear error, not a panic.
#[cfg(not(any(feature = "ring", feature = "aws-lc-rs")))]
#[tokio::test]
async fn with_no_provider_a_store_does_not_load() {
    let ca = crate::test_support::pki::Ca::new("ca");
    let err = crate::tls::RootStore::builder(crate::test_support::pem("ca", ca.pem()))
        .load()
        .await
        .unwrap_err();
    let chain = crate::store::Chain(&err).to_string();
    assert!(chain.contains("no rustls crypto provider"), "{chain}");
}
