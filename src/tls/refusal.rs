//! Whose credential an error says was refused ([`blame`]), and whether a failed request
//! may go again ([`may_send_again`]).

use std::error::Error;

use http::Method;
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
/// error sits in an `io::Error`: from the handshake, or over TLS 1.3 from the first read.
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

/// What a failure proves about whether the server acted on the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// Refused before the server acted (a 401, an alert), or we refused the server.
    Refused,
    /// The connection ended before the request was written.
    NotWritten,
    /// It ended unanswered after the request may have been written (and acted on).
    Uncertain,
}

/// Whether a request with `method` may go again after `failure`, if its body replays.
pub(crate) fn may_send_again(method: &Method, failure: Failure) -> bool {
    match failure {
        Failure::Refused | Failure::NotWritten => true,
        Failure::Uncertain => is_idempotent(method),
    }
}

/// RFC 9110 §9.2.2's idempotent methods (not `http`'s `Method::is_idempotent`, whose answer
/// for QUERY depends on the version of `http` a build resolves).
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

#[cfg(test)]
mod tests;
