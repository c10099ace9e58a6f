use super::*;
use crate::test_support::pki::Ca;

const DAY: Duration = Duration::from_secs(86_400);

#[test]
fn dates_before_1970_are_read_as_such_and_expiry_starts_at_not_after() {
    let ca = Ca::new("kubernetes");
    // 1960-01-03 to 2024-10-04, both at midnight.
    let (not_before, not_after) = (UNIX_EPOCH - 3650 * DAY, UNIX_EPOCH + 20_000 * DAY);
    let issued = ca.client_valid("n1", not_before, not_after);
    let cert = Certificate::from_der(&CertificateDer::from(issued.cert_der)).unwrap();
    assert_eq!(cert.not_before, not_before);
    assert_eq!(cert.not_after, not_after);
    assert!(cert.is_expired_at(not_after));
    assert!(!cert.is_expired_at(not_after - Duration::from_secs(1)));
}

#[test]
fn debug_shows_every_fact_and_display_a_short_line_for_logs() {
    let ca = Ca::new("kubernetes");
    let not_after = UNIX_EPOCH + 20_000 * DAY;
    let issued = ca.client_valid("n1", UNIX_EPOCH + 19_000 * DAY, not_after);
    let cert = Certificate::from_der(&CertificateDer::from(issued.cert_der.clone())).unwrap();
    let fingerprint = issued.fingerprint();
    assert_eq!(
        format!("{cert:?}"),
        format!(
            "Certificate {{ subject: \"CN=n1, O=system:nodes\", issuer: \"CN=kubernetes\", \
             not_before: 2022-01-08T00:00:00Z, not_after: 2024-10-04T00:00:00Z, \
             fingerprint: \"{fingerprint}\" }}"
        )
    );
    assert_eq!(
        cert.to_string(),
        format!(
            "CN=n1, O=system:nodes ({}…, until 2024-10-04T00:00:00Z)",
            &fingerprint[..11]
        )
    );
}

#[test]
fn bytes_that_are_no_certificate_are_invalid_with_the_parsers_reason() {
    let err = Certificate::from_der(&CertificateDer::from(vec![0x30, 0x03, 0x02])).unwrap_err();
    assert!(matches!(err, CertificateError::Invalid { ref reason } if !reason.is_empty()));
}
