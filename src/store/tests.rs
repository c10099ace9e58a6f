use super::*;
use crate::sync::lock;
use crate::token::TokenError;
use std::sync::Mutex;
use std::sync::atomic::AtomicUsize;
use std::time::Duration;

/// A loader whose bytes the test sets, counting its calls, optionally held at a gate.
#[derive(Clone)]
struct Scripted {
    bytes: Arc<Mutex<Result<Vec<u8>, String>>>,
    calls: Arc<AtomicUsize>,
    gate: Arc<tokio::sync::Semaphore>,
}

/// Test-only views of a store.
impl<C: Credential> Store<C> {
    /// How the current token stands now, on the store's clock.
    pub(crate) fn freshness(&self) -> crate::token::Freshness {
        self.current().freshness_at(self.clock().now())
    }

    /// Whether both are clones of the same store.
    pub(crate) fn ptr_eq(&self, other: &Store<C>) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Scripted {
    fn new(initial: &str) -> Self {
        Self {
            bytes: Arc::new(Mutex::new(Ok(initial.as_bytes().to_vec()))),
            calls: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(
                tokio::sync::Semaphore::MAX_PERMITS,
            )),
        }
    }
    fn set(&self, v: Result<&str, &str>) {
        *lock(&self.bytes) = v.map(|s| s.as_bytes().to_vec()).map_err(str::to_owned);
    }
    fn loader(&self) -> crate::StoreBuilder {
        let this = self.clone();
        crate::test_support::loader("scripted", move || {
            let this = this.clone();
            async move {
                this.calls.fetch_add(1, Ordering::SeqCst);
                let _permit = this.gate.acquire().await.unwrap();
                lock(&this.bytes).clone()
            }
        })
        .no_periodic_refresh()
    }
    /// Like [`loader`](Self::loader), but the bytes are taken when a read starts, before
    /// the gate (a write that lands during a read is not that read's), and each permit of
    /// the gate is used up by the read it lets through.
    fn snapshot_loader(&self) -> crate::StoreBuilder {
        let this = self.clone();
        crate::test_support::loader("snapshot", move || {
            let this = this.clone();
            let bytes = lock(&this.bytes).clone();
            async move {
                this.calls.fetch_add(1, Ordering::SeqCst);
                // Each permit lets one read through.
                this.gate.acquire().await.unwrap().forget();
                bytes
            }
        })
        .no_periodic_refresh()
    }
}

#[tokio::test(start_paused = true)]
async fn a_hung_read_times_out_and_does_not_hold_up_later_reloads() {
    let src = Scripted::new("one");
    let store = src
        .loader()
        .fetch_timeout(Duration::from_secs(10))
        .load()
        .await
        .unwrap();
    // The next reads hang (a dead mount, a FIFO without a writer).
    src.gate.forget_permits(usize::MAX);
    src.set(Ok("two"));
    let err = store.reload().await.unwrap_err();
    assert!(matches!(err, LoadError::Timeout { .. }), "{err:?}");
    assert!(err.to_string().contains("loader scripted"), "{err}");
    assert_eq!(err.origin(), "loader scripted");
    assert_eq!(store.current().header_value(), "Bearer one");
    // A 401 gets its answer (no newer token) instead of waiting forever.
    assert!(
        store
            .0
            .refresh_after_refusal(1, Certainty::Certain)
            .await
            .is_none()
    );
    // Once reads work again, the next reload installs the new token.
    src.gate.add_permits(1);
    assert_eq!(store.reload().await.unwrap().generation(), 2);
}

#[tokio::test]
async fn keeps_the_last_good_token_on_every_failure_kind() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "good\n").unwrap();
    let store = crate::test_support::file(&path)
        .no_watch()
        .no_periodic_refresh()
        .max_size(64)
        .load()
        .await
        .unwrap();

    type Setup = Box<dyn Fn(&std::path::Path)>;
    let cases: Vec<(&str, Setup)> = vec![
        (
            "missing",
            Box::new(|p| {
                let _ = std::fs::remove_file(p);
                let _ = std::fs::remove_dir(p);
            }),
        ),
        ("empty", Box::new(|p| std::fs::write(p, " \n").unwrap())),
        ("bad byte", Box::new(|p| std::fs::write(p, "a\0b").unwrap())),
        (
            "oversize",
            Box::new(|p| std::fs::write(p, [b'x'; 65]).unwrap()),
        ),
        (
            "directory",
            Box::new(|p| {
                std::fs::remove_file(p).unwrap();
                std::fs::create_dir(p).unwrap();
            }),
        ),
    ];
    for (name, setup) in cases {
        let _ = std::fs::remove_dir(&path);
        std::fs::write(&path, "good").unwrap();
        setup(&path);
        let err = store.reload().await.unwrap_err();
        assert_eq!(store.current().header_value(), "Bearer good", "{name}");
        assert_eq!(store.generation(), 1, "{name}");
        let status = store.status();
        let reported = status.last_error.expect(name).to_string();
        assert_eq!(reported, err.to_string(), "{name}");
        assert!(
            reported.contains(&path.display().to_string()),
            "{name}: {reported}"
        );
    }

    assert_eq!(store.status().failures, 5);

    // The next good read installs and clears the error.
    let _ = std::fs::remove_dir(&path);
    std::fs::write(&path, "next").unwrap();
    assert_eq!(store.reload().await.unwrap().generation(), 2);
    assert!(store.status().last_error.is_none());
}

