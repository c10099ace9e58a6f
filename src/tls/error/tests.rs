use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::{Error as PemError, PemObject};

use http::Uri;

use super::{CertificateError, Redacted, UriError};

fn problem(pem: &str) -> &'static str {
    let err = CertificateDer::pem_slice_iter(pem.as_bytes())
        .collect::<Result<Vec<_>, _>>()
        .unwrap_err();
    match CertificateError::from(err) {
        CertificateError::Pem { problem } => problem,
        other => panic!("{other:?}"),
    }
}

#[test]
fn each_pem_fault_is_named_without_its_bytes() {
    assert_eq!(
        problem("-----BEGIN CERTIFICATE-----\nMIIBsecret"),
        "a section has no END line (a half-written file?)"
    );
    assert_eq!(
        problem("-----BEGIN CERTIFICATE----\nMIIB\n-----END CERTIFICATE-----\n"),
        "a section's BEGIN line is malformed"
    );
    assert_eq!(
        problem("-----BEGIN CERTIFICATE-----\n!!secret!!\n-----END CERTIFICATE-----\n"),
        "a section's base64 does not decode"
    );
    // Over 256 MiB: past any file this crate reads, but named all the same.
    let too_large = CertificateError::from(PemError::SectionTooLarge);
    assert_eq!(
        too_large.to_string(),
        "the PEM is malformed: a section is too large"
    );
    let other = CertificateError::from(PemError::NoItemsFound);
    assert_eq!(other.to_string(), "the PEM is malformed: it cannot be read");
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Every way an error is shown: its message, its `Debug` (plain and `{:#?}`), and the
/// chain of messages and `Debug` anyhow prints (`{:#}`, `{:?}`).
fn shown(error: BoxError) -> Vec<String> {
    let mut shown = vec![
        error.to_string(),
        format!("{error:?}"),
        format!("{error:#?}"),
    ];
    let error = anyhow::Error::from_boxed(error);
    shown.extend([
        format!("{error}"),
        format!("{error:#}"),
        format!("{error:?}"),
    ]);
    shown
}

/// Each of `shown` names `host` and shows none of `user:secret@` (a backtrace may name
/// the test, `..._userinfo`).
fn assert_no_userinfo(shown: &[String], host: &str) {
    for text in shown {
        assert!(
            !text.contains("secret") && !text.contains("user:"),
            "{text}"
        );
        assert!(text.contains(host), "{text}");
    }
}

#[test]
fn redacted_shows_a_uri_without_its_userinfo() {
    let uri: Uri = "https://user:secret@host:443/x?y=z".parse().unwrap();
    assert_eq!(Redacted(&uri).to_string(), "https://host:443/x?y=z");
    assert_eq!(format!("{:?}", Redacted(&uri)), "https://host:443/x?y=z");
    assert_eq!(Redacted(&uri).uri(), "https://host:443/x?y=z");
    let user: Uri = "socks5h://user@[::1]:1080".parse().unwrap();
    assert_eq!(Redacted(&user).to_string(), "socks5h://[::1]:1080/");
    assert_eq!(Redacted(&user).uri(), "socks5h://[::1]:1080/");
    // Without userinfo: as the URI shows itself.
    for plain in [
        "https://host",
        "http://proxy.internal:3128",
        "https://[::1]:8443/a?b",
        "/p",
    ] {
        let uri: Uri = plain.parse().unwrap();
        assert_eq!(Redacted(&uri).to_string(), uri.to_string());
        assert_eq!(format!("{:?}", Redacted(&uri)), format!("{uri:?}"));
        assert_eq!(Redacted(&uri).uri(), uri);
    }
    // What `uri` falls back on never happens: no authority ends in `@`.
    assert!("https://user:secret@".parse::<Uri>().is_err());
}

#[test]
fn a_uri_error_shows_no_userinfo() {
    for error in [
        UriError::NotHttps {
            uri: "http://user:secret@host:443/x".parse().unwrap(),
        },
        UriError::NoHost {
            uri: "https://user:secret@host:443/x".parse().unwrap(),
        },
    ] {
        let mut all = vec![format!("{error:?}")];
        all.extend(shown(Box::new(error.clone())));
        // As callers get it: inside an `io::Error`.
        all.extend(shown(Box::new(std::io::Error::from(error))));
        assert_no_userinfo(&all, "host:443/x");
    }
}

/// A `tonic::TlsChannel`'s connect error names its origin without the userinfo.
#[cfg(feature = "tonic")]
#[tokio::test]
async fn a_tonic_channel_error_shows_no_userinfo() {
    use bytes::Bytes;
    use http_body_util::Empty;
    use tower::ServiceExt;

    let ca = crate::test_support::pki::Ca::new("ca");
    let roots = crate::tls::RootStore::builder(crate::test_support::pem("ca", ca.pem()))
        .load()
        .await
        .unwrap();
    // A port nothing listens on.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let host = format!("127.0.0.1:{}", listener.local_addr().unwrap().port());
    drop(listener);
    let origin = format!("https://user:secret@{host}/x").parse().unwrap();
    let channel = crate::tonic::TlsChannel::<Empty<Bytes>>::new(origin, roots).unwrap();
    let error = channel
        .oneshot(http::Request::new(Empty::new()))
        .await
        .unwrap_err();
    let shown = shown(error);
    assert!(
        shown[0].starts_with("cannot connect to https://127.0.0.1:"),
        "{}",
        shown[0]
    );
    assert_no_userinfo(&shown, &format!("{host}/x"));
}
