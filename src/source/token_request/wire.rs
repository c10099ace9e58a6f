//! The API server's answer to a TokenRequest (`authentication.k8s.io/v1`), read as JSON.
//!
//! Not through k8s-openapi's types, whose shape changes with the Kubernetes version a build
//! enables; nor by `kube::Client::request`, which logs a whole body it cannot parse: this
//! one holds a token.

use std::time::{Duration, SystemTime};

use serde_json::Value;
use zeroize::Zeroizing;

/// What the API server issued.
pub(super) struct Issued {
    pub(super) token: Zeroizing<String>,
    /// `status.expirationTimestamp`.
    pub(super) expires_at: SystemTime,
    /// `spec.expirationSeconds` as the server answered it (it may shorten what was asked),
    /// else what was asked.
    pub(super) ttl: Duration,
}

/// Reads the API server's answer; the problem never quotes it.
pub(super) fn parse_response(body: &str, asked: Duration) -> Result<Issued, &'static str> {
    let mut response: Value = serde_json::from_str(body).map_err(|_| "is not JSON")?;
    // Taken out first, so that an answer refused below drops it wiped.
    let token = match response.pointer_mut("/status/token").map(Value::take) {
        Some(Value::String(token)) => Zeroizing::new(token),
        _ => Zeroizing::default(),
    };
    if response.get("kind").and_then(Value::as_str) != Some("TokenRequest") {
        return Err("is not a TokenRequest");
    }
    let ttl = response
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_u64)
        .filter(|&s| s > 0)
        .map_or(asked, Duration::from_secs);
    let expires_at = response
        .pointer("/status/expirationTimestamp")
        .and_then(Value::as_str)
        .ok_or("has no status.expirationTimestamp")?
        .parse::<jiff::Timestamp>()
        .map_err(|_| "has a status.expirationTimestamp that is not an RFC 3339 time")?;
    if token.is_empty() {
        return Err("has no status.token");
    }
    Ok(Issued {
        token,
        expires_at: SystemTime::from(expires_at),
        ttl,
    })
}