#[tokio::test]
async fn a_failing_loader_keeps_the_last_good_token() {
    let src = Scripted::new("good");
    let store = src.loader().load().await.unwrap();
    src.set(Err("permission denied"));
    let err = store.reload().await.unwrap_err();
    assert_eq!(err.to_string(), "cannot fetch from loader scripted");
    assert_eq!(
        std::error::Error::source(&err).unwrap().to_string(),
        "permission denied"
    );
    src.set(Ok(""));
    assert!(matches!(
        store.reload().await.unwrap_err(),
        LoadError::Invalid {
            source: TokenError::Empty,
            ..
        }
    ));
    assert_eq!(store.current().header_value(), "Bearer good");
}

#[tokio::test]
async fn identical_bytes_keep_the_generation() {
    let src = Scripted::new("same");
    let store = src.loader().load().await.unwrap();
    let mut rx = store.subscribe();
    src.set(Ok("  same\n"));
    assert_eq!(store.reload().await.unwrap().generation(), 1);
    assert!(!rx.has_changed().unwrap());
    src.set(Ok("other"));
    assert_eq!(store.reload().await.unwrap().generation(), 2);
    assert!(rx.has_changed().unwrap());
    assert_eq!(*rx.borrow_and_update(), 2);
    let status = store.status();
    assert_eq!((status.reads, status.rotations), (3, 1));
}

#[tokio::test]
async fn concurrent_reloads_share_one_read() {
    let src = Scripted::new("one");
    let store = src.loader().load().await.unwrap();
    assert_eq!(src.calls.load(Ordering::SeqCst), 1);
    src.set(Ok("two"));
    // Hold the read at the gate until all 51 calls have been polled once (join_all
    // polls each in turn), then let it finish.
    src.gate.forget_permits(usize::MAX);
    let calls = futures_util::future::join_all((0..51).map(|_| store.reload()));
    let release = async {
        tokio::task::yield_now().await;
        src.gate.add_permits(1);
    };
    let (results, ()) = tokio::join!(calls, release);
    for r in results {
        assert_eq!(r.unwrap().header_value(), "Bearer two");
    }
    assert_eq!(src.calls.load(Ordering::SeqCst), 2, "one read for 51 calls");
}

