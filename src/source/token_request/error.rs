//! [`TokenRequestError`]: why a TokenRequest gave no token.

/// Why a TokenRequest gave no token: a request the API would refuse, or its answer.
///
/// The store's [`LoadError`](crate::LoadError) that wraps it names the service account and
/// the audiences first; none holds a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenRequestError {
    /// `expirationSeconds` below the API's minimum of 600 (10 minutes).
    #[error("expirationSeconds {seconds} is below the API's minimum of 600 (10 minutes)")]
    ExpirationTooShort {
        /// The seconds asked for.
        seconds: u64,
    },
    /// `expirationSeconds` above the API's maximum of 2^32.
    #[error("expirationSeconds {seconds} is above the API's maximum of 2^32")]
    ExpirationTooLong {
        /// The seconds asked for.
        seconds: u64,
    },
    /// A namespace, service account or bound object name that is not a Kubernetes name.
    #[error("{what} {value:?} is not a valid name: {problem}")]
    InvalidName {
        /// `namespace`, `service account` or `bound object`.
        what: &'static str,
        /// The name given.
        value: String,
        /// What is wrong with it.
        problem: &'static str,
    },
    /// An empty audience.
    #[error("an audience is empty")]
    EmptyAudience,
    /// A bound object's uid without a bound object
    /// ([`bound_uid`](super::TokenRequestSource::bound_uid) without `bound_to_pod`,
    /// `bound_to_secret` or `bound_to_node`).
    #[error("a bound object's uid is given without a bound object")]
    UidWithoutObject,
    /// 403: the client may not create tokens for this service account (RBAC: `create` on
    /// `serviceaccounts/token`).
    #[error("forbidden to create tokens (403): {message}")]
    Forbidden {
        /// The API server's message.
        message: String,
    },
    /// 404: no such service account (or namespace), or an API server without the
    /// TokenRequest endpoint.
    #[error("not found (404): {message}")]
    NotFound {
        /// The API server's message.
        message: String,
    },
    /// 401: the API server refused the client's own credentials.
    #[error("the API server refused the client's credentials (401): {message}")]
    Unauthorized {
        /// The API server's message.
        message: String,
    },
    /// Any other error status (5xx, 422, 429, ...).
    #[error("the API server answered {code} {reason}: {message}")]
    Status {
        /// The HTTP status code.
        code: u16,
        /// The `Status` reason (`ServiceUnavailable`, `Invalid`, ...).
        reason: String,
        /// The API server's message.
        message: String,
    },
    /// The request did not get an answer: connection refused, TLS, a timeout of the
    /// client's own.
    #[error("the request failed")]
    Request(#[source] ::kube::Error),
    /// The answer is not a TokenRequest with a token and an expiry.
    #[error("the API server's answer {problem}")]
    Response {
        /// What is wrong with it.
        problem: &'static str,
    },
}

impl TokenRequestError {
    /// Sorts kube's error by what the API server said.
    pub(super) fn from_kube(error: ::kube::Error) -> Self {
        let ::kube::Error::Api(status) = error else {
            return TokenRequestError::Request(error);
        };
        let message = status.message.clone();
        match status.code {
            401 => TokenRequestError::Unauthorized { message },
            403 => TokenRequestError::Forbidden { message },
            404 => TokenRequestError::NotFound { message },
            code => TokenRequestError::Status {
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
            _ => None,
        }
    }
}
