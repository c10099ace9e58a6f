use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use jsonwebtoken::Algorithm;
use tokio::time::Instant;
use tracing::field::{Field, Visit};
use tracing_subscriber::layer::{Context, SubscriberExt};

use crate::clock::Clock;
use crate::store::TokenStore;
use crate::token::Freshness;

/// The wall-clock time at which each test starts.
const T0: u64 = 1_800_000_000;
const TTL: u64 = 3607;
const YEAR: u64 = 365 * 24 * 3600;

fn wall(secs: u64) -> SystemTime {
    SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + secs)
}

/// A projected service-account token issued `iat` seconds into the test.
fn projected(iat: u64, exp: u64, warnafter: Option<u64>) -> String {
    let claims = crate::token::claims::tests::service_account_claims(
        T0 + iat,
        T0 + exp,
        warnafter.map(|w| T0 + w),
    );
    crate::token::claims::tests::sign(Algorithm::ES256, &claims)
}

/// A token file that the test writes, as seen through a loader, under paused time.
#[derive(Clone)]
struct File {
    start: Instant,
    content: Arc<Mutex<String>>,
    reads: Arc<Mutex<Vec<Duration>>>,
}

impl File {
    fn new(token: String) -> Self {
        Self {
            start: Instant::now(),
            content: Arc::new(Mutex::new(token)),
            reads: Arc::default(),
        }
    }

    fn write(&self, token: String) {
        *self.content.lock().unwrap() = token;
    }

    /// Times of the reads, in seconds since the start of the test.
    fn reads(&self) -> Vec<f64> {
        let reads = self.reads.lock().unwrap();
        reads.iter().map(Duration::as_secs_f64).collect()
    }

    async fn store(&self, period: Option<Duration>) -> TokenStore {
        let this = self.clone();
        let builder = crate::test_support::loader("test-file", move || {
            let this = this.clone();
            async move {
                this.reads.lock().unwrap().push(this.start.elapsed());
                Ok::<_, std::io::Error>(this.content.lock().unwrap().clone().into_bytes())
            }
        })
        .clock(Clock::tokio_from(wall(0)));
        match period {
            Some(period) => builder.refresh_interval(period),
            None => builder.no_periodic_refresh(),
        }
        .load()
        .await
        .unwrap()
    }
}

/// Every `WARN` event of this crate, with its time in seconds since the test started
/// and its message and fields as text.
#[derive(Clone)]
struct Warnings {
    start: Instant,
    seen: Arc<Mutex<Vec<(f64, String)>>>,
}

impl Warnings {
    fn capture() -> (Self, tracing::subscriber::DefaultGuard) {
        let this = Self {
            start: Instant::now(),
            seen: Arc::default(),
        };
        let subscriber = tracing_subscriber::registry().with(this.clone());
        (this, tracing::subscriber::set_default(subscriber))
    }

    /// The times of the warnings whose text contains `needle`.
    fn times(&self, needle: &str) -> Vec<f64> {
        let seen = self.seen.lock().unwrap();
        seen.iter()
            .filter(|(_, text)| text.contains(needle))
            .map(|&(t, _)| t)
            .collect()
    }

    fn all(&self) -> Vec<(f64, String)> {
        self.seen.lock().unwrap().clone()
    }
}

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for Warnings {
    fn on_event(&self, event: &tracing::Event<'_>, _: Context<'_, S>) {
        let meta = event.metadata();
        if *meta.level() != tracing::Level::WARN || !meta.target().starts_with("bearer_reload") {
            return;
        }
        struct Text(String);
        impl Visit for Text {
            fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
                self.0.push_str(&format!("{}={value:?} ", field.name()));
            }
        }
        let mut text = Text(String::new());
        event.record(&mut text);
        let at = self.start.elapsed().as_secs_f64();
        self.seen.lock().unwrap().push((at, text.0));
    }
}

/// Asserts that `got` are the `want`ed times, to the timer's millisecond.
#[track_caller]
fn assert_times(got: &[f64], want: &[f64]) {
    let close = got.len() == want.len() && got.iter().zip(want).all(|(g, w)| (g - w).abs() < 0.002);
    assert!(close, "got {got:?}, want {want:?}");
}

