//! Wall-clock time for the store: when a token expires or is due for rotation.
//!
//! Token claims are wall-clock dates, so the store asks a [`Clock`] for the time rather than
//! calling [`SystemTime::now`] itself. Production uses the system clock; tests use a clock
//! that follows tokio's (pausable) time from a fixed origin, so that one
//! `tokio::time::advance` moves both the timers and the dates the store compares claims to.

use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// Where the store reads the wall-clock time.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) enum Clock {
    /// [`SystemTime::now`].
    #[default]
    System,
    /// `origin` plus the tokio time elapsed since `start`: under paused tokio time, this
    /// clock moves only when the test advances it.
    #[cfg(test)]
    Tokio {
        origin: SystemTime,
        start: tokio::time::Instant,
    },
}

impl Clock {
    /// A clock that reads `origin` now and then moves with tokio's time.
    #[cfg(test)]
    pub(crate) fn tokio_from(origin: SystemTime) -> Self {
        Clock::Tokio {
            origin,
            start: tokio::time::Instant::now(),
        }
    }

    /// The current wall-clock time.
    pub(crate) fn now(&self) -> SystemTime {
        match self {
            Clock::System => SystemTime::now(),
            #[cfg(test)]
            Clock::Tokio { origin, start } => *origin + start.elapsed(),
        }
    }
}

/// Displays a time as RFC 3339 in UTC, to the second: `2026-11-29T12:00:00Z`.
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
        let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
        let (y, m, d) = civil_from_days(days);
        write!(
            f,
            "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
            rem / 3600,
            rem % 3600 / 60,
            rem % 60
        )
    }
}

impl fmt::Debug for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Year, month, day of the proleptic Gregorian calendar for a count of days since
/// 1970-01-01 (Howard Hinnant's `civil_from_days`).
pub(crate) fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let y = yoe + era * 400 + i64::from(m <= 2);
    (y, m, d)
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

    #[tokio::test(start_paused = true)]
    async fn the_test_clock_follows_paused_tokio_time() {
        let clock = Clock::tokio_from(at(1_000));
        assert_eq!(clock.now(), at(1_000));
        tokio::time::advance(Duration::from_secs(90)).await;
        assert_eq!(clock.now(), at(1_090));
    }
}
