//! Whose credential an error says was refused: the server's certificate alert (our
//! identity), or our verifier's "unknown issuer" (our CA bundle).

use std::error::Error;

use rustls::{AlertDescription, CertificateError as Verify};

/// The credential a failure points at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Blame {
    /// The server refused the client certificate.
    Identity,
    /// The CA bundle did not verify the server.
    Roots,
}

/// Whose credential, if any, `error` (or one of its causes) says was refused. rustls's
/// error sits inside an `io::Error` (from the handshake, or from the first read of a TLS
/// 1.3 connection, where the server's verdict on the client certificate arrives after the
/// client's handshake is over).
pub(crate) fn blame(error: &(dyn Error + 'static)) -> Option<Blame> {
    let mut next = Some(error);
    while let Some(e) = next {
        if let Some(tls) = e.downcast_ref::<rustls::Error>() {
            return of(tls);
        }
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            // An `io::Error`'s `source()` skips the error it wraps.
            return blame(inner);
        }
        next = e.source();
    }
    None
}

fn of(error: &rustls::Error) -> Option<Blame> {
    use AlertDescription as A;
    match error {
        rustls::Error::AlertReceived(
            A::BadCertificate
            | A::UnsupportedCertificate
            | A::CertificateRevoked
            | A::CertificateExpired
            | A::CertificateUnknown
            | A::CertificateRequired
            | A::UnknownCA
            | A::AccessDenied,
        ) => Some(Blame::Identity),
        rustls::Error::InvalidCertificate(Verify::UnknownIssuer | Verify::BadSignature) => {
            Some(Blame::Roots)
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests;
