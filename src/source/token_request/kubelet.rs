//! When a TokenRequest token is refreshed: the kubelet's rule
//! (`pkg/kubelet/token/token_manager.go`, `requiresRefresh`).
//!
//! The kubelet asks the API again once now is past `exp − 20% of the TTL − jitter`, or past
//! `iat + 24 h − jitter`, whichever comes first, with a jitter of 0 to 9 whole seconds; and
//! at once when now is before `iat` (the clock went back, or ours is behind the API
//! server's). `iat` is `exp − expirationSeconds`, as the kubelet works it out: the API
//! server's `expirationTimestamp` is its own clock plus the TTL.

use std::time::{Duration, SystemTime};

/// The kubelet refreshes a token at least this often, however long it lives.
pub(super) const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// The kubelet's jitter is below this (`maxJitter`), in whole seconds.
pub(super) const MAX_JITTER: Duration = Duration::from_secs(10);

/// The moment a token that expires at `exp` after living `ttl` is due for refresh, seen at
/// `now`, with `jitter` (under [`MAX_JITTER`]) drawn for it.
///
/// `now` itself when the token was issued after `now` (a clock that went back): the store's
/// timer then asks again soon, backing off while that lasts.
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
    // The kubelet's 20%, in whole seconds as it computes it (`ttl * 20 / 100`): a fifth,
    // which is the same in integers and cannot overflow for a server's absurd lifetime.
    let margin = Duration::from_secs(ttl.as_secs() / 5);
    let before_expiry = margin
        .checked_add(jitter)
        .and_then(|back| exp.checked_sub(back));
    let by_age = iat
        .checked_add(MAX_TTL)
        .and_then(|at| at.checked_sub(jitter));
    before_expiry.into_iter().chain(by_age).min().unwrap_or(now)
}

/// The kubelet's jitter for a token: whole seconds in `0..10`, drawn from `key` (fixed for
/// a key within this process, different from one process to the next).
pub(super) fn jitter(key: u64) -> Duration {
    Duration::from_secs(crate::clock::jitter(key, MAX_JITTER).as_secs())
}

#[cfg(test)]
mod tests;