#[tokio::test]
async fn a_fresh_reload_does_not_join_a_read_that_started_before_it() {
    let src = Scripted::new("one");
    let store = src.loader().load().await.unwrap();
    src.gate.forget_permits(usize::MAX);
    let early = tokio::spawn({
        let store = store.clone();
        async move { store.reload().await }
    });
    while src.calls.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    // The write lands after the early read began: a watcher's fresh reload must see it.
    src.set(Ok("two"));
    let fresh = tokio::spawn({
        let store = store.clone();
        async move {
            let handle = store.0.downgrade();
            let fresh = handle.reload(Trigger::Watch, Recency::AfterNow, OnFailure::Report);
            fresh.await.unwrap()
        }
    });
    src.gate
        .add_permits(tokio::sync::Semaphore::MAX_PERMITS - src.gate.available_permits());
    early.await.unwrap().unwrap();
    fresh.await.unwrap().unwrap();
    assert_eq!(store.generation(), 2);
    assert_eq!(src.calls.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_401_is_not_answered_by_a_read_that_started_before_it() {
    // A file whose bytes are taken when a read starts; reads wait at a gate.
    let file = Arc::new(Mutex::new("one"));
    let calls = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Semaphore::new(1));
    let store = crate::test_support::loader("snapshot", {
        let (file, calls, gate) = (file.clone(), calls.clone(), gate.clone());
        move || {
            let bytes = lock(&file).as_bytes().to_vec();
            let (calls, gate) = (calls.clone(), gate.clone());
            async move {
                calls.fetch_add(1, Ordering::SeqCst);
                drop(gate.acquire().await.unwrap());
                Ok::<_, std::io::Error>(bytes)
            }
        }
    })
    .no_periodic_refresh()
    .load()
    .await
    .unwrap();
    gate.forget_permits(usize::MAX);
    // A read in flight (a watcher's, for an unrelated event) that has read "one".
    let early = tokio::spawn({
        let store = store.clone();
        async move { store.reload().await }
    });
    while calls.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    // The writer lands "two", the server revokes "one": two requests get their 401.
    *lock(&file) = "two";
    let refused: Vec<_> = (0..2)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move { store.0.refresh_after_refusal(1, Certainty::Certain).await })
        })
        .collect();
    // Both 401s have asked for their read (the count goes up as they ask).
    crate::test_support::eventually("both 401s seen", || store.status().unauthorized == 2).await;
    gate.add_permits(tokio::sync::Semaphore::MAX_PERMITS);
    // The early caller is answered by its read or a later one (the 401s' read may have
    // finished too by the time it looks).
    assert!(early.await.unwrap().is_ok());
    for r in refused {
        let token = r.await.unwrap().expect("a newer token for the retry");
        assert_eq!(token.header_value(), "Bearer two");
    }
    let reads = calls.load(Ordering::SeqCst);
    assert_eq!(reads, 3, "the early read, then one read for both 401s");
    assert_eq!(store.status().unauthorized_reloads, 1);
}

#[tokio::test]
async fn a_caller_that_goes_away_does_not_cancel_the_read() {
    let src = Scripted::new("one");
    let store = src.loader().load().await.unwrap();
    src.gate.forget_permits(usize::MAX);
    src.set(Ok("two"));
    let mut generations = store.subscribe();
    let early = tokio::spawn({
        let store = store.clone();
        async move { store.reload().await }
    });
    while src.calls.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    // The caller is dropped mid-read (a timeout, a `select!`, a client that went away).
    early.abort();
    assert!(early.await.unwrap_err().is_cancelled());
    src.gate.add_permits(1);
    // The store's own read finishes and installs, for everyone, without another read.
    tokio::time::timeout(Duration::from_secs(5), generations.wait_for(|g| *g == 2))
        .await
        .expect("the read finished without its caller")
        .unwrap();
    assert_eq!(src.calls.load(Ordering::SeqCst), 2);
    assert_eq!(store.current().header_value(), "Bearer two");
}

#[tokio::test]
async fn reads_asked_for_during_a_read_queue_one_more_read() {
    let src = Scripted::new("one");
    let store = src.snapshot_loader().load().await.unwrap();
    src.gate.forget_permits(usize::MAX);
    let handle = store.0.downgrade();
    let first = tokio::spawn({
        let handle = handle.clone();
        async move {
            handle
                .reload(Trigger::Watch, Recency::AfterNow, OnFailure::Report)
                .await
        }
    });
    while src.calls.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    // Ten triggers during the read, each wanting a read that starts after it: one more.
    let later: Vec<_> = (0..10)
        .map(|_| {
            let handle = handle.clone();
            tokio::spawn(async move {
                handle
                    .reload(Trigger::Watch, Recency::AfterNow, OnFailure::Report)
                    .await
            })
        })
        .collect();
    src.set(Ok("two"));
    // The running read, which took "one" before the write, ends; the queued one starts
    // and waits at the gate. The later triggers' callers, woken by the first read's end,
    // must not take its answer.
    src.gate.add_permits(1);
    assert!(first.await.unwrap().unwrap().is_ok());
    crate::test_support::eventually("the queued read started", || {
        src.calls.load(Ordering::SeqCst) == 3
    })
    .await;
    src.gate
        .add_permits(tokio::sync::Semaphore::MAX_PERMITS / 2);
    // The queued read, started after every later trigger, answers them with "two".
    for r in later {
        assert_eq!(r.await.unwrap().unwrap().unwrap(), Reloaded::New, "rotated");
    }
    assert_eq!(
        src.calls.load(Ordering::SeqCst),
        3,
        "load, the running read, one queued"
    );
}

