//! [`CertificateError`], `UriError` and [`Redacted`].

use std::fmt;
use std::time::SystemTime;

use http::Uri;
use http::uri::Authority;

use crate::clock::Rfc3339;

/// `uri` without its userinfo (a proxy's `user:password@`), for every message, log line
/// and `Debug` that names a URI.
#[derive(Clone, Copy)]
pub(crate) struct Redacted<'a>(pub(crate) &'a Uri);

impl Redacted<'_> {
    /// The URI without its userinfo (the same URI when it has none).
    #[cfg_attr(not(feature = "tonic"), allow(dead_code))]
    pub(crate) fn uri(self) -> Uri {
        let Some(authority) = self.0.authority().filter(|a| a.as_str().contains('@')) else {
            return self.0.clone();
        };
        let mut parts = self.0.clone().into_parts();
        parts.authority = Authority::try_from(host_port(authority)).ok();
        // Never the default (`/`): http refuses an authority that ends in `@`.
        Uri::from_parts(parts).unwrap_or_default()
    }
}

impl fmt::Display for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(scheme) = self.0.scheme() {
            write!(f, "{scheme}://")?;
        }
        if let Some(authority) = self.0.authority() {
            f.write_str(host_port(authority))?;
        }
        f.write_str(self.0.path())?;
        match self.0.query() {
            Some(query) => write!(f, "?{query}"),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for Redacted<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// `authority` without its userinfo: `host[:port]`.
fn host_port(authority: &Authority) -> &str {
    let authority = authority.as_str();
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host)
}

/// Why an HTTPS client refused a URI before dialling, inside an `io::Error` of kind
/// `InvalidInput`; neither its message nor its `Debug` shows userinfo ([`Redacted`]).
#[derive(Clone, PartialEq, Eq, thiserror::Error)]
pub(crate) enum UriError {
    /// Not `https://`: credentials never go in plain text.
    #[error(
        "{} is not an https:// URI: credentials are never sent in plain text",
        Redacted(uri)
    )]
    NotHttps {
        /// The URI (for a request, its scheme and authority: what would be dialled).
        uri: Uri,
    },
    /// It names no host (a DNS name or an IP address) a server can be verified as.
    #[error("{} names no host", Redacted(uri))]
    NoHost {
        /// The URI.
        uri: Uri,
    },
}

impl fmt::Debug for UriError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (variant, uri) = match self {
            UriError::NotHttps { uri } => ("NotHttps", uri),
            UriError::NoHost { uri } => ("NoHost", uri),
        };
        f.debug_struct(variant)
            .field("uri", &Redacted(uri))
            .finish()
    }
}

impl From<UriError> for std::io::Error {
    fn from(e: UriError) -> Self {
        std::io::Error::new(std::io::ErrorKind::InvalidInput, e)
    }
}

/// Why a source's bytes are not a usable client certificate (with its key) or CA bundle;
/// the store keeps the last good one. No message holds key material.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CertificateError {
    /// A PEM section is cut short or garbled: a file read while it was being written, or
    /// not PEM at all.
    #[error("the PEM is malformed: {problem}")]
    Pem {
        /// What is wrong, without the bytes.
        problem: &'static str,
    },
    /// No `CERTIFICATE` section.
    #[error("no certificate in the PEM")]
    NoCertificate,
    /// No private key section (`PRIVATE KEY`, `RSA PRIVATE KEY`, `EC PRIVATE KEY`).
    #[error("no private key in the PEM")]
    NoKey,
    /// The key's type is not one the crypto provider can sign with. ring signs with RSA of
    /// 2048 to 8192 bits, ECDSA P-256 and P-384, and Ed25519; aws-lc-rs with ECDSA P-521 as
    /// well, and so with every key type of a Kubernetes pod certificate. Found when the
    /// key is read, never at a handshake.
    #[error("the private key ({key_type}) is of a type {provider} cannot sign with{remedy}")]
    UnsupportedKey {
        /// The key's type: `RSA 4096`, `ECDSA P-521`, `Ed25519`, ...
        key_type: String,
        /// The crypto provider that cannot: `ring`, `aws-lc-rs`, or `the process default
        /// provider` (one the application installed).
        provider: &'static str,
        /// What would help, after a colon (`: aws-lc-rs can ...`), or nothing.
        remedy: &'static str,
    },
    /// The private key is not the certificate's: read in the middle of a rotation (a new
    /// certificate beside the old key), or two files that do not belong together.
    #[error("the private key does not match the certificate")]
    KeyMismatch,
    /// The certificate's validity ended.
    #[error("the certificate expired at {}", Rfc3339(*not_after))]
    Expired {
        /// Its `notAfter`.
        not_after: SystemTime,
    },
    /// No rustls crypto provider to verify or sign with: this build enables neither
    /// feature `ring` nor `aws-lc-rs`, and the application installed no process default.
    #[error(
        "no rustls crypto provider: enable feature `ring` or `aws-lc-rs` of bearer-reload, \
         or install a process default (`CryptoProvider::install_default`)"
    )]
    NoCryptoProvider,
    /// A certificate that does not parse as X.509, or that rustls refuses as a root.
    #[error("a certificate is invalid: {reason}")]
    Invalid {
        /// The parser's reason.
        reason: String,
    },
}

impl From<rustls::pki_types::pem::Error> for CertificateError {
    fn from(e: rustls::pki_types::pem::Error) -> Self {
        use rustls::pki_types::pem::Error as E;
        let problem = match e {
            E::MissingSectionEnd { .. } => "a section has no END line (a half-written file?)",
            E::IllegalSectionStart { .. } => "a section's BEGIN line is malformed",
            E::Base64Decode(_) => "a section's base64 does not decode",
            E::SectionTooLarge => "a section is too large",
            _ => "it cannot be read",
        };
        CertificateError::Pem { problem }
    }
}

#[cfg(test)]
mod tests;
