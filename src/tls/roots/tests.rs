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
        .no_periodic_refresh()
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
        .no_periodic_refresh()
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
        roots.store.current().to_string(),
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
        .no_periodic_refresh()
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

/// A bundle through a file, with the default size cap; not watched, so that each read is
/// the test's own.
async fn load_default(pem: &str) -> (RootStore, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("ca-certificates.crt");
    writers::rename_over(&path, pem).unwrap();
    let roots = RootStore::builder(FileSource::new(&path))
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await;
    (roots.unwrap(), dir)
}

#[tokio::test]
async fn a_system_sized_and_a_corporate_sized_bundle_load_with_the_defaults() {
    // Debian's ca-certificates.crt: 140 roots, about 220 KB.
    let debian = crate::test_support::pki::bundle(140, 1570);
    assert!(
        (200_000..240_000).contains(&debian.len()),
        "{}",
        debian.len()
    );
    let (roots, _dir) = load_default(&debian).await;
    assert_eq!(roots.certificates().len(), 140);
    assert_eq!(roots.certificates()[139].subject, "CN=root 139");
    assert_eq!(roots.status().skipped_certificates, 0);

    // A corporate bundle with intermediates, past 1 MB.
    let corporate = crate::test_support::pki::bundle(480, 2200);
    assert!(corporate.len() > 1_000_000, "{}", corporate.len());
    let (roots, _dir) = load_default(&corporate).await;
    assert_eq!(roots.certificates().len(), 480);

    // The cap: 16 MiB are read, a byte more is not.
    let mut padded = corporate;
    padded.push_str(&"#".repeat(16 * 1024 * 1024 - padded.len() - 1));
    padded.push('\n');
    let (roots, dir) = load_default(&padded).await;
    assert_eq!(roots.certificates().len(), 480);
    padded.push('\n');
    let path = dir.path().join("ca-certificates.crt");
    writers::rename_over(&path, &padded).unwrap();
    let err = crate::store::Chain(&roots.reload().await.unwrap_err()).to_string();
    assert!(
        err.contains("is 16777217 bytes, over the cap of 16777216"),
        "{err}"
    );
}

/// `der` as a `CERTIFICATE` section.
fn section(der: &[u8]) -> String {
    use base64::Engine as _;
    let base64 = base64::engine::general_purpose::STANDARD.encode(der);
    format!("-----BEGIN CERTIFICATE-----\n{base64}\n-----END CERTIFICATE-----\n")
}

#[tokio::test]
async fn an_unusable_certificate_is_skipped_warned_about_once_and_counted() {
    let (one, two, three) = (Ca::new("one"), Ca::new("two"), Ca::new("three"));
    // Whole base64, but DER that is no certificate.
    let garbage = section(&[0x30, 0x03, 0x02, 0x01, 0x05]);
    // Bytes after the certificate's DER: x509-parser reads its subject, rustls refuses it.
    let mut trailing = three.der();
    trailing.extend_from_slice(&[0, 0]);
    let trailing = section(&trailing);
    let bundle = format!("{}{garbage}{}{trailing}", one.pem(), two.pem());
    let (logs, _guard) = crate::test_support::capture_logs();
    let (roots, dir) = load_default(&bundle).await;
    let subjects: Vec<_> = roots
        .certificates()
        .into_iter()
        .map(|c| c.subject)
        .collect();
    assert_eq!(subjects, ["CN=one", "CN=two"]);
    assert_eq!(roots.status().skipped_certificates, 2);
    let text = logs.text();
    assert_eq!(
        logs.count("a certificate of the CA bundle cannot be used"),
        2,
        "{text}"
    );
    let path = dir.path().join("ca-certificates.crt");
    assert!(
        text.contains(&format!("source=file {}", path.display())),
        "{text}"
    );
    assert!(
        text.contains("position=2 subject=\"(does not parse)\""),
        "{text}"
    );
    assert!(text.contains("position=4 subject=\"CN=three\""), "{text}");
    assert!(verify(&roots, &one.server()).is_ok() && verify(&roots, &two.server()).is_ok());

    // The same bundle read again (the timer's backstop) warns no more.
    roots.reload().await.unwrap();
    assert_eq!(
        logs.count("a certificate of the CA bundle cannot be used"),
        2,
        "{}",
        logs.text()
    );

    // A bundle of nothing usable is refused whole: the last good one stays.
    writers::rename_over(&path, format!("{garbage}{garbage}")).unwrap();
    let err = roots.reload().await.unwrap_err();
    let chain = crate::store::Chain(&err).to_string();
    assert!(chain.contains("a certificate is invalid"), "{chain}");
    assert_eq!(roots.certificates().len(), 2);
    assert_eq!(roots.status().skipped_certificates, 2);

    // A bundle cut short after its first certificate is refused whole too.
    let cut = format!("{}{}", three.pem(), &one.pem()[..200]);
    writers::rename_over(&path, cut).unwrap();
    let err = roots.reload().await.unwrap_err();
    let chain = crate::store::Chain(&err).to_string();
    assert!(chain.contains("the PEM is malformed"), "{chain}");
    let subjects: Vec<_> = roots
        .certificates()
        .into_iter()
        .map(|c| c.subject)
        .collect();
    assert_eq!(subjects, ["CN=one", "CN=two"]);
}

/// `ca`'s certificate with the first digit of its `notBefore` made an `x`: rustls takes it
/// as an anchor (it reads the subject, key and name constraints, not the dates), x509-parser
/// refuses the date.
fn bad_date(ca: &Ca) -> Vec<u8> {
    let mut der = ca.der();
    // The validity: a SEQUENCE of two 13-byte UTCTimes.
    let validity = der.windows(4).position(|w| w == [0x30, 0x1e, 0x17, 0x0d]);
    der[validity.expect("a validity") + 4] = b'x';
    der
}

#[tokio::test]
async fn a_certificate_x509_parser_refuses_is_not_trusted_even_when_rustls_would_take_it() {
    let (one, bad) = (Ca::new("one"), Ca::new("bad"));
    let corrupt = CertificateDer::from(bad_date(&bad));
    assert!(RootCertStore::empty().add(corrupt.clone()).is_ok());
    assert!(Certificate::from_der(&corrupt).is_err());
    let (one_server, bad_server) = (one.server(), bad.server());
    let unknown = Err(TlsError::InvalidCertificate(
        rustls::CertificateError::UnknownIssuer,
    ));

    // Skipped, as the status says, and not trusted.
    let (roots, dir) = load_default(&format!("{}{}", one.pem(), section(&corrupt))).await;
    let subjects: Vec<_> = roots
        .certificates()
        .into_iter()
        .map(|c| c.subject)
        .collect();
    assert_eq!(subjects, ["CN=one"]);
    assert_eq!(roots.status().skipped_certificates, 1);
    assert!(verify(&roots, &one_server).is_ok());
    assert_eq!(verify(&roots, &bad_server), unknown);

    // Removed from the bundle: nothing trusted changed, so no rotation, and still refused.
    let path = dir.path().join("ca-certificates.crt");
    writers::rename_over(&path, one.pem()).unwrap();
    roots.reload().await.unwrap();
    assert_eq!(roots.generation(), 1);
    assert_eq!(verify(&roots, &bad_server), unknown);

    // Put back whole: a new bundle, and trusted.
    writers::rename_over(&path, format!("{}{}", one.pem(), bad.pem())).unwrap();
    assert_eq!(roots.reload().await.unwrap().len(), 2);
    assert_eq!(roots.generation(), 2);
    assert!(verify(&roots, &bad_server).is_ok());
}