#[tokio::test(start_paused = true)]
async fn the_timer_rereads_and_stops_with_the_last_handle() {
    let src = Scripted::new("one");
    // The refresher spawned here, as `load` does, to watch its own task (with `metrics`,
    // a process-wide gauges task also runs, so counting the runtime's tasks would not do).
    let (store, refresher) = src
        .loader()
        .refresh_interval(Duration::from_secs(10))
        .pair()
        .await
        .unwrap();
    let timer = tokio::spawn(refresher);
    let mut rx = store.subscribe();
    src.set(Ok("two"));
    // One period, its jitter (under a second) and tokio's round-up to a millisecond: a
    // timeout of exactly 11 s could fire in the same tick as the read.
    tokio::time::timeout(Duration::from_secs(12), rx.changed())
        .await
        .expect("the timer re-read within one period and its jitter")
        .unwrap();
    assert_eq!(store.current().header_value(), "Bearer two");

    let weak = store.0.downgrade();
    drop(store);
    assert!(weak.upgrade().is_none());
    tokio::time::timeout(Duration::from_secs(11), timer)
        .await
        .expect("the timer task ended within one period of the drop")
        .unwrap();
    let calls = src.calls.load(Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(
        src.calls.load(Ordering::SeqCst),
        calls,
        "no read after drop"
    );
}

/// `status()` names the token's subject and fingerprint, as the token does.
#[tokio::test]
async fn status_shows_the_tokens_subject_and_fingerprint() {
    use base64::Engine as _;
    let part = |json: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
    let jwt = format!(
        "{}.{}.c2ln",
        part(r#"{"alg":"RS256"}"#),
        part(r#"{"sub":"system:serviceaccount:ns:sa","iat":1800000000,"exp":1800003600}"#)
    );
    let store = Scripted::new(&jwt).loader().load().await.unwrap();
    let status = store.status();
    assert_eq!(
        status.subject.as_deref(),
        Some("system:serviceaccount:ns:sa")
    );
    let fingerprint = store.current().fingerprint().to_string();
    assert!(!fingerprint.is_empty());
    assert_eq!(status.fingerprint, fingerprint);
    // A token is no bundle: it leaves no certificate out.
    assert_eq!(status.skipped_certificates, 0);
}

#[tokio::test]
async fn status_and_debug_never_show_the_token() {
    let src = Scripted::new("very-secret-token");
    let store = src.loader().load().await.unwrap();
    src.set(Ok("very-secret-bad\x01"));
    let _ = store.reload().await;
    let out = format!("{store:?} {:?} {:#?}", store.status(), store.current());
    assert!(!out.contains("very-secret"), "{out}");
    assert!(out.contains(&store.current().fingerprint().to_string()));
}

#[tokio::test]
async fn a_failed_reload_is_logged_with_the_token_kept_by_its_fingerprint() {
    let src = Scripted::new("very-secret-token");
    let store = src.loader().load().await.unwrap();
    let (logs, _guard) = crate::test_support::capture_logs();
    src.set(Ok(""));
    assert!(store.reload().await.is_err());
    let text = logs.text();
    let kept = format!("token={}", store.current().fingerprint());
    assert!(
        text.contains("keeping the last good token") && text.contains(&kept),
        "{text}"
    );
    assert!(!text.contains("very-secret"), "{text}");
}

#[test]
fn a_store_outlives_the_runtime_it_was_built_in() {
    // Built in a runtime that is then dropped (a `block_on` at start-up, a test's own
    // runtime), then used from another: reads run on the caller's runtime.
    let src = Scripted::new("one");
    let store = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(src.loader().load())
        .unwrap();
    src.set(Ok("two"));
    let other = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reloaded = other
        .block_on(async { tokio::time::timeout(Duration::from_secs(5), store.reload()).await });
    assert_eq!(reloaded.expect("no hang").unwrap().generation(), 2);
}

#[test]
fn a_read_whose_runtime_shuts_down_ends_with_an_error_not_a_hang() {
    let src = Scripted::new("one");
    let main = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let store = main.block_on(src.loader().load()).unwrap();
    src.gate.forget_permits(usize::MAX);
    // A read starts on a runtime that is shut down while the read waits at the gate.
    let doomed = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    doomed.block_on(async {
        let handle = store.0.downgrade();
        let started = handle.reload(Trigger::Call, Recency::AfterNow, OnFailure::Report);
        // Poll once, so the read is started on this runtime, then give up.
        let _ = tokio::time::timeout(Duration::from_millis(1), started).await;
    });
    // A caller joins that read from the main runtime (it subscribes, then waits), and a
    // watcher event queues the next read.
    let waiter = main.spawn({
        let store = store.clone();
        async move { store.reload().await }
    });
    let queued = main.spawn({
        let handle = store.0.downgrade();
        async move {
            handle
                .reload(Trigger::Watch, Recency::AfterNow, OnFailure::Report)
                .await
        }
    });
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while store.0.0.flight.done.receiver_count() < 2 {
        assert!(
            std::time::Instant::now() < deadline,
            "the waiters never joined"
        );
        std::thread::yield_now();
    }
    drop(doomed);
    let result =
        main.block_on(async { tokio::time::timeout(Duration::from_secs(5), waiter).await });
    let err = result
        .expect("the waiter is answered")
        .unwrap()
        .unwrap_err();
    let chain = Chain(&err).to_string();
    assert!(chain.contains("runtime running it shut down"), "{chain}");
    // The queued read cannot run either: it ends with the same error.
    let result =
        main.block_on(async { tokio::time::timeout(Duration::from_secs(5), queued).await });
    let err = result
        .expect("the queued read's caller is answered")
        .unwrap()
        .expect("the store is alive")
        .unwrap_err();
    let chain = Chain(&err).to_string();
    assert!(chain.contains("runtime running it shut down"), "{chain}");
    // The next reload starts a new read, on a live runtime.
    src.gate.add_permits(100);
    src.set(Ok("two"));
    let next = main.block_on(store.reload()).unwrap();
    assert_eq!(next.generation(), 2);
}

#[tokio::test]
async fn a_quiet_read_joined_by_a_reporting_caller_reports_its_failure() {
    let src = Scripted::new("one");
    let store = src.loader().load().await.unwrap();
    src.gate.forget_permits(usize::MAX);
    src.set(Err("the disk is gone"));
    // The watcher's first attempt after an event: its failure would not be reported.
    let quiet = tokio::spawn({
        let handle = store.0.downgrade();
        async move {
            handle
                .reload(Trigger::Watch, Recency::AfterNow, OnFailure::Quiet)
                .await
        }
    });
    while src.calls.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    // A caller joins that read, and wants its failure reported.
    let joined = tokio::spawn({
        let store = store.clone();
        async move { store.reload().await }
    });
    crate::test_support::eventually("the caller joined", || {
        store.0.0.flight.done.receiver_count() >= 2
    })
    .await;
    src.gate.add_permits(1);
    assert!(quiet.await.unwrap().unwrap().is_err());
    assert!(joined.await.unwrap().is_err());
    assert_eq!(src.calls.load(Ordering::SeqCst), 2, "one read for both");
    let status = store.status();
    assert_eq!(status.failures, 1);
    assert!(status.last_error.is_some());
}

#[tokio::test]
async fn a_read_in_flight_ends_with_its_store() {
    let src = Scripted::new("one");
    let store = src.loader().load().await.unwrap();
    src.gate.forget_permits(usize::MAX);
    // A read that hangs, its caller gone.
    let caller = tokio::spawn({
        let store = store.clone();
        async move { store.reload().await }
    });
    while src.calls.load(Ordering::SeqCst) < 2 {
        tokio::task::yield_now().await;
    }
    caller.abort();
    let _ = caller.await;
    // The hanging fetch holds a clone of the source's state, as the source itself does.
    assert_eq!(Arc::strong_count(&src.calls), 3);
    // The last handle goes: the store aborts its read rather than leave it hanging.
    let weak = store.0.downgrade();
    drop(store);
    assert!(weak.upgrade().is_none(), "the store is gone");
    crate::test_support::eventually("the hanging fetch dropped", || {
        Arc::strong_count(&src.calls) == 1
    })
    .await;
}

#[tokio::test]
async fn debug_names_the_source_and_fingerprints_the_token() {
    let src = Scripted::new("a-secret-token");
    let store = src.loader().load().await.unwrap();
    let shown = format!("{store:?}");
    assert!(shown.starts_with("TokenStore"), "{shown}");
    assert!(shown.contains("loader scripted"), "{shown}");
    assert!(
        shown.contains(&store.current().fingerprint().to_string()),
        "{shown}"
    );
    assert!(!shown.contains("a-secret-token"), "{shown}");
}

#[tokio::test]
async fn a_read_reports_its_failure_if_any_caller_asked_for_that() {
    let src = Scripted::new("one");
    let store = src.snapshot_loader().load().await.unwrap();
    src.gate.forget_permits(usize::MAX);
    src.set(Err("the disk is gone"));
    let handle = store.0.downgrade();
    let ask = |report| {
        let handle = handle.clone();
        tokio::spawn(async move {
            handle
                .reload(Trigger::Watch, Recency::InFlight, report)
                .await
        })
    };
    // Two callers join one read, which then fails for both.
    let read_by = async |reports: [OnFailure; 2]| {
        let callers = reports.map(ask);
        crate::test_support::eventually("both joined", || {
            store.0.0.flight.done.receiver_count() >= 2
        })
        .await;
        src.gate.add_permits(1);
        for caller in callers {
            assert!(caller.await.unwrap().unwrap().is_err());
        }
    };
    // Two quiet callers: its failure stays quiet.
    read_by([OnFailure::Quiet, OnFailure::Quiet]).await;
    assert_eq!(store.status().failures, 0);
    // A reporting read joined by a quiet caller still reports.
    read_by([OnFailure::Report, OnFailure::Quiet]).await;
    assert_eq!(store.status().failures, 1);
    assert_eq!(
        src.calls.load(Ordering::SeqCst),
        3,
        "load, then one read per pair"
    );
}

#[tokio::test]
async fn a_handle_shows_its_source_while_the_store_lives() {
    let src = Scripted::new("one");
    let store = src.loader().load().await.unwrap();
    let handle = store.0.downgrade();
    assert_eq!(
        format!("{handle:?}"),
        r#"WeakStore { source: Some("loader scripted") }"#
    );
    drop(store);
    assert_eq!(format!("{handle:?}"), "WeakStore { source: None }");
}

#[tokio::test]
async fn a_possible_refusal_never_spends_the_read_a_certain_one_needs() {
    let src = Scripted::new("one");
    let store = src.loader().load().await.unwrap();
    let reads = || src.calls.load(Ordering::SeqCst);
    assert_eq!(reads(), 1);
    // A connection closed without an answer, before the rotation was written: its read
    // finds the same token.
    let possible = Certainty::Possible;
    assert!(store.0.refresh_after_refusal(1, possible).await.is_none());
    assert_eq!(reads(), 2);
    // Another within the rate limit joins that answer: no read.
    assert!(store.0.refresh_after_refusal(1, possible).await.is_none());
    assert_eq!(reads(), 2);
    // Possible refusals are no 401s.
    let status = store.status();
    assert_eq!((status.unauthorized, status.unauthorized_reloads), (0, 0));

    // The rotation lands and the server refuses the old token with a 401, within the same
    // second: the certain refusal reads on its own and finds the new token.
    src.set(Ok("two"));
    let token = store.0.refresh_after_refusal(1, Certainty::Certain).await;
    assert_eq!(token.expect("the new token").header_value(), "Bearer two");
    assert_eq!(reads(), 3);
    let status = store.status();
    assert_eq!((status.unauthorized, status.unauthorized_reloads), (1, 1));

    // Each kind is rate-limited on its own (one read a second by default): the new token
    // refused at once, each kind reads once.
    src.set(Ok("three"));
    store.0.reload_after_refusal(2, possible);
    crate::test_support::eventually("the possible refusal's read", || store.generation() == 3)
        .await;
    assert_eq!(reads(), 4);
    assert!(store.0.refresh_after_refusal(3, possible).await.is_none());
    assert_eq!(reads(), 5);
    assert!(store.0.refresh_after_refusal(3, possible).await.is_none());
    assert!(
        store
            .0
            .refresh_after_refusal(3, Certainty::Certain)
            .await
            .is_none()
    );
    assert_eq!(reads(), 6);
    assert!(
        store
            .0
            .refresh_after_refusal(3, Certainty::Certain)
            .await
            .is_none()
    );
    assert_eq!(reads(), 6);
}

/// A failed fetch's error is the source's own, reachable by its type; an invalid read's is not.
#[tokio::test]
async fn a_fetch_error_is_the_sources_own_by_its_type() {
    let failing = crate::test_support::loader("failing", || async {
        Err::<Vec<u8>, _>(std::io::Error::new(std::io::ErrorKind::NotFound, "gone"))
    });
    let err = failing.load().await.unwrap_err();
    let own = err
        .downcast_ref::<std::io::Error>()
        .expect("the source's error");
    assert_eq!(own.kind(), std::io::ErrorKind::NotFound);
    assert!(err.downcast_ref::<std::fmt::Error>().is_none());
    let invalid = Scripted::new("bad\x01").loader().load().await.unwrap_err();
    assert!(
        invalid.downcast_ref::<std::io::Error>().is_none(),
        "{invalid:?}"
    );
}
