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
mod tests {
    use super::*;
    use std::time::Duration;

    fn at(secs: i64) -> SystemTime {
        if secs >= 0 {
            UNIX_EPOCH + Duration::from_secs(secs as u64)
        } else {
            UNIX_EPOCH - Duration::from_secs(secs.unsigned_abs())
        }
    }

    #[test]
    fn formats_rfc3339_utc() {
        let cases = [
            (0, "1970-01-01T00:00:00Z"),
            (951_782_400, "2000-02-29T00:00:00Z"),
            (1_700_000_000, "2023-11-14T22:13:20Z"),
            (1_798_545_600, "2026-12-29T12:00:00Z"),
            (4_102_444_799, "2099-12-31T23:59:59Z"),
            (-1, "1969-12-31T23:59:59Z"),
        ];
        for (secs, want) in cases {
            assert_eq!(Rfc3339(at(secs)).to_string(), want, "{secs}");
        }
        let half_before = UNIX_EPOCH - Duration::from_millis(500);
        assert_eq!(Rfc3339(half_before).to_string(), "1969-12-31T23:59:59Z");
        // Past jiff's range: shown, not a panic.
        let far = UNIX_EPOCH + Duration::from_secs(1 << 40);
        assert_eq!(
            Rfc3339(far).to_string(),
            "1099511627776s since 1970-01-01T00:00:00Z"
        );
    }

    #[test]
    fn fractions_of_a_span() {
        let (a, b) = (at(1000), at(1000 + 3600));
        assert_eq!(fraction_of(a, b, 4, 5), Some(at(1000 + 2880)));
        assert_eq!(fraction_of(b, a, 4, 5), None);
        assert_eq!(fraction_of(a, a, 4, 5), None);
        // Found by the proptest of the claims decoder: `{"exp":4611686018427387904,"iat":0}`
        // made `span * 4` overflow and panic.
        let huge = at(1 << 62);
        assert_eq!(
            fraction_of(UNIX_EPOCH, huge, 4, 5),
            Some(UNIX_EPOCH + Duration::from_secs(1 << 62) / 5 * 4)
        );
        let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 2);
        assert!(fraction_of(UNIX_EPOCH - Duration::from_secs(1 << 40), far, 4, 5).is_some());
    }

    #[test]
    fn jitter_stays_in_range_and_is_stable_per_key() {
        let max = Duration::from_secs(10);
        let drawn: Vec<Duration> = (0..200).map(|k| jitter(k, max)).collect();
        assert!(drawn.iter().all(|d| *d < max));
        assert_eq!(jitter(7, max), jitter(7, max));
        // Spread, not all in one place.
        let low = drawn.iter().filter(|d| **d < max / 2).count();
        assert!((50..150).contains(&low), "{low} of 200 in the lower half");
        assert_eq!(jitter(1, Duration::ZERO), Duration::ZERO);
    }

    #[tokio::test(start_paused = true)]
    async fn the_test_clock_follows_paused_tokio_time() {
        let clock = Clock::tokio_from(at(1_000));
        assert_eq!(clock.now(), at(1_000));
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), at(1_090));
    }
}