/// Asserts that `got` are periodic reads: each `period` after the one before plus a
/// jitter within the timer's spread, and none missing before `until`.
#[track_caller]
fn assert_periodic(got: &[f64], period: f64, until: f64) {
    let spread = super::spread(Duration::from_secs_f64(period)).as_secs_f64();
    let gaps_ok = got.windows(2).all(|w| {
        let gap = w[1] - w[0];
        gap > period - 0.002 && gap < period + spread + 0.002
    });
    let none_missing = got
        .last()
        .is_some_and(|last| until - last < period + spread);
    assert!(
        gaps_ok && none_missing,
        "got {got:?}, want reads {period} s apart plus up to {spread} s, until {until}"
    );
}

const EXPIRED: &str = "has expired";
const OVERDUE: &str = "overdue for rotation";

/// A source whose own default period is zero: read once a second, not in a loop. (The
/// builder refuses a period under a second outright: see `builder::tests`.)
#[tokio::test(start_paused = true)]
async fn a_sources_default_period_under_a_second_reads_once_a_second_not_in_a_loop() {
    struct ZeroPeriod(File);
    impl crate::source::TokenSource for ZeroPeriod {
        type Error = std::io::Error;
        async fn fetch(
            &self,
            _: crate::source::FetchContext,
        ) -> Result<crate::source::Fetched, std::io::Error> {
            let file = &self.0;
            file.reads.lock().unwrap().push(file.start.elapsed());
            Ok(crate::source::Fetched::new(
                file.content.lock().unwrap().clone(),
            ))
        }
        fn describe(&self) -> String {
            "zero period".to_owned()
        }
        fn default_refresh_interval(&self) -> Option<Duration> {
            Some(Duration::ZERO)
        }
    }
    let file = File::new("opaque-token".to_owned());
    let store = TokenStore::builder(ZeroPeriod(file.clone()))
        .clock(Clock::tokio_from(wall(0)))
        .load()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(10_500)).await;
    drop(store);
    let reads = file.reads();
    let rel: Vec<f64> = reads.iter().map(|r| r - reads[0]).collect();
    assert_periodic(&rel, 1.0, 10.5);
}

#[tokio::test(start_paused = true)]
async fn rereads_after_the_kubelet_rotates_and_recomputes_after_each_rotation() {
    let (warnings, _guard) = Warnings::capture();
    let file = File::new(projected(0, TTL, None));
    // A period longer than the token's lifetime: every read but the first comes from
    // the token's own schedule.
    let store = file.store(Some(Duration::from_secs(2 * 3600))).await;

    // The kubelet rotates at 80% of 3607 s (2885.6 s) plus its jitter (here 4.4 s).
    let writer = tokio::spawn({
        let file = file.clone();
        async move {
            tokio::time::sleep(Duration::from_secs(2890)).await;
            file.write(projected(2890, 2890 + TTL, None));
            tokio::time::sleep(Duration::from_secs(2890)).await;
            file.write(projected(5780, 5780 + TTL, None));
        }
    });
    tokio::time::sleep(Duration::from_secs(6000)).await;
    writer.await.unwrap();

    // Each read comes 10 s after the rotation point of the token read before it.
    assert_times(&file.reads(), &[0.0, 2895.6, 2890.0 + 2895.6]);
    assert_eq!(store.generation(), 3);
    assert_eq!(store.0.freshness(), Freshness::Fresh);
    assert!(!store.status().expired);
    assert!(warnings.all().is_empty(), "{:?}", warnings.all());
}

#[tokio::test(start_paused = true)]
async fn a_rotation_by_another_trigger_replaces_the_old_tokens_moments() {
    let file = File::new(projected(0, TTL, None));
    let store = file.store(Some(Duration::from_secs(2 * 3600))).await;
    tokio::time::sleep(Duration::from_secs(1000)).await;
    // The watcher (here a call) installs a new token before the old one's moments.
    file.write(projected(1000, 1000 + TTL, None));
    store.reload().await.unwrap();
    tokio::time::sleep(Duration::from_secs(2900)).await;
    // No read at 2895.6 s for the replaced token; the next is the new token's.
    assert_times(&file.reads(), &[0.0, 1000.0, 1000.0 + 2895.6]);
}

