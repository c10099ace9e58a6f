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

    // Half-written, or no certificate at all: the bundle in use stays.
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
    let status = roots.status();
    assert_eq!(roots.certificates().len(), 1);
    assert_eq!((status.subject, status.expires_at), (None, None));
    assert!(!status.expired && status.last_error.is_some());
    assert_eq!(status.rotations, 2);
    let _ = SystemTime::now() + Duration::ZERO;
}
