//! When a TokenRequest token is refreshed: the kubelet's rule
//! (`pkg/kubelet/token/token_manager.go`, `requiresRefresh`), as
//! [`TokenRequestSource`](super::TokenRequestSource) states it. `iat` is
//! `exp − expirationSeconds`, as the kubelet works it out.

use std::time::{Duration, SystemTime};

/// The kubelet refreshes a token at least this often, however long it lives.
pub(super) const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The kubelet's jitter is below this (`maxJitter`), in whole seconds.
pub(super) const MAX_JITTER: Duration = Duration::from_secs(10);

/// The moment a token that expires at `exp` after living `ttl` is due for refresh, seen at
/// `now`: `now` itself when it was issued after `now` (a clock that went back).
pub(super) fn refresh_point(
    now: SystemTime,
    exp: SystemTime,
    ttl: Duration,
    jitter: Duration,
) -> SystemTime {
    let Some(iat) = exp.checked_sub(ttl) else {
        return now;
    };
    if now < iat {
        return now;
    }
    // The kubelet's `ttl * 20 / 100` in whole seconds, as a fifth: it cannot overflow.
    let margin = Duration::from_secs(ttl.as_secs() / 5);
    let before_expiry = margin
        .checked_add(jitter)
        .and_then(|back| exp.checked_sub(back));
    let by_age = iat
        .checked_add(MAX_TTL)
        .and_then(|at| at.checked_sub(jitter));
    before_expiry.into_iter().chain(by_age).min().unwrap_or(now)
}

/// The kubelet's jitter for a token: whole seconds under [`MAX_JITTER`], drawn from `key`.
pub(super) fn jitter(key: u64) -> Duration {
    Duration::from_secs(crate::clock::jitter(key, MAX_JITTER).as_secs())
}

#[cfg(test)]
mod tests;