#[tokio::test(start_paused = true)]
async fn a_legacy_extended_token_is_scheduled_from_warnafter() {
    let (warnings, _guard) = Warnings::capture();
    // exp a year out, warnafter one hour out; the file is never rotated (subPath).
    let file = File::new(projected(0, YEAR, Some(TTL)));
    let store = file.store(Some(Duration::from_secs(3600))).await;
    tokio::time::sleep(Duration::from_secs(4 * 3600)).await;
    // 80% of iat..warnafter plus 10 s, then only the period.
    let reads = file.reads();
    assert_times(&reads[..2], &[0.0, 2895.6]);
    assert_periodic(&reads[1..], 3600.0, 4.0 * 3600.0);
    let status = store.status();
    assert_eq!(status.expires_at, Some(wall(YEAR)));
    assert_eq!(status.refresh_at, Some(wall(TTL)));
    // Past warnafter, but not past 80% of iat..exp plus a minute.
    assert_eq!(store.0.freshness(), Freshness::Fresh);
    assert!(warnings.all().is_empty(), "{:?}", warnings.all());
}

#[tokio::test(start_paused = true)]
async fn a_year_long_exp_alone_adds_no_read() {
    let (warnings, _guard) = Warnings::capture();
    // A year, and dates near the end of time: no extra read, no overflow.
    for exp in [YEAR, 1 << 40] {
        let file = File::new(projected(0, exp, None));
        let store = file.store(Some(Duration::from_secs(60))).await;
        tokio::time::sleep(Duration::from_secs(601)).await;
        drop(store);
        let reads = file.reads();
        let rel: Vec<f64> = reads.iter().map(|r| r - reads[0]).collect();
        assert_periodic(&rel, 60.0, 601.0);
    }
    assert!(warnings.all().is_empty());
}

#[tokio::test(start_paused = true)]
async fn opaque_and_bootstrap_tokens_are_read_on_the_period_only() {
    for token in ["opaque-token-value", "abcdef.0123456789abcdef"] {
        let file = File::new(token.to_owned());
        let store = file.store(Some(Duration::from_secs(60))).await;
        tokio::time::sleep(Duration::from_secs(181)).await;
        drop(store);
        let reads = file.reads();
        let since = reads[0];
        let rel: Vec<f64> = reads.iter().map(|r| r - since).collect();
        assert_periodic(&rel, 60.0, 181.0);
    }
}

#[tokio::test(start_paused = true)]
async fn each_warning_fires_once_per_token_at_its_time() {
    let (warnings, _guard) = Warnings::capture();
    let file = File::new(projected(0, TTL, None));
    let store = file.store(Some(Duration::from_secs(60))).await;
    assert_eq!(store.0.freshness(), Freshness::Fresh);

    tokio::time::sleep(Duration::from_secs(2945)).await;
    assert!(warnings.all().is_empty(), "{:?}", warnings.all());
    assert!(!store.0.freshness().is_stale());
    // Overdue: 80% of iat..exp (2885.6 s) plus a minute, checked by a read then.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_times(&warnings.times(OVERDUE), &[2945.6]);
    assert_eq!(store.0.freshness(), Freshness::Overdue);
    // Expired: at exp, after a read that finds the same token; once, however many
    // reads follow.
    tokio::time::sleep(Duration::from_secs(3 * 3600)).await;
    assert_times(&warnings.times(OVERDUE), &[2945.6]);
    assert_times(&warnings.times(EXPIRED), &[3607.0]);
    let status = store.status();
    assert_eq!(store.0.freshness(), Freshness::Expired);
    assert!(status.expired);
    assert_eq!(status.expires_at, Some(wall(TTL)));
    assert!(file.reads().len() > 180, "the timer kept reading");

    // A new token gets its own warnings.
    let now = 3 * 3600 + 2946;
    file.write(projected(now, now + 100, None));
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(store.generation(), 2);
    let expired = warnings.times(EXPIRED);
    assert_eq!(expired.len(), 2, "{expired:?}");
    assert!(
        (expired[1] - (now + 100) as f64).abs() < 0.002,
        "{expired:?}"
    );
    // The text names the token by kind, fingerprint and sub; never the token.
    let secret = file.content.lock().unwrap().clone();
    let signature = secret.rsplit('.').next().unwrap().to_owned();
    for (_, text) in warnings.all() {
        assert!(text.contains("jwt token "), "{text}");
        assert!(
            text.contains("system:serviceaccount:payments:api"),
            "{text}"
        );
        assert!(!text.contains(&signature), "{text}");
    }
}

