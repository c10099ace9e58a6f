use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::{Error as PemError, PemObject};

use super::CertificateError;

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
