//! Wall-clock time for the store ([`Clock`]), and the date helpers the timers share.

use std::fmt;
use std::hash::BuildHasher;
use std::sync::LazyLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Where the store reads the wall-clock time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum Clock {
    /// [`SystemTime::now`].
    #[default]
    System,
    /// The origin plus the tokio time elapsed since the instant: see
    /// `StoreBuilder::simulated_clock`.
    #[cfg(any(test, feature = "testing"))]
    Tokio(SystemTime, tokio::time::Instant),
}

impl Clock {
    pub(crate) fn now(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            #[cfg(any(test, feature = "testing"))]
            Clock::Tokio(origin, start) => *origin + start.elapsed(),
        }
    }
}

/// Displays a time as RFC 3339 in UTC, to the second (`2026-11-29T12:00:00Z`); one out of
/// its range (a JWT can claim any date) in seconds since the epoch.
#[derive(Clone, Copy)]
pub(crate) struct Rfc3339(pub(crate) SystemTime);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Ok(at) = jiff::Timestamp::try_from(self.0) {
            return write!(f, "{}", at.strftime("%Y-%m-%dT%H:%M:%SZ"));
        }
        match self.0.duration_since(UNIX_EPOCH) {
            Ok(d) => write!(f, "{}s since 1970-01-01T00:00:00Z", d.as_secs()),
            Err(e) => write!(f, "-{}s since 1970-01-01T00:00:00Z", e.duration().as_secs()),
        }
    }
}

impl fmt::Debug for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A duration in `[0, max)`, fixed for `key` within this process and different from one
/// process to the next.
pub(crate) fn jitter(key: u64, max: Duration) -> Duration {
    // Drawn once per process: a constant would put a fleet's clients in step.
    static SEED: LazyLock<std::collections::hash_map::RandomState> =
        LazyLock::new(std::collections::hash_map::RandomState::new);
    // Zero when `max` is zero (or past what a u64 of nanoseconds holds, 584 years).
    let nanos = u64::try_from(max.as_nanos()).ok().filter(|n| *n > 0);
    nanos.map_or(Duration::ZERO, |n| {
        Duration::from_nanos(SEED.hash_one(key) % n)
    })
}

/// The point 80% of the way from `from` to `to`, where the kubelet rotates a token.
pub(crate) fn four_fifths(from: SystemTime, to: SystemTime) -> Option<SystemTime> {
    let span = to.duration_since(from).ok().filter(|d| !d.is_zero())?;
    // `span * 4` overflows a `Duration` for spans over u64::MAX / 4 seconds (a JWT can
    // claim any `exp`): then divide first, losing only sub-nanosecond precision.
    from.checked_add(span.checked_mul(4).map_or(span / 5 * 4, |d| d / 5))
}

#[cfg(test)]
mod tests;
