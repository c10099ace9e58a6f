//! What counts as "the token was not accepted": HTTP 401, or gRPC `UNAUTHENTICATED`.
//!
//! Implement [`Unauthorized`] for an API that says so another way (a 403 with a particular
//! body code, say), and give it to
//! [`BearerLayer::classifier`](crate::BearerLayer::classifier).

use http::{Response, StatusCode};

/// Decides whether a response means "the token was not accepted".
pub trait Unauthorized: Clone {
    /// Whether `response` is an authentication failure.
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool;
}

/// HTTP `401 Unauthorized`. The default classifier.
#[derive(Debug, Clone, Copy, Default)]
pub struct Http401;

impl Unauthorized for Http401 {
    #[inline]
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool {
        response.status() == StatusCode::UNAUTHORIZED
    }
}

/// gRPC `UNAUTHENTICATED`: `grpc-status: 16` in the response headers (a trailers-only
/// response, which is how gRPC servers answer a call they refuse before it starts), or an
/// HTTP 401 from a proxy in front of the server.
///
/// A `grpc-status` sent in the trailers after a streamed body is not seen: it arrives
/// after the response has been handed to the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcUnauthenticated;

impl Unauthorized for GrpcUnauthenticated {
    #[inline]
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool {
        Http401.is_unauthorized(response)
            || response
                .headers()
                .get("grpc-status")
                .is_some_and(|v| v == "16")
    }
}

#[cfg(test)]
mod tests;
