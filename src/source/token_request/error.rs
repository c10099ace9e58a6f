//! What goes wrong with a TokenRequest: [`InvalidTokenRequest`] when the builder is given
//! something the API would refuse, [`TokenRequestError`] when a request fails.
//!
//! Every message starts with the service account and the audiences
//! ([`TokenRequestSource::describe`](crate::source::TokenSource::describe)); none holds a
//! token.

use std::sync::Arc;

/// A TokenRequest the API server would refuse, caught when the source is built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvalidTokenRequest {
    /// No service account was named ([`service_account`]).
    ///
    /// [`service_account`]: super::TokenRequestBuilder::service_account
    #[error("TokenRequest: no service account named")]
    NoServiceAccount,
    /// `expirationSeconds` below the API's minimum of 600 (10 minutes).
    #[error(
        "{account}: expirationSeconds {seconds} is below the API's minimum of 600 (10 minutes)"
    )]
    ExpirationTooShort {
        /// The service account and audiences.
        account: String,
        /// The seconds asked for.
        seconds: u64,
    },
    /// `expirationSeconds` above the API's maximum of 2^32.
    #[error("{account}: expirationSeconds {seconds} is above the API's maximum of 2^32")]
    ExpirationTooLong {
        /// The service account and audiences.
        account: String,
        /// The seconds asked for.
        seconds: u64,
    },
    /// A namespace or service account name that is not a Kubernetes name.
    #[error("{account}: {what} {value:?} is not a valid name: {problem}")]
    InvalidName {
        /// The service account and audiences.
        account: String,
        /// `namespace`, `service account` or `bound object`.
        what: &'static str,
        /// The name given.
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// An empty audience.
    #[error("{account}: an audience is empty")]
    EmptyAudience {
        /// The service account and audiences.
        account: String,
    },
}

/// A TokenRequest failed. The store keeps serving the last good token while it is valid
/// and retries with a backoff.
///
/// Each message starts with the service account and the audiences, then says what the
/// API server (or the connection to it) said.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenRequestError {
    /// 403: the client may not create tokens for this service account (RBAC: `create` on
    /// `serviceaccounts/token`).
    #[error("{account}: forbidden to create tokens (403): {message}")]
    Forbidden {
        /// The service account and audiences.
        account: Arc<str>,
        /// The API server's message.
        message: String,
    },
    /// 404: no such service account (or namespace), or an API server without the
    /// TokenRequest endpoint.
    #[error("{account}: not found (404): {message}")]
    NotFound {
        /// The service account and audiences.
        account: Arc<str>,
        /// The API server's message.
        message: String,
    },
    /// 401: the API server refused the client's own credentials.
    #[error("{account}: the API server refused the client's credentials (401): {message}")]
    Unauthorized {
        /// The service account and audiences.
        account: Arc<str>,
        /// The API server's message.
        message: String,
    },
    /// Any other error status (5xx, 422, 429, ...).
    #[error("{account}: the API server answered {code} {reason}: {message}")]
    Status {
        /// The service account and audiences.
        account: Arc<str>,
        /// The HTTP status code.
        code: u16,
        /// The `Status` reason (`ServiceUnavailable`, `Invalid`, ...).
        reason: String,
        /// The API server's message.
        message: String,
    },
    /// The request did not get an answer: connection refused, TLS, a timeout of the
    /// client's own.
    #[error("{account}: request failed: {source}")]
    Request {
        /// The service account and audiences.
        account: Arc<str>,
        /// kube's error.
        #[source]
        source: ::kube::Error,
    },
    /// The answer is not a TokenRequest with a token and an expiry.
    #[error("{account}: the API server's answer {problem}")]
    Response {
        /// The service account and audiences.
        account: Arc<str>,
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl TokenRequestError {
    /// Sorts kube's error by what the API server said.
    pub(super) fn from_kube(account: &Arc<str>, error: ::kube::Error) -> Self {
        let account = account.clone();
        let ::kube::Error::Api(status) = error else {
            return TokenRequestError::Request {
                account,
                source: error,
            };
        };
        let message = status.message.clone();
        match status.code {
            401 => TokenRequestError::Unauthorized { account, message },
            403 => TokenRequestError::Forbidden { account, message },
            404 => TokenRequestError::NotFound { account, message },
            code => TokenRequestError::Status {
                account,
                code,
                reason: status.reason.clone(),
                message,
            },
        }
    }

    /// The HTTP status the API server answered with, if it answered.
    pub fn code(&self) -> Option<u16> {
        match self {
            TokenRequestError::Forbidden { .. } => Some(403),
            TokenRequestError::NotFound { .. } => Some(404),
            TokenRequestError::Unauthorized { .. } => Some(401),
            TokenRequestError::Status { code, .. } => Some(*code),
            TokenRequestError::Request { .. } | TokenRequestError::Response { .. } => None,
        }
    }
}
