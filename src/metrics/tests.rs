//! Each metric moves as the scenario says, read through a recorder of the test's own.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use ::metrics::{Counter, Gauge, Histogram, Key, KeyName, Metadata, Recorder, SharedString, Unit};
use http::{Request, Response, StatusCode, header::AUTHORIZATION};
use metrics_util::registry::{AtomicStorage, Registry};
use tower::{Layer, ServiceExt, service_fn};

use crate::clock::Clock;
use crate::source::{FetchContext, Fetched, TokenSource};
use crate::{BearerLayer, TokenStore};

/// A recorder that keeps cumulative counters and last gauge values, readable at any time.
struct Recorded(Arc<Registry<Key, AtomicStorage>>);

impl Recorder for Recorded {
    fn describe_counter(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_gauge(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn describe_histogram(&self, _: KeyName, _: Option<Unit>, _: SharedString) {}
    fn register_counter(&self, key: &Key, _: &Metadata<'_>) -> Counter {
        self.0
            .get_or_create_counter(key, |c| Counter::from_arc(c.clone()))
    }
    fn register_gauge(&self, key: &Key, _: &Metadata<'_>) -> Gauge {
        self.0
            .get_or_create_gauge(key, |g| Gauge::from_arc(g.clone()))
    }
    fn register_histogram(&self, key: &Key, _: &Metadata<'_>) -> Histogram {
        self.0
            .get_or_create_histogram(key, |h| Histogram::from_arc(h.clone()))
    }
}

impl Recorded {
    fn new() -> Self {
        Self(Arc::new(Registry::atomic()))
    }

    /// `name{labels}` → value, labels sorted, every series recorded so far.
    fn series(&self) -> HashMap<String, f64> {
        let id = |key: &Key| {
            let mut labels: Vec<String> = key
                .labels()
                .map(|l| format!("{}={}", l.key(), l.value()))
                .collect();
            labels.sort();
            format!("{}{{{}}}", key.name(), labels.join(","))
        };
        let mut out = HashMap::new();
        for (key, c) in self.0.get_counter_handles() {
            #[allow(clippy::cast_precision_loss)]
            out.insert(id(&key), c.load(Ordering::SeqCst) as f64);
        }
        for (key, g) in self.0.get_gauge_handles() {
            out.insert(id(&key), f64::from_bits(g.load(Ordering::SeqCst)));
        }
        out
    }

    #[track_caller]
    fn value(&self, series: &str) -> f64 {
        let all = self.series();
        *all.get(series)
            .unwrap_or_else(|| panic!("no series {series} in {all:#?}"))
    }
}

/// A source whose token the test sets, or fails while `failing` holds a message.
#[derive(Clone, Default)]
struct Scripted {
    token: Arc<Mutex<String>>,
    failing: Arc<Mutex<bool>>,
}

impl Scripted {
    fn new(token: &str) -> Self {
        let this = Self::default();
        this.set(token);
        this
    }
    fn set(&self, token: &str) {
        *self.token.lock().unwrap() = token.to_owned();
    }
    /// A loader named `name`: each test its own, because the process-wide gauges task
    /// publishes every live store's gauges to the recorder of whichever test runs it.
    fn loader(&self, name: &'static str) -> crate::StoreBuilder {
        let this = self.clone();
        crate::test_support::loader("scripted", move || {
            let this = this.clone();
            async move {
                if *this.failing.lock().unwrap() {
                    return Err(std::io::Error::other("the store is down"));
                }
                Ok(this.token.lock().unwrap().clone().into_bytes())
            }
        })
        .no_periodic_refresh()
        .name(name)
    }
}

#[tokio::test]
async fn reloads_are_counted_by_trigger_and_result() {
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    let source = Scripted::new("one");
    let store = source.loader("tenant-7").load().await.unwrap();
    let reloads = |trigger: &str, result: &str| {
        recorder.value(&format!(
            "bearer_reload_reloads_total{{result={result},source=tenant-7,trigger={trigger}}}"
        ))
    };
    assert_eq!(reloads("load", "unchanged"), 1.0);
    source.set("two");
    store.reload().await.unwrap();
    assert_eq!(reloads("call", "rotated"), 1.0);
    store.reload().await.unwrap();
    assert_eq!(reloads("call", "unchanged"), 1.0);
    *source.failing.lock().unwrap() = true;
    store.reload().await.unwrap_err();
    assert_eq!(reloads("call", "failed"), 1.0);
    assert_eq!(
        recorder.value("bearer_reload_generation{source=tenant-7}"),
        2.0
    );
    // No token anywhere in the series.
    let all = format!("{:?}", recorder.series());
    assert!(!all.contains("one") && !all.contains("two"), "{all}");
}

#[tokio::test]
async fn a_401_its_retry_and_a_kept_authorization_are_counted() {
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    let source = Scripted::new("old");
    let store = source.loader("tenant-8").load().await.unwrap();
    source.set("new");
    let server = service_fn(|req: Request<String>| async move {
        let ok = req.headers()[AUTHORIZATION] == "Bearer new";
        let mut res = Response::new(String::new());
        if !ok {
            *res.status_mut() = StatusCode::UNAUTHORIZED;
        }
        Ok::<_, std::convert::Infallible>(res)
    });
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(server);
    let res = client.clone().oneshot(Request::new(String::new())).await;
    assert_eq!(res.unwrap().status(), StatusCode::OK);
    let own = Request::builder()
        .header(AUTHORIZATION, "Basic dXNlcg==")
        .body(String::new())
        .unwrap();
    let res = client.oneshot(own).await;
    assert_eq!(res.unwrap().status(), StatusCode::UNAUTHORIZED);
    let v = |s: &str| recorder.value(s);
    assert_eq!(v("bearer_reload_unauthorized_total{source=tenant-8}"), 1.0);
    assert_eq!(
        v("bearer_reload_reloads_total{result=rotated,source=tenant-8,trigger=unauthorized}"),
        1.0
    );
    assert_eq!(
        v("bearer_reload_retries_total{result=succeeded,source=tenant-8}"),
        1.0
    );
    assert_eq!(
        v("bearer_reload_requests_kept_authorization_total{source=tenant-8}"),
        1.0
    );
}

#[tokio::test]
async fn the_watch_state_gauge_follows_the_directory() {
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("d");
    std::fs::create_dir(&dir).unwrap();
    std::fs::write(dir.join("token"), "one").unwrap();
    let store = crate::test_support::file(dir.join("token"))
        .no_periodic_refresh()
        .name("watched")
        .load()
        .await
        .unwrap();
    let state = |s: &str| {
        recorder.value(&format!(
            "bearer_reload_watch_state{{source=watched,state={s}}}"
        ))
    };
    assert_eq!(
        (state("active"), state("degraded"), state("off")),
        (1.0, 0.0, 0.0)
    );
    std::fs::remove_dir_all(&dir).unwrap();
    crate::test_support::eventually("degraded", || state("degraded") == 1.0).await;
    assert_eq!(state("active"), 0.0);
    drop(store);
}

/// A source minting opaque tokens that expire `ttl` after they are fetched, on the
/// store's simulated clock.
#[derive(Clone)]
struct Expiring {
    clock: Clock,
    ttl: Duration,
    n: Arc<Mutex<u32>>,
}

impl TokenSource for Expiring {
    type Error = std::io::Error;
    async fn fetch(&self, _: FetchContext) -> Result<Fetched, std::io::Error> {
        let mut n = self.n.lock().unwrap();
        *n += 1;
        Ok(Fetched::new(format!("minted-{n}")).with_expires_at(self.clock.now() + self.ttl))
    }
    fn describe(&self) -> String {
        "expiring".into()
    }
}

#[tokio::test(start_paused = true)]
async fn the_dates_are_timestamps_that_the_reads_set() {
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    const T0: f64 = 1_800_000_000.0;
    let clock = Clock::tokio_from(SystemTime::UNIX_EPOCH + Duration::from_secs(T0 as u64));
    let source = Expiring {
        clock,
        ttl: Duration::from_secs(3600),
        n: Arc::default(),
    };
    let store = TokenStore::builder(source)
        .no_periodic_refresh()
        .clock(clock)
        .load()
        .await
        .unwrap();
    let gauge = |name: &str| recorder.value(&format!("bearer_reload_{name}{{source=expiring}}"));
    assert_eq!(gauge("token_expiry_timestamp_seconds"), T0 + 3600.0);
    assert_eq!(gauge("token_issued_timestamp_seconds"), T0);
    assert_eq!(gauge("source_changed_timestamp_seconds"), T0);
    // Time alone changes none of them: nothing has to run to keep them true.
    tokio::time::advance(Duration::from_secs(600)).await;
    assert_eq!(gauge("token_expiry_timestamp_seconds"), T0 + 3600.0);
    // A read that finds a new token moves them.
    store.reload().await.unwrap();
    assert_eq!(gauge("token_expiry_timestamp_seconds"), T0 + 600.0 + 3600.0);
    assert_eq!(gauge("token_issued_timestamp_seconds"), T0 + 600.0);
    assert_eq!(gauge("source_changed_timestamp_seconds"), T0 + 600.0);
    assert_eq!(gauge("generation"), 2.0);
}

/// A JWT's issued date is its own `iat`, not the moment it was read.
#[tokio::test]
async fn a_jwts_issued_date_is_its_iat() {
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    const IAT: u64 = 1_800_000_000;
    let _store = Scripted::new(&jwt(IAT, IAT + 3600))
        .loader("issued")
        .load()
        .await
        .unwrap();
    assert_eq!(
        recorder.value("bearer_reload_token_issued_timestamp_seconds{source=issued}"),
        IAT as f64
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_token_has_its_expiry_in_the_past() {
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    const T0: u64 = 1_800_000_000;
    let clock = Clock::tokio_from(SystemTime::UNIX_EPOCH + Duration::from_secs(T0));
    // The source hands out a token that expired a minute ago: kept, and said so.
    let _store = TokenStore::builder(Fixed(clock.now() - Duration::from_secs(60)))
        .clock(clock)
        .load()
        .await
        .unwrap();
    assert_eq!(
        recorder.value("bearer_reload_token_expiry_timestamp_seconds{source=fixed}"),
        (T0 - 60) as f64
    );
}

/// A source whose token expires at a fixed moment.
struct Fixed(SystemTime);

impl TokenSource for Fixed {
    type Error = std::io::Error;
    async fn fetch(&self, _: FetchContext) -> Result<Fetched, std::io::Error> {
        Ok(Fetched::new("fixed").with_expires_at(self.0))
    }
    fn describe(&self) -> String {
        "fixed".into()
    }
}

fn jwt(iat: u64, exp: u64) -> String {
    let claims = crate::token::claims::tests::service_account_claims(iat, exp, None);
    crate::token::claims::tests::sign(jsonwebtoken::Algorithm::ES256, &claims)
}

#[tokio::test(start_paused = true)]
async fn a_rotator_that_stops_raises_the_stall_once_and_a_rotation_clears_it() {
    let (logs, _log_guard) = crate::test_support::capture_logs();
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    const T0: u64 = 1_800_000_000;
    let clock = Clock::tokio_from(SystemTime::UNIX_EPOCH + Duration::from_secs(T0));
    let source = Scripted::new(&jwt(T0, T0 + 3600));
    let store: TokenStore = source
        .loader("stalling")
        .refresh_interval(Duration::from_secs(60))
        .clock(clock)
        .load()
        .await
        .unwrap();
    let stalled = || recorder.value("bearer_reload_rotation_stalled{source=stalling}");
    assert_eq!(stalled(), 0.0);
    // 80% of the hour (2880 s) plus a minute: overdue, and the file never changed.
    tokio::time::sleep(Duration::from_secs(2900)).await;
    assert_eq!(stalled(), 0.0);
    assert!(store.status().stalled_since.is_none());
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(stalled(), 1.0);
    let since = store.status().stalled_since.expect("stalled");
    assert_eq!(
        since,
        SystemTime::UNIX_EPOCH + Duration::from_secs(T0 + 2880 + 60)
    );
    // The timer keeps reading; the warning is said once.
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(logs.count("overdue for rotation"), 1);
    // The writer comes back: the signal clears.
    source.set(&jwt(T0 + 3300, T0 + 6900));
    tokio::time::sleep(Duration::from_secs(61)).await;
    assert_eq!(store.generation(), 2);
    assert_eq!(stalled(), 0.0);
    assert!(store.status().stalled_since.is_none());
}

#[test]
fn timestamps_are_seconds_since_the_epoch_negative_before_it() {
    use std::time::UNIX_EPOCH;
    assert_eq!(
        super::timestamp(UNIX_EPOCH + Duration::from_millis(1500)),
        1.5
    );
    assert_eq!(
        super::timestamp(UNIX_EPOCH - Duration::from_millis(2500)),
        -2.5
    );
}

/// A client-certificate store's dates are its certificate's, under names of their own: a
/// dashboard of token expiries does not mix in certificates.
#[cfg(feature = "tls")]
#[tokio::test]
async fn a_certificate_stores_dates_have_names_of_their_own() {
    let recorder = Recorded::new();
    let _guard = ::metrics::set_default_local_recorder(&recorder);
    let ca = crate::test_support::pki::Ca::new("kubernetes");
    let issued = ca.client("n1", Duration::from_secs(3600));
    let source = crate::test_support::pem("pem", issued.combined());
    let store = crate::tls::IdentityStore::builder(source)
        .name("node identity")
        .load()
        .await
        .unwrap();
    let certificate = store.certificate();
    let seconds = |at: SystemTime| {
        at.duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
    };
    let gauge =
        |name: &str| recorder.value(&format!("bearer_reload_{name}{{source=node identity}}"));
    assert_eq!(
        gauge("client_certificate_expiry_timestamp_seconds"),
        seconds(certificate.not_after)
    );
    assert_eq!(
        gauge("client_certificate_issued_timestamp_seconds"),
        seconds(certificate.not_before)
    );
    assert_eq!(gauge("generation"), 1.0);
    let series = recorder.series();
    assert!(
        !series.keys().any(|k| k.starts_with("bearer_reload_token_")),
        "{series:#?}"
    );
}
