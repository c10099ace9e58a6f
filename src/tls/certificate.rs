//! [`Certificate`]: what a certificate says about itself, for status and logs.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rustls::pki_types::CertificateDer;
use sha2::{Digest, Sha256};

use super::CertificateError;
use crate::clock::Rfc3339;

/// The public facts of one X.509 certificate (no key), as
/// [`IdentityStore::certificate`](super::IdentityStore::certificate) and
/// [`RootStore::certificates`](super::RootStore::certificates) give them.
#[derive(Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Certificate {
    /// The subject's distinguished name, its attributes in the certificate's order with
    /// `, ` between them (`CN=system:node:n1, O=system:nodes`): not RFC 4514's string,
    /// which reverses them.
    pub subject: String,
    /// The issuer's distinguished name, written as [`subject`](Self::subject) is.
    pub issuer: String,
    /// The start of the validity period.
    pub not_before: SystemTime,
    /// The end of the validity period.
    pub not_after: SystemTime,
    /// The SHA-256 of the certificate's DER, as `openssl x509 -noout -fingerprint -sha256`
    /// prints it (`AB:CD:...`).
    pub fingerprint: String,
}

impl Certificate {
    /// Reads the facts of `der`.
    pub(crate) fn from_der(der: &CertificateDer<'_>) -> Result<Self, CertificateError> {
        let (_, cert) =
            x509_parser::parse_x509_certificate(der).map_err(|e| CertificateError::Invalid {
                reason: e.to_string(),
            })?;
        let time = |t: x509_parser::time::ASN1Time| {
            let secs = t.timestamp();
            match u64::try_from(secs) {
                Ok(secs) => UNIX_EPOCH + Duration::from_secs(secs),
                Err(_) => UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs()),
            }
        };
        let validity = cert.validity();
        let digest = Sha256::digest(der.as_ref());
        let fingerprint = digest
            .iter()
            .map(|b| format!("{b:02X}"))
            .collect::<Vec<_>>()
            .join(":");
        Ok(Self {
            subject: cert.subject().to_string(),
            issuer: cert.issuer().to_string(),
            not_before: time(validity.not_before),
            not_after: time(validity.not_after),
            fingerprint,
        })
    }

    /// Whether the certificate has expired at `now`.
    pub fn is_expired_at(&self, now: SystemTime) -> bool {
        now >= self.not_after
    }
}

impl fmt::Debug for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Certificate")
            .field("subject", &self.subject)
            .field("issuer", &self.issuer)
            .field("not_before", &Rfc3339(self.not_before))
            .field("not_after", &Rfc3339(self.not_after))
            .field("fingerprint", &self.fingerprint)
            .finish()
    }
}

/// `subject (fingerprint…, until notAfter)`, for logs.
impl fmt::Display for Certificate {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let short = self.fingerprint.get(..11).unwrap_or(&self.fingerprint);
        write!(
            f,
            "{} ({short}…, until {})",
            self.subject,
            Rfc3339(self.not_after)
        )
    }
}

#[cfg(test)]
mod tests;
