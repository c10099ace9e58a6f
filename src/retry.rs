//! What to do about an unauthorized response: reload the token at once and, opt-in, send
//! the request again with the new one.

use http::{Response, StatusCode};

/// No retry: the layer only sets the header. The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRetry;

/// Decides whether a response means "the token was not accepted".
pub trait Unauthorized: Clone {
    /// Whether `response` is an authentication failure.
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool;
}

/// HTTP `401 Unauthorized`. The default classifier.
#[derive(Debug, Clone, Copy, Default)]
pub struct Http401;

impl Unauthorized for Http401 {
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool {
        response.status() == StatusCode::UNAUTHORIZED
    }
}

/// Retry policy for unauthorized responses; see [`BearerLayer::retry_unauthorized`].
///
/// [`BearerLayer::retry_unauthorized`]: crate::BearerLayer::retry_unauthorized
#[derive(Debug, Clone)]
pub struct RetryUnauthorized<C = Http401> {
    classifier: C,
}
