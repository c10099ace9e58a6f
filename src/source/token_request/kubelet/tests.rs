use super::*;

const T0: u64 = 1_800_000_000;

fn at(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
}

#[test]
fn twenty_percent_of_the_ttl_before_expiry_less_the_jitter() {
    let ttl = Duration::from_secs(600);
    let refresh = |jitter| refresh_point(at(0), at(600), ttl, Duration::from_secs(jitter));
    assert_eq!(refresh(0), at(480));
    assert_eq!(refresh(9), at(471));
    // An hour: 20% is 720 s; 3607 s (a pod-bound default) truncates to 721 s.
    let hour = refresh_point(at(0), at(3607), Duration::from_secs(3607), Duration::ZERO);
    assert_eq!(hour, at(3607 - 721));
    // Seen later in the token's life, the point is the same.
    assert_eq!(
        refresh_point(at(300), at(600), ttl, Duration::ZERO),
        at(480)
    );
}

#[test]
fn a_token_older_than_a_day_is_refreshed_whatever_its_expiry() {
    let week = Duration::from_secs(7 * 24 * 3600);
    let exp = at(week.as_secs());
    let jitter = Duration::from_secs(4);
    let point = refresh_point(at(0), exp, week, jitter);
    assert_eq!(point, at(24 * 3600 - 4));
    // Exactly a day: the expiry rule comes first (80% of a day).
    let day = refresh_point(at(0), at(24 * 3600), MAX_TTL, jitter);
    assert_eq!(day, at(24 * 3600 * 4 / 5 - 4));
}

#[test]
fn a_clock_before_the_issue_time_means_now() {
    let ttl = Duration::from_secs(600);
    // Issued at 100 s (exp 700), seen at 99 s: our clock went back.
    assert_eq!(refresh_point(at(99), at(700), ttl, Duration::ZERO), at(99));
    // At the issue time itself, the usual rule.
    assert_eq!(
        refresh_point(at(100), at(700), ttl, Duration::ZERO),
        at(580)
    );
}

#[test]
fn an_absurd_lifetime_is_worked_out_without_overflow() {
    // A lifetime past u64::MAX / 20 seconds overflowed the kubelet's `ttl * 20` (a
    // panic in a debug build): the day's rule decides instead.
    let ttl = Duration::from_secs(1_000_000_000_000_000_000);
    let exp = at(600);
    let jitter = Duration::from_secs(9);
    let point = refresh_point(at(0), exp, ttl, jitter);
    // Where the clock holds the issue time (it does not reach that far back on every
    // system): a day after it.
    match exp.checked_sub(ttl) {
        Some(iat) => assert_eq!(point, iat + MAX_TTL - jitter),
        None => assert_eq!(point, at(0)),
    }
    // The largest a server can send, and a token at the end of what the clock holds
    // (whose `iat + 24 h` overflowed): an answer each time, never a panic.
    for ttl in [Duration::MAX, Duration::from_secs(u64::MAX)] {
        assert_eq!(refresh_point(at(0), exp, ttl, jitter), at(0));
    }
    let mut far = SystemTime::UNIX_EPOCH;
    let mut step = Duration::from_secs(1 << 62);
    while !step.is_zero() {
        far = far.checked_add(step).unwrap_or(far);
        step /= 2;
    }
    let point = refresh_point(far, far, Duration::from_secs(600), jitter);
    assert_eq!(point, far - Duration::from_secs(120) - jitter);
    // A fifth in whole seconds, as `* 20 / 100` truncates it.
    for secs in [600, 601, 604, 605, 3607, 86_399] {
        let ttl = Duration::from_secs(secs);
        let point = refresh_point(at(0), at(secs), ttl, Duration::ZERO);
        assert_eq!(point, at(secs - secs * 20 / 100), "{secs}");
    }
}

#[test]
fn the_jitter_is_whole_seconds_below_ten() {
    let drawn: Vec<u64> = (0..500).map(|k| jitter(k).as_secs()).collect();
    assert!(drawn.iter().all(|&s| s < 10));
    assert!(
        (0..10).all(|s| drawn.contains(&s)),
        "every second drawn: {drawn:?}"
    );
    for k in 0..500 {
        assert_eq!(jitter(k).subsec_nanos(), 0);
        assert_eq!(jitter(k), jitter(k));
    }
}
