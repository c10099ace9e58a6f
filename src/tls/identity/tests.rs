use std::time::{Duration, SystemTime};

use super::*;
use crate::source::{FileSource, FnSource};
use crate::store::Credential;
use crate::test_support::pki::{Ca, Issued};
use crate::test_support::writers;

const HOUR: Duration = Duration::from_secs(3600);

fn parse(pem: &str) -> Result<Pem<Identity>, CertificateError> {
    Identity::parse(pem.as_bytes(), SystemTime::now())
}

#[test]
fn a_certificate_and_its_key_parse_in_either_order_with_the_certificates_facts() {
    let ca = Ca::new("kubernetes");
    let node = ca.client("system:node:n1", HOUR);
    for pem in [
        node.combined(),
        format!("{}{}", node.key_pem, node.cert_pem),
    ] {
        let parsed = parse(&pem).unwrap();
        let leaf = &parsed.value.chain[0];
        assert_eq!(leaf.subject, "CN=system:node:n1, O=system:nodes");
        assert_eq!(leaf.issuer, "CN=kubernetes");
        assert_eq!(leaf.fingerprint, node.fingerprint());
        assert_eq!(parsed.own_expiry(), Some(leaf.not_after));
        let life = leaf.not_after.duration_since(leaf.not_before).unwrap();
        assert_eq!(life.as_secs(), HOUR.as_secs() + 60);
    }
    // The same pair read twice is the same identity; another certificate is another.
    let again = parse(&node.combined()).unwrap();
    assert_eq!(again.digest, parse(&node.combined()).unwrap().digest);
    let other = ca.client("system:node:n1", HOUR);
    assert_ne!(again.digest, parse(&other.combined()).unwrap().digest);
}

#[test]
fn a_chain_keeps_its_order_and_the_leaf_is_the_one_presented() {
    let root = Ca::new("root");
    let leaf = root.client("leaf", HOUR);
    let pem = format!("{}{}{}", leaf.cert_pem, root.pem(), leaf.key_pem);
    let parsed = parse(&pem).unwrap();
    let subjects: Vec<_> = parsed.value.chain.iter().map(|c| &c.subject).collect();
    assert_eq!(subjects, ["CN=leaf, O=system:nodes", "CN=root"]);
    assert_eq!(parsed.value.key.cert.len(), 2);
}

#[test]
fn each_bad_read_is_refused_with_what_is_wrong_and_no_key_material() {
    let ca = Ca::new("kubernetes");
    let node = ca.client("n1", HOUR);
    let next = ca.client("n1", HOUR);
    let half = &node.combined()[..node.cert_pem.len() + node.key_pem.len() / 2];
    let expired = ca.client_valid("n1", SystemTime::now() - 2 * HOUR, SystemTime::now() - HOUR);
    type Check = fn(&CertificateError) -> bool;
    let cases: Vec<(String, Check)> = vec![
        // The new certificate beside the old key: a read in the middle of a rotation.
        (format!("{}{}", next.cert_pem, node.key_pem), |e| {
            *e == CertificateError::KeyMismatch
        }),
        (half.to_owned(), |e| {
            matches!(e, CertificateError::Pem { .. })
        }),
        (node.cert_pem.clone(), |e| *e == CertificateError::NoKey),
        (node.key_pem.clone(), |e| {
            *e == CertificateError::NoCertificate
        }),
        (String::new(), |e| *e == CertificateError::NoCertificate),
        (expired.combined(), |e| {
            matches!(e, CertificateError::Expired { .. })
        }),
        (format!("{}{}", node.cert_pem, rsa_1024_pem()), |e| {
            matches!(
                e,
                CertificateError::UnsupportedKey { key_type, .. } if key_type == "RSA 1024"
            )
        }),
    ];
    for (pem, want) in cases {
        let err = parse(&pem).err().expect("refused");
        assert!(want(&err), "{err:?}");
        let shown = format!("{err} {err:?}");
        for line in node.key_pem.lines().filter(|l| !l.starts_with("-----")) {
            assert!(!shown.contains(line), "{shown}");
        }
    }
    let err = parse(&expired.combined()).err().unwrap();
    assert!(
        err.to_string().starts_with("the certificate expired at 20"),
        "{err}"
    );
}