#[tokio::test(start_paused = true)]
async fn without_a_period_the_tokens_own_moments_still_read_it() {
    let (warnings, _guard) = Warnings::capture();
    let file = File::new(projected(0, 0, None));
    // exp == iat == now: expired from the start, and no moment left to read at.
    let store = file.store(None).await;
    assert_times(&warnings.times(EXPIRED), &[0.0]);
    let file2 = File::new(projected(0, 100, None));
    let _store2 = file2.store(None).await;
    tokio::time::sleep(Duration::from_secs(200)).await;
    // No periodic read; the rotation point plus 10 s, the expiry, and the overdue point
    // (80% plus a minute, here past the expiry) are read at.
    assert_times(&file2.reads(), &[0.0, 90.0, 100.0, 140.0]);
    assert_times(&file.reads(), &[0.0]);
    assert_times(&warnings.times(EXPIRED), &[0.0, 100.0]);
    // Once per token: a read that finds the same expired token again says nothing more.
    store.reload().await.unwrap();
    assert_eq!(warnings.times(EXPIRED).len(), 2);
}

/// A kubelet that rotates the token at 80% of its lifetime plus a jitter of 0..10 s.
async fn kubelet(file: File, start: Instant, legacy: bool, jitters: Vec<u64>) {
    let mut iat = 0;
    for jitter in jitters {
        let next = iat + TTL * 4 / 5 + jitter;
        tokio::time::sleep_until(start + Duration::from_secs(next)).await;
        iat = next;
        let token = if legacy {
            projected(iat, iat + YEAR, Some(iat + TTL))
        } else {
            projected(iat, iat + TTL, None)
        };
        file.write(token);
    }
}

#[tokio::test(start_paused = true)]
async fn no_warning_for_a_healthy_rotating_file() {
    for legacy in [false, true] {
        let (warnings, _guard) = Warnings::capture();
        let start = Instant::now();
        let first = if legacy {
            projected(0, YEAR, Some(TTL))
        } else {
            projected(0, TTL, None)
        };
        let file = File::new(first);
        let store = file.store(Some(Duration::from_secs(60))).await;
        let jitters = vec![0, 3, 10, 7, 1, 9, 5, 2, 8, 4];
        let rotations = jitters.len() as u64;
        kubelet(file.clone(), start, legacy, jitters).await;
        tokio::time::sleep(Duration::from_secs(60)).await;
        assert_eq!(store.generation(), rotations + 1, "legacy {legacy}");
        assert!(warnings.all().is_empty(), "{:?}", warnings.all());
        assert_eq!(store.0.freshness(), Freshness::Fresh);
    }
}

#[test]
fn the_cut_to_half_of_the_time_left_never_lengthens_a_backoff() {
    let token = crate::token::Token::parse_capped(b"opaque", 64)
        .unwrap()
        .with_source_dates(wall(0), Some(wall(600)), None);
    let at = |secs: f64| wall(0) + Duration::from_secs_f64(secs);
    let wait = |backoff: Duration, now: f64| super::retry_wait(backoff, &token, at(now));
    let minute = Duration::from_secs(64);
    assert_eq!(wait(minute, 543.0), Duration::from_secs_f64(28.5));
    assert_eq!(
        wait(minute, 599.5),
        Duration::from_secs(1),
        "cut no shorter than 1 s"
    );
    assert_eq!(wait(minute, 600.0), minute, "expired: uncut");
    assert_eq!(wait(minute, 100.0), minute, "far from the expiry: uncut");
    // A store with a short period backs off below a second: the cut keeps it so.
    let short = Duration::from_millis(50);
    assert_eq!(wait(short, 599.5), short);
}

