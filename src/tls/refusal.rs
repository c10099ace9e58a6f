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
            return blame(inner).or_else(|| of_message(&inner.to_string()));
        }
        next = e.source();
    }
    None
}

/// The alerts a server sends when it refuses our certificate.
const IDENTITY_ALERTS: [AlertDescription; 8] = [
    AlertDescription::BadCertificate,
    AlertDescription::UnsupportedCertificate,
    AlertDescription::CertificateRevoked,
    AlertDescription::CertificateExpired,
    AlertDescription::CertificateUnknown,
    AlertDescription::CertificateRequired,
    AlertDescription::UnknownCA,
    AlertDescription::AccessDenied,
];

fn of(error: &rustls::Error) -> Option<Blame> {
    match error {
        rustls::Error::AlertReceived(alert) if IDENTITY_ALERTS.contains(alert) => {
            Some(Blame::Identity)
        }
        rustls::Error::InvalidCertificate(Verify::UnknownIssuer | Verify::BadSignature) => {
            Some(Blame::Roots)
        }
        _ => None,
    }
}

/// The same, from the words rustls shows the error with: h2 keeps only an I/O error's kind
/// and message (its errors are `Clone`), so under HTTP/2 the rustls error itself is gone.
fn of_message(message: &str) -> Option<Blame> {
    if let Some(alert) = message.strip_prefix("received fatal alert: ") {
        let named = |a: &AlertDescription| format!("{a:?}") == alert;
        return IDENTITY_ALERTS.iter().any(named).then_some(Blame::Identity);
    }
    let verify = message.strip_prefix("invalid peer certificate: ")?;
    matches!(verify, "UnknownIssuer" | "BadSignature").then_some(Blame::Roots)
}

#[cfg(test)]
mod tests;
