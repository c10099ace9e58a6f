//! What every target shares: the answer it parsed, put in a store whose clock and timer
//! it fuzzes too, so that the dates the crate works out of an answer (its expiry, its
//! refresh point, the timer's next read and the backoff) are fuzzed with the parser.
#![allow(dead_code)]

use std::future::Future;
use std::sync::OnceLock;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bearer_reload::source::{FetchContext, Fetched, TokenSource};
use bearer_reload::{StoreBuilder, TokenStore};

/// One runtime for every run: current-thread, its clock paused so that a day of the
/// store's timer passes at once.
pub fn runtime() -> &'static tokio::runtime::Runtime {
    static RUNTIME: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RUNTIME.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a runtime")
    })
}

/// A "now" from the fuzzer's byte: from about 400 years before 2027 to 400 after.
pub fn now_from(byte: u8) -> SystemTime {
    let base = UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let step = Duration::from_secs(97_000_000);
    match byte.checked_sub(128) {
        Some(ahead) => base + step * u32::from(ahead),
        None => base - step * u32::from(128 - byte),
    }
}

/// How long the store's timer runs, from the fuzzer's byte: up to about 3 days.
pub fn span_from(byte: u8) -> Duration {
    Duration::from_secs(u64::from(byte) * 1000)
}

/// A source that answers each fetch with what `answer` makes of the fetch's time.
pub struct Answer<F>(pub F);

impl<F, E> TokenSource for Answer<F>
where
    F: Fn(SystemTime) -> Result<Fetched, E> + Send + Sync + 'static,
    E: std::fmt::Display,
{
    type Error = std::io::Error;

    fn fetch(&self, cx: FetchContext) -> impl Future<Output = Result<Fetched, Self::Error>> + Send {
        let answer = (self.0)(cx.now()).map_err(|e| std::io::Error::other(e.to_string()));
        async move { answer }
    }

    fn describe(&self) -> String {
        "fuzz".into()
    }
}

/// Loads the store `builder` makes with its clock at `now`, and runs its timer for
/// `span` of paused time (each read it makes answered the same way), reading its dates
/// through `look` at load and after.
pub fn run<S>(builder: StoreBuilder<S>, now: SystemTime, span: Duration, look: impl Fn(&S)) {
    runtime().block_on(async {
        let start = tokio::time::Instant::now();
        let Ok(store) = builder
            .no_watch()
            .no_periodic_refresh()
            .simulated_clock(now, start)
            .load()
            .await
        else {
            return;
        };
        look(&store);
        // The timer's turn, whatever the span: it works out its first moment now (a
        // zero span alone would drop the store before the timer ever ran).
        tokio::task::yield_now().await;
        tokio::time::sleep(span).await;
        look(&store);
    });
}

/// [`run`] for a token store over `answer`.
pub fn run_tokens<F, E>(answer: F, now: SystemTime, span: Duration)
where
    F: Fn(SystemTime) -> Result<Fetched, E> + Send + Sync + 'static,
    E: std::fmt::Display,
{
    run(TokenStore::builder(Answer(answer)), now, span, |store| {
        let token = store.current();
        let _ = (token.expires_at(), token.refresh_at());
        let _ = format!("{token:?} {:?}", store.status());
    });
}