#[test]
fn moments_of_a_projected_token() {
    let token = |jwt: String| crate::token::Token::parse_capped(jwt.as_bytes(), 1 << 16).unwrap();
    let t = token(projected(0, TTL, None));
    let at = |secs: f64| wall(0) + Duration::from_secs_f64(secs);
    assert_eq!(super::next_moment(&t, wall(0)), Some(at(2895.6)));
    assert_eq!(super::next_moment(&t, at(2895.6)), Some(at(2945.6)));
    assert_eq!(super::next_moment(&t, at(2945.6)), Some(wall(TTL)));
    assert_eq!(super::next_moment(&t, wall(TTL)), None);
    let opaque = token("opaque".into());
    assert_eq!(super::next_moment(&opaque, wall(0)), None);
}

/// A source that mints a new opaque token on every fetch, valid for `ttl` from then, or
/// fails while `failing` is set; it records when it was asked.
#[derive(Clone)]
struct Minting {
    start: Instant,
    ttl: Option<Duration>,
    /// Asks to be fetched again this long after each fetch.
    refresh_in: Option<Duration>,
    failing: Arc<Mutex<bool>>,
    fetches: Arc<Mutex<Vec<Duration>>>,
}

impl crate::source::TokenSource for Minting {
    type Error = std::io::Error;

    async fn fetch(
        &self,
        _cx: crate::source::FetchContext,
    ) -> Result<crate::source::Fetched, std::io::Error> {
        let elapsed = self.start.elapsed();
        let n = {
            let mut fetches = self.fetches.lock().unwrap();
            fetches.push(elapsed);
            fetches.len()
        };
        if *self.failing.lock().unwrap() {
            return Err(std::io::Error::other("the token service is down"));
        }
        let mut fetched = crate::source::Fetched::new(format!("minted-{n}"));
        if let Some(ttl) = self.ttl {
            fetched = fetched.with_expires_at(wall(0) + elapsed + ttl);
        }
        if let Some(after) = self.refresh_in {
            fetched = fetched.with_refresh_at(wall(0) + elapsed + after);
        }
        Ok(fetched)
    }

    fn describe(&self) -> String {
        "minting test source".into()
    }
}

impl Minting {
    fn new(ttl: Option<Duration>) -> Self {
        Self {
            start: Instant::now(),
            ttl,
            refresh_in: None,
            failing: Arc::default(),
            fetches: Arc::default(),
        }
    }

    fn fetches(&self) -> Vec<f64> {
        let fetches = self.fetches.lock().unwrap();
        fetches.iter().map(Duration::as_secs_f64).collect()
    }

    async fn store(&self, period: Option<Duration>) -> TokenStore {
        let builder = crate::TokenStore::builder(self.clone()).clock(Clock::tokio_from(wall(0)));
        let builder = match period {
            Some(p) => builder.refresh_interval(p),
            None => builder,
        };
        builder.load().await.unwrap()
    }
}