/// A pod certificate's `credentialBundlePath` file, as the kubelet writes it: the PKCS#8
/// key first, then the chain, leaf first (here with the signer's intermediate).
#[test]
fn a_pod_certificate_bundle_parses_with_its_chain_of_every_key_type_the_provider_signs_with() {
    use crate::test_support::key_types::{POD_KEY_TYPES, generate};
    let root = Ca::new("cluster root");
    let signer = root.intermediate("example.com/pod-signer");
    for key_type in POD_KEY_TYPES {
        let pod = signer.client_with_key("pod", HOUR, generate(key_type));
        let bundle = pod.credential_bundle();
        assert!(bundle.starts_with("-----BEGIN PRIVATE KEY-----"));
        match parse(&bundle) {
            Ok(parsed) => {
                let subjects: Vec<_> = parsed.value.chain.iter().map(|c| &c.subject).collect();
                assert_eq!(
                    subjects,
                    ["CN=pod", "CN=example.com/pod-signer"],
                    "{key_type}"
                );
                assert_eq!(parsed.value.chain[0].fingerprint, pod.fingerprint());
                assert!(
                    key_type != "ECDSAP521" || !cfg!(feature = "ring"),
                    "ring signed with P-521?"
                );
            }
            Err(e) => {
                // ring alone, of the six, and for P-521 alone: the type and the way out named.
                assert!(
                    key_type == "ECDSAP521" && cfg!(feature = "ring"),
                    "{key_type}: {e}"
                );
                assert_eq!(
                    e,
                    CertificateError::UnsupportedKey {
                        key_type: "ECDSA P-521".to_owned(),
                        provider: "ring",
                        remedy: crate::tls::key_type::remedy("ECDSA P-521", "ring"),
                    }
                );
                assert_eq!(
                    e.to_string(),
                    "the private key (ECDSA P-521) is of a type ring cannot sign with: \
                     aws-lc-rs can (enable feature `aws-lc-rs` of bearer-reload with its \
                     default features off, or install aws-lc-rs as rustls's process default \
                     provider)"
                );
            }
        }
    }
}

/// An RSA key ring does not sign with (under 2048 bits).
fn rsa_1024_pem() -> String {
    use rsa::pkcs8::EncodePrivateKey;
    let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 1024).unwrap();
    key.to_pkcs8_pem(rsa::pkcs8::LineEnding::LF)
        .unwrap()
        .to_string()
}

fn write(path: &std::path::Path, issued: &Issued) {
    writers::rename_over(path, issued.combined()).unwrap();
}

#[tokio::test]
async fn the_store_follows_the_file_keeps_the_last_good_identity_and_names_the_path() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("client.pem");
    let ca = Ca::new("kubernetes");
    let first = ca.client("n1", HOUR);
    write(&path, &first);
    let store = IdentityStore::builder(FileSource::new(&path))
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    assert_eq!(store.generation(), 1);
    assert_eq!(store.certificate().fingerprint, first.fingerprint());
    let status = store.status();
    assert_eq!(status.fingerprint, first.fingerprint());
    assert_eq!(status.subject.as_deref(), Some("CN=n1, O=system:nodes"));

    let second = ca.client("n1", HOUR);
    write(&path, &second);
    assert_eq!(
        store.reload().await.unwrap().fingerprint,
        second.fingerprint()
    );
    assert_eq!(store.generation(), 2);
    // Read again unchanged: no rotation.
    store.reload().await.unwrap();
    assert_eq!(store.generation(), 2);
    // A file of 1 MiB (a long chain, notes beside it) is read; a byte more is not.
    let mut padded = second.combined();
    padded.push_str(&"#".repeat(1024 * 1024 - padded.len() - 1));
    padded.push('\n');
    writers::rename_over(&path, &padded).unwrap();
    store.reload().await.unwrap();
    padded.push('\n');
    writers::rename_over(&path, &padded).unwrap();
    let err = crate::store::Chain(&store.reload().await.unwrap_err()).to_string();
    assert!(
        err.contains("is 1048577 bytes, over the cap of 1048576"),
        "{err}"
    );
    assert_eq!(store.generation(), 2);

    // A half-written file, a mismatched pair, a directory in its place: refused, the last
    // good identity stays, and the error names the path and the problem; the log names the
    // certificate kept.
    let (logs, _guard) = crate::test_support::capture_logs();
    let mismatched = format!("{}{}", ca.client("n1", HOUR).cert_pem, second.key_pem);
    for (bytes, problem) in [
        (second.combined()[..100].to_owned(), "the PEM is malformed"),
        (mismatched, "the private key does not match the certificate"),
    ] {
        writers::rename_over(&path, bytes).unwrap();
        let err = store.reload().await.unwrap_err();
        let chain = crate::store::Chain(&err).to_string();
        let want = format!("cannot fetch from file {}: {problem}", path.display());
        assert!(chain.starts_with(&want), "{chain}");
        assert_eq!(store.certificate().fingerprint, second.fingerprint());
        assert_eq!(store.generation(), 2);
        let status = store.status();
        assert!(status.last_error.is_some());
        assert!(!status.expired);
    }
    let kept = format!("client certificate {}", store.certificate());
    assert!(logs.text().contains(&kept), "{}", logs.text());
    let warning = "reload failed; keeping the last good one credential=a client certificate";
    assert!(logs.text().contains(warning), "{}", logs.text());
    std::fs::remove_file(&path).unwrap();
    std::fs::create_dir(&path).unwrap();
    let err = store.reload().await.unwrap_err();
    let chain = crate::store::Chain(&err).to_string();
    assert!(chain.contains("the path is a directory"), "{chain}");
    assert_eq!(store.certificate().fingerprint, second.fingerprint());
}

