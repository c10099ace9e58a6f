use super::*;

#[test]
fn an_alert_or_an_unknown_issuer_is_found_under_io_and_hyper_errors() {
    let alert = std::io::Error::new(
        std::io::ErrorKind::InvalidData,
        rustls::Error::AlertReceived(AlertDescription::CertificateExpired),
    );
    assert_eq!(blame(&alert), Some(Blame::Identity));
    let unknown = std::io::Error::other(rustls::Error::InvalidCertificate(Verify::UnknownIssuer));
    assert_eq!(blame(&unknown), Some(Blame::Roots));
    // A name mismatch, a closed connection: no credential to reload.
    let name = std::io::Error::other(rustls::Error::InvalidCertificate(Verify::NotValidForName));
    assert_eq!(blame(&name), None);
    let reset = std::io::Error::from(std::io::ErrorKind::ConnectionReset);
    assert_eq!(blame(&reset), None);
    // Deeper in a chain: an error whose source is the io error.
    #[derive(Debug, thiserror::Error)]
    #[error("connect")]
    struct Outer(#[source] std::io::Error);
    assert_eq!(blame(&Outer(alert)), Some(Blame::Identity));
}

/// A rustls error in the chain as itself, not inside an `io::Error` whose words would
/// tell: its variant decides.
#[test]
fn a_rustls_error_in_the_chain_is_read_by_its_variant() {
    #[derive(Debug, thiserror::Error)]
    #[error("handshake")]
    struct Outer(#[source] rustls::Error);
    let blame_of = |error| blame(&Outer(error));
    for alert in IDENTITY_ALERTS {
        assert_eq!(
            blame_of(rustls::Error::AlertReceived(alert)),
            Some(Blame::Identity)
        );
    }
    let close = rustls::Error::AlertReceived(AlertDescription::CloseNotify);
    assert_eq!(blame_of(close), None);
    for verdict in [Verify::UnknownIssuer, Verify::BadSignature] {
        let error = rustls::Error::InvalidCertificate(verdict);
        assert_eq!(blame_of(error), Some(Blame::Roots));
    }
    let name = rustls::Error::InvalidCertificate(Verify::NotValidForName);
    assert_eq!(blame_of(name), None);
}

/// Under HTTP/2, h2 keeps an I/O error's kind and message only: the rustls error is found
/// by its words, each alert and verdict as rustls shows it.
#[test]
fn under_http2_an_alert_is_found_by_the_words_rustls_shows_it_with() {
    let as_h2 = |error: rustls::Error| {
        std::io::Error::new(std::io::ErrorKind::InvalidData, error.to_string())
    };
    for alert in IDENTITY_ALERTS {
        let error = as_h2(rustls::Error::AlertReceived(alert));
        assert_eq!(blame(&error), Some(Blame::Identity), "{error}");
    }
    let close = as_h2(rustls::Error::AlertReceived(AlertDescription::CloseNotify));
    assert_eq!(blame(&close), None);
    for verdict in [Verify::UnknownIssuer, Verify::BadSignature] {
        let error = as_h2(rustls::Error::InvalidCertificate(verdict));
        assert_eq!(blame(&error), Some(Blame::Roots), "{error}");
    }
    let name = as_h2(rustls::Error::InvalidCertificate(Verify::NotValidForName));
    assert_eq!(blame(&name), None);
}

#[test]
fn only_an_idempotent_method_goes_again_after_an_uncertain_failure() {
    let idempotent = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"];
    let not = ["POST", "PATCH", "CONNECT", "WATCH"];
    for name in idempotent.iter().chain(&not) {
        let method = Method::from_bytes(name.as_bytes()).unwrap();
        // Proved unprocessed: any method goes again.
        assert!(may_send_again(&method, Failure::Refused), "{name}");
        assert!(may_send_again(&method, Failure::NotWritten), "{name}");
        assert_eq!(
            may_send_again(&method, Failure::Uncertain),
            idempotent.contains(name),
            "{name}"
        );
    }
}