#[tokio::test(start_paused = true)]
async fn a_source_expiry_is_refreshed_before_it_by_a_tenth_of_the_lifetime_and_a_jitter() {
    let source = Minting::new(Some(Duration::from_secs(600)));
    // A source that gives expiries has no period by default.
    let store = source.store(None).await;
    tokio::time::sleep(Duration::from_secs(1800)).await;
    let fetches = source.fetches();
    assert!(fetches.len() >= 4, "{fetches:?}");
    for pair in fetches.windows(2) {
        // 600 s less a margin of 60 s (a tenth, at least a minute) less up to 15 s, give
        // or take the float's rounding of the two times.
        let gap = pair[1] - pair[0];
        assert!((524.999..=540.001).contains(&gap), "{fetches:?}");
    }
    assert_eq!(store.0.freshness(), Freshness::Fresh);
    assert!(store.status().expires_at.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_short_lived_token_is_refreshed_at_half_its_life_not_on_every_check() {
    let source = Minting::new(Some(Duration::from_secs(30)));
    let _store = source.store(None).await;
    tokio::time::sleep(Duration::from_secs(61)).await;
    // A minute's margin would be past the token's birth: half its life instead.
    assert_times(&source.fetches(), &[0.0, 15.0, 30.0, 45.0, 60.0]);
}

#[tokio::test(start_paused = true)]
async fn a_token_without_an_expiry_from_such_a_source_is_kept_until_asked() {
    let source = Minting::new(None);
    let store = source.store(None).await;
    tokio::time::sleep(Duration::from_secs(24 * 3600)).await;
    assert_eq!(
        source.fetches().len(),
        1,
        "no period, no dates: nothing to refresh on"
    );
    store.reload().await.unwrap();
    assert_eq!(source.fetches().len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_failed_read_is_retried_sooner_with_a_backoff_up_to_the_period() {
    let source = Minting::new(None);
    let store = source.store(Some(Duration::from_secs(60))).await;
    *source.failing.lock().unwrap() = true;
    tokio::time::sleep(Duration::from_secs(250)).await;
    // The first read after the period (and its jitter), then retries 1, 2, 4, ... s after
    // each failure, up to the period.
    let fetches = source.fetches();
    assert_periodic(&fetches[..2], 60.0, 61.0);
    let first = fetches[1];
    let want = [0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0, 123.0, 183.0];
    let rel: Vec<f64> = fetches[1..].iter().map(|f| f - first).collect();
    assert_times(&rel, &want);
    assert_eq!(store.generation(), 1, "the last good token stays");
    assert!(store.status().last_error.is_some());
    // Back up: the next attempt succeeds and the period resumes.
    *source.failing.lock().unwrap() = false;
    tokio::time::sleep(Duration::from_secs(121)).await;
    let fetches = source.fetches();
    let rel: Vec<f64> = fetches[want.len() + 1..]
        .iter()
        .map(|f| f - first)
        .collect();
    assert_times(&rel[..1], &[243.0]);
    assert_periodic(&fetches[want.len() + 1..], 60.0, 371.0);
    assert!(store.status().last_error.is_none());
}

#[test]
fn the_period_is_spread_by_a_few_percent_at_least_a_second() {
    let spread = |secs: f64| super::spread(Duration::from_secs_f64(secs)).as_secs_f64();
    assert_eq!(spread(60.0), 3.0);
    assert_eq!(spread(3600.0), 180.0);
    assert_eq!(spread(10.0), 1.0, "at least a second");
    assert_eq!(spread(2.0), 0.5, "at most a quarter of a short period");
}

#[tokio::test(start_paused = true)]
async fn stores_started_together_spread_their_periodic_reads() {
    let files: Vec<File> = (0..50).map(|i| File::new(format!("token-{i}"))).collect();
    let mut stores = Vec::new();
    for file in &files {
        stores.push(file.store(Some(Duration::from_secs(60))).await);
    }
    tokio::time::sleep(Duration::from_secs(64)).await;
    let firsts: Vec<f64> = files.iter().map(|f| f.reads()[1]).collect();
    // A jitter is under 3 s, but tokio's timer rounds a deadline up to its next
    // millisecond: a draw of 2.9996 s fires at 63.000.
    assert!(
        firsts.iter().all(|t| (60.0..=63.001).contains(t)),
        "{firsts:?}"
    );
    let (min, max) = firsts
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &t| (lo.min(t), hi.max(t)));
    // Fifty draws over 3 s: spread over more than a second, not in step.
    assert!(max - min > 1.0, "{firsts:?}");
    let distinct: std::collections::BTreeSet<u64> =
        firsts.iter().map(|t| (t * 1000.0) as u64).collect();
    assert!(distinct.len() > 40, "{firsts:?}");
    // And each draws anew: the second read is not the first's jitter again.
    tokio::time::sleep(Duration::from_secs(63)).await;
    let gaps: Vec<f64> = files.iter().map(|f| f.reads()[2] - f.reads()[1]).collect();
    assert!(
        gaps.iter()
            .zip(&firsts)
            .any(|(gap, first)| (gap - first).abs() > 0.01)
    );
    drop(stores);
}

#[tokio::test(start_paused = true)]
async fn a_retry_never_waits_past_halfway_to_the_expiry() {
    let (warnings, _guard) = Warnings::capture();
    let mut source = Minting::new(Some(Duration::from_secs(600)));
    source.refresh_in = Some(Duration::from_secs(480));
    let store = source.store(None).await;
    *source.failing.lock().unwrap() = true;
    tokio::time::sleep(Duration::from_secs(590)).await;
    // 1 s, 2 s, 4 s ... from the refresh point at 480 s, each wait cut to half of what
    // the token has left: never a minute-long wait across the expiry.
    let want = [
        0.0, 480.0, 481.0, 483.0, 487.0, 495.0, 511.0, 543.0, 571.5, 585.75,
    ];
    assert_times(&source.fetches(), &want);
    // The source is back at 590 s: read before the token expires at 600 s.
    *source.failing.lock().unwrap() = false;
    tokio::time::sleep(Duration::from_secs(9)).await;
    assert_eq!(store.generation(), 2, "{:?}", source.fetches());
    assert_times(&source.fetches()[want.len()..], &[592.875]);
    assert!(store.status().last_error.is_none());
    assert_eq!(store.0.freshness(), Freshness::Fresh);
    assert!(warnings.times(EXPIRED).is_empty());
}

#[tokio::test(start_paused = true)]
async fn after_the_expiry_the_backoff_runs_on_uncut_and_the_status_says_expired() {
    // Captured also so that this thread never registers the warning's callsite as
    // uninteresting while another test listens for it.
    let (warnings, _guard) = Warnings::capture();
    let mut source = Minting::new(Some(Duration::from_secs(600)));
    source.refresh_in = Some(Duration::from_secs(480));
    let store = source.store(None).await;
    *source.failing.lock().unwrap() = true;
    tokio::time::sleep(Duration::from_secs(1800)).await;
    // Cut to half of what is left, down to a second apart, then a read at the expiry;
    // after it the backoff (here at its five-minute cap) runs on: no read loop.
    let want = [
        0.0, 480.0, 481.0, 483.0, 487.0, 495.0, 511.0, 543.0, 571.5, 585.75, 592.875, 596.438,
        598.219, 599.219, 600.0, 900.0, 1200.0, 1500.0,
    ];
    assert_times(&source.fetches(), &want);
    let status = store.status();
    assert_eq!(store.0.freshness(), Freshness::Expired);
    // The source's own expiry: expired, for status, with no JWT to say so.
    assert!(status.expired);
    assert!(status.last_error.is_some());
    assert_times(&warnings.times(EXPIRED), &[600.0]);
}

#[tokio::test(start_paused = true)]
async fn a_source_that_asks_again_at_once_gets_the_backoff_not_a_loop() {
    // Every token asks to be fetched again at once (the kubelet's rule for a token issued
    // after our clock's now).
    let mut source = Minting::new(Some(Duration::from_secs(3600)));
    source.refresh_in = Some(Duration::ZERO);
    let store = source.store(None).await;
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_times(&source.fetches(), &[0.0, 1.0, 3.0, 7.0, 15.0, 31.0, 63.0]);
    assert_eq!(store.generation(), 7);
}

#[tokio::test(start_paused = true)]
async fn a_refresh_moment_without_an_expiry_is_kept() {
    // An opaque token that says when to fetch it again, and nothing about its expiry.
    let mut source = Minting::new(None);
    source.refresh_in = Some(Duration::from_secs(100));
    let _store = source.store(None).await;
    tokio::time::sleep(Duration::from_secs(250)).await;
    assert_times(&source.fetches(), &[0.0, 100.0, 200.0]);
}

#[test]
fn tokens_of_one_lifetime_draw_their_own_jitter() {
    // A fleet's tokens issued together must not all be refreshed at one moment.
    // Read at the same moment, with the same expiry: only the token tells them apart.
    let loaded = SystemTime::now();
    let exp = loaded + Duration::from_secs(3600);
    let moment = |i: usize| {
        let token = crate::token::Token::parse_capped(format!("token-{i}").as_bytes(), 1 << 16)
            .unwrap()
            .with_source_dates(loaded, None, None);
        super::before_expiry(&token, exp).unwrap()
    };
    let moments: Vec<SystemTime> = (0..5).map(moment).collect();
    // Each token's own, every time.
    assert_eq!(moment(3), moments[3]);
    let first = moments.iter().min().unwrap();
    let last = moments.iter().max().unwrap();
    // Each is drawn over 90 s (a quarter of the 360 s margin).
    let spread = last.duration_since(*first).unwrap();
    assert!(spread > Duration::from_secs(1), "{spread:?}");
}
