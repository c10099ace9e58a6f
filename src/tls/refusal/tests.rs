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
