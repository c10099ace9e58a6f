//! When a request is sent again after a failure: the one rule for every part of the crate
//! that resends ([`BearerLayer`](crate::BearerLayer)'s retry, the reqwest middleware, the
//! `tls` feature's `HttpsClient`), and the copy of a request made for it.
//!
//! A request is sent again only when the server cannot have acted on it (RFC 9110
//! §9.2.2; hyper-util's own rule, extended only where a refusal proves it):
//!
//! - it was never written (the connection ended during hyper's own handshake);
//! - or the failure is a certain refusal of the credential, which the server gives before
//!   it acts: a 401 or gRPC `UNAUTHENTICATED` answer, a certificate alert read from the
//!   server, or our own refusal of the server's certificate (an unknown issuer);
//! - or its method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE), so that a
//!   second sending has the effect of one.
//!
//! In every case its body must be replayable, and it is sent again at most once. Anything
//! else (a POST or PATCH on a connection that closed without an answer, which a server
//! that crashed after acting on it also gives) goes back to the caller as it came, once;
//! the credential is still reloaded for the requests that follow.

use http::{Method, Request};

use crate::body::TryCloneBody;

/// What a failure proves about whether the server acted on the request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Failure {
    /// The server refused the credential before acting: a 401, a certificate alert, or
    /// our own refusal of the server.
    Refused,
    /// The connection ended before the request was written.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    NotWritten,
    /// The connection ended with no answer after the request may have been written: the
    /// server may have acted on it.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Uncertain,
}

/// Whether a request sent with `method` may be sent again after `failure` (its body being
/// replayable is the caller's to check: see [`clone_request`]).
pub(crate) fn may_send_again(method: &Method, failure: Failure) -> bool {
    match failure {
        Failure::Refused | Failure::NotWritten => true,
        Failure::Uncertain => is_idempotent(method),
    }
}

/// RFC 9110 §9.2.2's idempotent methods.
fn is_idempotent(method: &Method) -> bool {
    matches!(
        *method,
        Method::GET | Method::HEAD | Method::OPTIONS | Method::TRACE | Method::PUT | Method::DELETE
    )
}

/// A copy of `req` with a copy of its body, or `None` when the body cannot be copied.
pub(crate) fn clone_request<B: TryCloneBody>(req: &Request<B>) -> Option<Request<B>> {
    let mut copy = Request::new(req.body().try_clone_body()?);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_an_idempotent_method_goes_again_after_an_uncertain_failure() {
        let idempotent = ["GET", "HEAD", "OPTIONS", "TRACE", "PUT", "DELETE"];
        let not = ["POST", "PATCH", "CONNECT", "WATCH"];
        for name in idempotent.iter().chain(&not) {
            let method = Method::from_bytes(name.as_bytes()).unwrap();
            // Proved unprocessed: any method goes again.
            assert!(may_send_again(&method, Failure::Refused), "{name}");
            assert!(may_send_again(&method, Failure::NotWritten), "{name}");
            assert_eq!(
                may_send_again(&method, Failure::Uncertain),
                idempotent.contains(name),
                "{name}"
            );
        }
    }

    #[test]
    fn a_request_copy_keeps_everything_and_owns_its_parts() {
        let mut req = Request::builder()
            .method("POST")
            .uri("http://h/p?q")
            .header("x-a", "1")
            .extension(7u32)
            .body("body".to_string())
            .unwrap();
        let copy = clone_request(&req).unwrap();
        assert_eq!(copy.method(), "POST");
        assert_eq!(copy.uri(), "http://h/p?q");
        assert_eq!(copy.headers()["x-a"], "1");
        assert_eq!(copy.extensions().get::<u32>(), Some(&7));
        assert_eq!(copy.body(), "body");
        // Changing the original (as the first attempt's stack does) leaves the copy alone.
        req.headers_mut().insert("x-a", "2".parse().unwrap());
        req.extensions_mut().insert(8u32);
        req.body_mut().push_str("-sent");
        assert_eq!(copy.headers()["x-a"], "1");
        assert_eq!(copy.extensions().get::<u32>(), Some(&7));
        assert_eq!(copy.body(), "body");
    }
}
