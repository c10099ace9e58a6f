use std::time::{Duration, SystemTime};

use super::*;
use crate::source::FileSource;
use crate::test_support::pki::Ca;
use crate::test_support::writers;

fn verify(roots: &RootStore, server: &crate::test_support::pki::Issued) -> Result<(), TlsError> {
    let verifier = roots.verifier();
    let name = ServerName::try_from("localhost").unwrap();
    verifier
        .verify_server_cert(
            &CertificateDer::from(server.cert_der.clone()),
            &[],
            &name,
            &[],
            UnixTime::now(),
        )
        .map(|_| ())
}

#[tokio::test]
async fn the_verifier_trusts_the_current_bundle_and_a_bad_read_keeps_the_last_good_one() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.crt");
    let (old, new) = (Ca::new("old"), Ca::new("new"));
    writers::rename_over(&path, old.pem()).unwrap();
    let roots = RootStore::builder(FileSource::new(&path))
        .no_watch()
        .refresh_interval(None)
        .load()
        .await
        .unwrap();
    let (old_server, new_server) = (old.server(), new.server());
    assert!(verify(&roots, &old_server).is_ok());
    assert_eq!(
        verify(&roots, &new_server),
        Err(TlsError::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer
        ))
    );

    // Both, during a CA rotation; then the new one alone.
    writers::rename_over(&path, format!("{}{}", old.pem(), new.pem())).unwrap();
    assert_eq!(roots.reload().await.unwrap().len(), 2);
    assert!(verify(&roots, &old_server).is_ok() && verify(&roots, &new_server).is_ok());
    writers::rename_over(&path, new.pem()).unwrap();
    let certs = roots.reload().await.unwrap();
    assert_eq!(certs[0].subject, "CN=new");
    assert!(verify(&roots, &new_server).is_ok() && verify(&roots, &old_server).is_err());
    assert_eq!(roots.generation(), 3);

    // Half-written, or no certificate at all: the bundle in use stays, and the warning
    // names it.
    let (logs, _guard) = crate::test_support::capture_logs();
    for (bytes, problem) in [
        (new.pem()[..80].to_owned(), "the PEM is malformed"),
        ("not a bundle\n".to_owned(), "no certificate in the PEM"),
    ] {
        writers::rename_over(&path, bytes).unwrap();
        let err = roots.reload().await.unwrap_err();
        let chain = crate::store::Chain(&err).to_string();
        let want = format!("cannot fetch from file {}: {problem}", path.display());
        assert!(chain.starts_with(&want), "{chain}");
        assert!(verify(&roots, &new_server).is_ok());
        assert_eq!(roots.generation(), 3);
    }
    let kept = format!("CA bundle of 1 certificate: {}", roots.certificates()[0]);
    assert!(logs.text().contains(&kept), "{}", logs.text());
    let warning = "reload failed; keeping the last good one credential=a CA bundle";
    assert!(logs.text().contains(warning), "{}", logs.text());
    let status = roots.status();
    assert_eq!(roots.certificates().len(), 1);
    assert_eq!((status.subject, status.expires_at), (None, None));
    assert!(!status.expired && status.last_error.is_some());
    assert_eq!(status.rotations, 2);
    let _ = SystemTime::now() + Duration::ZERO;
}

#[tokio::test]
async fn debug_names_the_source_and_the_authorities_and_display_counts_them() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca.crt");
    let (one, two) = (Ca::new("one"), Ca::new("two"));
    writers::rename_over(&path, format!("{}{}", one.pem(), two.pem())).unwrap();
    let roots = RootStore::builder(FileSource::new(&path))
        .no_watch()
        .refresh_interval(None)
        .load()
        .await
        .unwrap();
    // A bundle's fingerprint is short, and changes with any of its authorities.
    let both = roots.status().fingerprint;
    assert!(
        both.len() == 8 && both.bytes().all(|b| b.is_ascii_hexdigit()),
        "{both}"
    );
    let shown = format!("{roots:?}");
    let want = format!(
        "RootStore {{ source: \"file {}\", certificates: [Certificate {{ subject: \"CN=one\"",
        path.display()
    );
    assert!(shown.starts_with(&want), "{shown}");
    assert!(shown.contains("subject: \"CN=two\""), "{shown}");
    assert_eq!(
        roots.token_store().current().to_string(),
        "CA bundle of 2 certificates"
    );

    writers::rename_over(&path, two.pem()).unwrap();
    roots.reload().await.unwrap();
    let fingerprint = roots.status().fingerprint;
    assert!(
        fingerprint.len() == 8 && fingerprint != both,
        "{fingerprint}"
    );
}

#[tokio::test(start_paused = true)]
async fn the_status_says_expired_once_every_authority_in_the_bundle_is() {
    let now = SystemTime::now();
    let hour = Duration::from_secs(3600);
    let soon = Ca::valid("soon", now - hour, now + hour);
    let later = Ca::valid("later", now - hour, now + 3 * hour);
    let bundle = format!("{}{}", soon.pem(), later.pem());
    let source = crate::test_support::pem("ca", bundle);
    let roots = RootStore::builder(source)
        .no_watch()
        .refresh_interval(None)
        .clock(crate::clock::Clock::tokio_from(now))
        .load()
        .await
        .unwrap();
    assert!(!roots.status().expired);
    tokio::time::advance(2 * hour).await;
    // One authority left: servers it signed are still verified.
    assert!(!roots.status().expired);
    tokio::time::advance(2 * hour).await;
    assert!(roots.status().expired);
}