#[tokio::test]
async fn the_debug_and_the_status_hold_no_key() {
    let ca = Ca::new("kubernetes");
    let node = ca.client("n1", HOUR);
    let pem = node.combined();
    let source = crate::test_support::pem("pem", pem);
    let store = IdentityStore::builder(source).load().await.unwrap();
    let shown = format!("{store:?} {:?} {}", store.status(), store.store.current());
    assert!(shown.contains("CN=n1"), "{shown}");
    let debug = format!("{store:?}");
    assert!(
        debug.starts_with("IdentityStore { source: \"loader pem\", certificate: Certificate { subject: \"CN=n1, O=system:nodes\""),
        "{debug}"
    );
    // rustls's view of it (a `ClientConfig`'s `Debug` shows its resolver): the store and
    // the certificate it holds now.
    let resolver = format!("{:?}", store.resolver());
    let current = store.store.current().to_string();
    assert!(current.contains("CN=n1"), "{current}");
    assert_eq!(
        resolver,
        format!("IdentityStore {{ source: \"loader pem\", current: {current}, .. }}")
    );
    let shown = format!("{shown} {resolver}");
    for line in node.key_pem.lines().filter(|l| !l.starts_with("-----")) {
        assert!(!shown.contains(line), "{shown}");
    }
}

#[tokio::test]
async fn the_resolver_answers_with_the_current_identity() {
    let ca = Ca::new("kubernetes");
    let pems = Arc::new(std::sync::Mutex::new(ca.client("n1", HOUR)));
    let source = {
        let pems = pems.clone();
        FnSource::new("pem", move || {
            let pem = pems.lock().unwrap().combined();
            async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
        })
    };
    let store = IdentityStore::builder(source)
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let resolver = store.resolver();
    let presented = |r: &Arc<dyn ResolvesClientCert>| {
        let key = r
            .resolve(&[], &[SignatureScheme::ECDSA_NISTP256_SHA256])
            .unwrap();
        crate::test_support::pki::fingerprint(key.end_entity_cert().unwrap())
    };
    assert_eq!(presented(&resolver), pems.lock().unwrap().fingerprint());
    let next = ca.client("n1", HOUR);
    *pems.lock().unwrap() = next.clone();
    store.reload().await.unwrap();
    assert_eq!(presented(&resolver), next.fingerprint());
    assert!(resolver.has_certs());
}

/// The status says expired once the certificate in use is, and the expiry warning speaks
/// of it by its `notAfter`: not while it is valid, once when a read after it finds nothing
/// newer.
#[tokio::test(start_paused = true)]
async fn the_status_says_expired_once_the_certificate_in_use_is_and_warns_once() {
    let (logs, _guard) = crate::test_support::capture_logs();
    let ca = Ca::new("kubernetes");
    let now = SystemTime::now();
    let pem = ca.client_valid("n1", now - HOUR, now + HOUR).combined();
    let source = crate::test_support::pem("pem", pem);
    let store = IdentityStore::builder(source)
        .no_watch()
        .no_periodic_refresh()
        .clock(crate::clock::Clock::tokio_from(now))
        .load()
        .await
        .unwrap();
    assert!(!store.status().expired);
    store.reload().await.unwrap();
    assert_eq!(logs.count("has expired"), 0, "{}", logs.text());
    tokio::time::advance(2 * HOUR).await;
    // The source still has nothing newer: the expired certificate stays in use, and says so.
    let status = store.status();
    assert!(status.expired, "{status:?}");
    assert_eq!(status.fingerprint, store.certificate().fingerprint);
    // The source's certificate is the expired one: refused, and the one in use warned of.
    store.reload().await.unwrap_err();
    store.reload().await.unwrap_err();
    assert_eq!(logs.count("has expired"), 1, "{}", logs.text());
}

/// A certificate whose source says it expired before its `notAfter` (an exec plugin's
/// `expirationTimestamp`): the store counts it expired, as its expiry warning does.
#[tokio::test]
async fn the_sources_earlier_expiry_makes_the_identity_expired() {
    struct Dated(String, SystemTime);
    impl TokenSource for Dated {
        type Error = std::convert::Infallible;
        async fn fetch(
            &self,
            _: crate::source::FetchContext,
        ) -> Result<crate::source::Fetched, Self::Error> {
            let fetched = crate::source::Fetched::new(self.0.clone());
            Ok(fetched
                .with_expires_at(self.1)
                .with_refresh_at(self.1 - HOUR))
        }
        fn describe(&self) -> String {
            "dated".to_owned()
        }
    }
    let ca = Ca::new("kubernetes");
    let issued = ca.client("n1", HOUR);
    let past = SystemTime::now() - Duration::from_secs(60);
    let store = IdentityStore::builder(Dated(issued.combined(), past))
        .load()
        .await
        .unwrap();
    let status = store.status();
    assert!(store.certificate().not_after > SystemTime::now());
    assert_eq!(status.expires_at, Some(past));
    assert!(status.expired, "{status:?}");
    // And when it asked to be read again is the store's refresh point.
    assert_eq!(status.refresh_at, Some(past - HOUR));
}
