//! [`Error`]: why the token endpoint gave no token.

use std::io;
use std::path::PathBuf;

use http::{StatusCode, Uri};

/// Why a [`ClientCredentials`](super::ClientCredentials) or
/// [`TokenExchange`](super::TokenExchange) fetch gave no token; the store keeps the last
/// good one and tries again. None holds a secret or a token: an error answer is reduced to
/// its `error` and `error_description`, and any other body is never quoted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The token endpoint is not `https://`: secrets never go in clear (RFC 6749 §2.3.1).
    #[error("the token endpoint {endpoint} is not an https:// URI")]
    InsecureEndpoint {
        /// The endpoint given.
        endpoint: Uri,
    },
    /// The client assertion or subject token file could not be read.
    #[error("cannot read the {what} file {}", path.display())]
    ReadFile {
        /// `client assertion` or `subject token`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The client assertion or subject token file is empty (or only whitespace), or holds
    /// more than a token: a file read in the middle of its rotation.
    #[error("the {what} file {} {problem}", path.display())]
    BadFile {
        /// `client assertion` or `subject token`.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The request got no complete answer: connection refused, TLS, a body cut short.
    #[error("the token request failed")]
    Transport {
        /// hyper's (or rustls's) error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The token endpoint answered with an OAuth 2.0 error (RFC 6749 §5.2):
    /// `invalid_client`, `invalid_grant`, `invalid_scope`, `unauthorized_client`, ...
    #[error("the token endpoint answered {code} (HTTP {}){}", status.as_u16(), description.as_deref().map_or_else(String::new, |d| format!(": {d}")))]
    OAuth {
        /// The HTTP status (400 or 401, for most).
        status: StatusCode,
        /// The `error` code.
        code: String,
        /// The `error_description`, if any (cut to 512 characters).
        description: Option<String>,
    },
    /// The token endpoint answered an error status without an OAuth 2.0 error body (a
    /// proxy's 502, a 503 page).
    #[error("the token endpoint answered HTTP {}", status.as_u16())]
    Status {
        /// The HTTP status.
        status: StatusCode,
    },
    /// A successful answer that is not a usable token response: no `access_token`, no
    /// `token_type`, or an `expires_in` that is not a number of seconds, is over 2^32
    /// seconds, or ends past what the system clock holds.
    #[error("the token endpoint's answer {problem}")]
    Response {
        /// What is wrong with it.
        problem: &'static str,
    },
    /// The token endpoint issued a token that is not a bearer token (RFC 6750).
    #[error("the token endpoint issued a token of type {token_type:?}, not Bearer")]
    NotBearer {
        /// The `token_type` answered (cut to 64 characters).
        token_type: String,
    },
}

impl Error {
    /// The HTTP status the token endpoint answered with, when it answered with an error.
    pub fn status(&self) -> Option<StatusCode> {
        match self {
            Error::OAuth { status, .. } | Error::Status { status } => Some(*status),
            _ => None,
        }
    }

    /// The OAuth 2.0 `error` code the token endpoint answered with (`invalid_client`, ...).
    pub fn oauth_error(&self) -> Option<&str> {
        match self {
            Error::OAuth { code, .. } => Some(code),
            _ => None,
        }
    }
}
