//! Helpers shared by the in-crate tests (the integration tests have `tests/support`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::sync::lock;

// One copy of the script writer for the crate's tests and the integration tests.
#[path = "../tests/support/script.rs"]
mod script;
pub(crate) use script::write_script;

// The plain writers, likewise.
#[path = "../tests/support/writers.rs"]
#[allow(dead_code, unreachable_pub)]
pub(crate) mod writers;

// Certificates made with rcgen.
#[cfg(feature = "tls")]
#[path = "../tests/support/pki.rs"]
pub(crate) mod pki;

// The key types of a pod certificate.
#[cfg(feature = "tls")]
#[path = "../tests/support/key_types.rs"]
pub(crate) mod key_types;

/// How long a test waits for an event before it fails.
pub(crate) const DEADLINE: Duration = Duration::from_secs(5);

/// Formatted log lines of this thread, at every level, while the guard lives.
#[derive(Clone, Default)]
pub(crate) struct Logs(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        lock(&self.0).extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Logs {
    /// How many times `needle` appears in the logs.
    pub(crate) fn count(&self, needle: &str) -> usize {
        self.text().matches(needle).count()
    }

    /// Everything logged so far.
    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&lock(&self.0)).into_owned()
    }
}

/// Captures this thread's logs (a current-thread runtime's tasks included) at every level.
pub(crate) fn capture_logs() -> (Logs, tracing::subscriber::DefaultGuard) {
    let logs = Logs::default();
    let writer = logs.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(move || writer.clone())
        .with_ansi(false)
        .with_max_level(tracing::Level::TRACE)
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

/// Waits until `cond` holds, checking every few milliseconds, failing after [`DEADLINE`].
pub(crate) async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Waits until `store` holds `token`, woken by its rotations, failing after [`DEADLINE`].
pub(crate) async fn wait_for_token(store: &crate::TokenStore, token: &str) {
    let mut rx = store.subscribe();
    let want = format!("Bearer {token}");
    tokio::time::timeout(DEADLINE, async {
        while store.current().header_value() != want.as_str() {
            rx.changed().await.unwrap();
        }
    })
    .await
    .unwrap_or_else(|_| panic!("timed out waiting for {token}"));
}

/// A store holding "old", timer off, whose source now says "new": the next read rotates.
pub(crate) async fn rotated_store() -> crate::TokenStore {
    let file = Arc::new(Mutex::new("old"));
    let store = crate::test_support::loader("test", {
        let file = file.clone();
        move || {
            let token = lock(&file).as_bytes().to_vec();
            async move { Ok::<_, std::io::Error>(token) }
        }
    })
    .no_periodic_refresh()
    .load()
    .await
    .unwrap();
    *lock(&file) = "new";
    store
}

/// A builder of a store on the file at `path`.
pub(crate) fn file(path: impl Into<std::path::PathBuf>) -> crate::StoreBuilder {
    crate::TokenStore::builder(crate::source::FileSource::new(path))
}

/// A source named `name` that answers every fetch with `pem` (a certificate and its key,
/// a CA bundle).
#[cfg(feature = "tls")]
pub(crate) fn pem(name: &str, pem: String) -> crate::source::FnSource {
    crate::source::FnSource::new(name, move || {
        let pem = pem.clone();
        async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
    })
}

/// A builder of a store on a closure named `name`.
pub(crate) fn loader<F, Fut, E>(name: impl Into<String>, load: F) -> crate::StoreBuilder
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Vec<u8>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    crate::TokenStore::builder(crate::source::FnSource::new(name, load))
}
