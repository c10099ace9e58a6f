//! Wall-clock time for the store: when a token expires or is due for rotation.
//!
//! Token claims are wall-clock dates, so the store asks a [`Clock`] for the time rather than
//! calling [`SystemTime::now`] itself. Production uses the system clock; tests use a clock
//! that follows tokio's (pausable) time from a fixed origin, so that one
//! `tokio::time::advance` moves both the timers and the dates the store compares claims to.

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
    /// `origin` plus the tokio time elapsed since `start`: under paused tokio time, this
    /// clock moves only when the test advances it.
    #[cfg(any(test, feature = "testing"))]
    Tokio {
        origin: SystemTime,
        start: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that reads `origin` now and then moves with tokio's time.
    #[cfg(test)]
    pub(crate) fn tokio_from(origin: SystemTime) -> Self {
        Self::tokio(origin, tokio::time::Instant::now())
    }

    /// A clock that reads `origin` at tokio's `start` and moves with tokio's time.
    #[cfg(any(test, feature = "testing"))]
    pub(crate) fn tokio(origin: SystemTime, start: tokio::time::Instant) -> Self {
        Clock::Tokio { origin, start }
    }

    /// The current wall-clock time.
    pub(crate) fn now(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            #[cfg(any(test, feature = "testing"))]
            Clock::Tokio { origin, start } => *origin + start.elapsed(),
        }
    }
}

/// Displays a time as RFC 3339 in UTC, to the second: `2026-11-29T12:00:00Z`. A time
/// outside the years 9999 BC to 9999 AD (a JWT can claim any date) is shown in seconds
/// since the epoch instead.
#[derive(Clone, Copy)]
pub(crate) struct Rfc3339(pub(crate) SystemTime);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs: i64 = match self.0.duration_since(UNIX_EPOCH) {
            Ok(d) => i64::try_from(d.as_secs()).unwrap_or(i64::MAX),
            Err(e) => {
                let d = e.duration();
                // Round towards the past: -0.5 s is 23:59:59 of the day before.
                let whole = i64::try_from(d.as_secs()).unwrap_or(i64::MAX);
                -whole - i64::from(d.subsec_nanos() > 0)
            }
        };
        match jiff::Timestamp::from_second(secs) {
            Ok(at) => write!(f, "{}", at.strftime("%Y-%m-%dT%H:%M:%SZ")),
            Err(_) => write!(f, "{secs}s since 1970-01-01T00:00:00Z"),
        }
    }
}

impl fmt::Debug for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A duration in `[0, max)`, fixed for `key` within this process and different from one
/// process to the next: it spreads the moments of a fleet of clients without a
/// random-number crate.
pub(crate) fn jitter(key: u64, max: Duration) -> Duration {
    // A random key drawn once per process and never changed: no state, only what makes
    // this process's jitter its own (a constant would put a fleet's clients in step).
    static SEED: LazyLock<std::collections::hash_map::RandomState> =
        LazyLock::new(std::collections::hash_map::RandomState::new);
    let Ok(max_nanos) = u64::try_from(max.as_nanos()) else {
        return Duration::ZERO;
    };
    if max_nanos == 0 {
        return Duration::ZERO;
    }
    Duration::from_nanos(SEED.hash_one(key) % max_nanos)
}

/// The point `num/den` of the way from `from` to `to`, or `None` when `to` is not after
/// `from`.
pub(crate) fn fraction_of(
    from: SystemTime,
    to: SystemTime,
    num: u32,
    den: u32,
) -> Option<SystemTime> {
    let span = to.duration_since(from).ok().filter(|d| !d.is_zero())?;
    // `span * num` overflows a `Duration` for spans over u64::MAX / num seconds (a JWT can
    // claim any `exp`): then divide first, losing only sub-nanosecond precision.
    let part = span
        .checked_mul(num)
        .map(|d| d / den)
        .or_else(|| (span / den).checked_mul(num))?;
    from.checked_add(part)
}

#[cfg(test)]
mod tests;
