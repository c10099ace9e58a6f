use super::*;
use std::time::Duration;

impl Clock {
    /// A clock that reads `origin` now and then moves with tokio's time.
    pub(crate) fn tokio_from(origin: SystemTime) -> Self {
        Self::Tokio(origin, tokio::time::Instant::now())
    }
}

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
    assert_eq!(four_fifths(a, b), Some(at(1000 + 2880)));
    assert_eq!(four_fifths(b, a), None);
    assert_eq!(four_fifths(a, a), None);
    // Found by the proptest of the claims decoder: `{"exp":4611686018427387904,"iat":0}`
    // made `span * 4` overflow and panic.
    let huge = at(1 << 62);
    assert_eq!(
        four_fifths(UNIX_EPOCH, huge),
        Some(UNIX_EPOCH + Duration::from_secs(1 << 62) / 5 * 4)
    );
    let far = UNIX_EPOCH + Duration::from_secs(u64::MAX / 2);
    assert!(four_fifths(UNIX_EPOCH - Duration::from_secs(1 << 40), far).is_some());
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
