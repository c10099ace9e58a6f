use super::*;
use std::sync::{Arc, Mutex};

/// Keeps what each fetch was told: whether a server refused the token, and the time.
#[derive(Clone, Default)]
struct Recording(Arc<Mutex<Vec<(bool, SystemTime)>>>);

impl TokenSource for Recording {
    type Error = std::io::Error;

    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, std::io::Error> {
        let mut seen = self.0.lock().unwrap();
        seen.push((cx.refused(), cx.now()));
        Ok(Fetched::new(format!("token-{}", seen.len())))
    }

    fn describe(&self) -> String {
        "recording".into()
    }
}

#[tokio::test(start_paused = true)]
async fn a_fetch_is_told_the_stores_time_and_whether_a_server_refused_the_token() {
    let origin = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
    let source = Recording::default();
    let store = crate::TokenStore::builder(source.clone())
        .clock(Clock::tokio_from(origin))
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(10)).await;
    store.reload().await.unwrap();
    store
        .0
        .refresh_after_refusal(store.generation(), crate::store::Certainty::Certain)
        .await;
    let later = origin + Duration::from_secs(10);
    assert_eq!(
        *source.0.lock().unwrap(),
        [(false, origin), (false, later), (true, later)]
    );
}

#[test]
fn debug_shows_the_length_and_dates_not_the_bytes() {
    let fetched = Fetched::new(b"a-secret-token".to_vec())
        .with_expires_at(SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(86_400));
    let shown = format!("{fetched:?}");
    assert!(shown.starts_with("Fetched"), "{shown}");
    assert!(shown.contains("len: 14"), "{shown}");
    assert!(shown.contains("1970-01-02T00:00:00Z"), "{shown}");
    assert!(!shown.contains("a-secret-token"), "{shown}");
}
