use std::sync::atomic::{AtomicUsize, Ordering};

use super::*;
use crate::source::FnSource;
use crate::test_support::pki::Ca;
use crate::tls::{IdentityStore, RootStore};

/// A source answering with what `current` holds at each fetch.
fn rotating(name: &str, current: &Arc<Mutex<String>>) -> FnSource {
    let current = current.clone();
    FnSource::new(name, move || {
        let pem = lock(&current).clone();
        async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
    })
}

/// A generation's client is built once: a caller that raced to the generations just built
/// finds them built, and one that read older generations before a rotation gets the newer
/// client, not a rebuild of the old.
#[tokio::test]
async fn a_generations_client_is_built_once_and_again_only_for_newer_credentials() {
    let ca = Ca::new("first");
    let bundle = Arc::new(Mutex::new(ca.pem()));
    let roots = RootStore::builder(rotating("ca", &bundle))
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let day = std::time::Duration::from_secs(86_400);
    let cert = Arc::new(Mutex::new(ca.client("first", day).combined()));
    let identity = IdentityStore::builder(rotating("cert", &cert))
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let builds = Arc::new(AtomicUsize::new(0));
    let counted = builds.clone();
    let tls = TlsMiddleware::new(roots.clone())
        .identity(identity.clone())
        .client_builder(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            Client::builder()
        });
    let shared = &tls.shared;

    let before = shared.stores.generations();
    let first = shared.generation();
    assert_eq!(builds.load(Ordering::SeqCst), 1);
    let raced = shared.newer(before);
    assert!(
        Arc::ptr_eq(&first, &raced),
        "the same generations built again"
    );
    assert_eq!(builds.load(Ordering::SeqCst), 1);

    // The certificate rotates, then the bundle: each is newer, each builds once.
    *lock(&cert) = ca.client("second", day).combined();
    identity.reload().await.unwrap();
    let renewed = shared.generation();
    assert_eq!(renewed.generations.identity, before.identity + 1);
    assert_eq!(builds.load(Ordering::SeqCst), 2);
    *lock(&bundle) = Ca::new("second").pem();
    roots.reload().await.unwrap();
    let rotated = shared.generation();
    assert_eq!(rotated.generations.roots, before.roots + 1);
    assert_eq!(builds.load(Ordering::SeqCst), 3);
    for stale in [before, renewed.generations] {
        let answer = shared.newer(stale);
        assert!(
            Arc::ptr_eq(&rotated, &answer),
            "older generations built again"
        );
    }
    assert_eq!(builds.load(Ordering::SeqCst), 3);
}

/// Its `Debug` shows the stores and the generation in use, never a key.
#[tokio::test]
async fn debug_shows_the_stores_and_generations() {
    let roots = RootStore::builder(crate::test_support::pem("ca", Ca::new("debug").pem()))
        .load()
        .await
        .unwrap();
    let tls = TlsMiddleware::new(roots);
    let before = format!("{tls:?}");
    assert!(before.starts_with("TlsMiddleware {"), "{before}");
    assert!(before.contains("roots: RootStore"), "{before}");
    assert!(before.contains("generations: None"), "{before}");
    tls.shared.generation();
    let after = format!("{tls:?}");
    assert!(
        after.contains("generations: Some(Generations { identity: 0, roots: 1 })"),
        "{after}"
    );
}
