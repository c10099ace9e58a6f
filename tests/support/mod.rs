//! Helpers shared by the integration tests. Each test binary uses a part of them.
#![allow(dead_code, unreachable_pub)]

pub mod alone;
pub mod exec_plugin;
pub mod key_types;
pub mod kube_api;
pub mod mtls;
pub mod oauth2_server;
pub mod pki;
pub mod procfs;
pub mod prometheus;
pub mod proxy;
pub mod script;
pub mod serve;
pub mod server;
pub mod sim;
pub mod stalled;
pub mod tls;
pub mod token_request;
pub mod writers;
// `grpc.rs` and `clients.rs` are included only by the conformance suite (with `#[path]`),
// so that the binaries without it do not compile its tonic and reqwest clients.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use bearer_reload::source::{FileSource, FnSource};
use bearer_reload::{StoreBuilder, TokenStore};
use tracing_subscriber::fmt::MakeWriter;

/// How long a test waits for an event before it fails.
pub const DEADLINE: Duration = Duration::from_secs(10);

/// A builder of a store on the file at `path`.
pub fn file(path: impl Into<PathBuf>) -> StoreBuilder {
    TokenStore::builder(FileSource::new(path))
}

/// A store of the file at `path` loaded on a runtime of its own (a start-up step's), which
/// has ended by the time this returns: nothing refreshes the store until its next use.
pub fn load_on_a_runtime_that_ends(path: impl Into<PathBuf>) -> TokenStore {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(file(path).load()).unwrap();
    assert_eq!(store.status().watch, bearer_reload::WatchState::Active);
    drop(runtime);
    store
}

/// A builder of a store on a closure named `name`.
pub fn loader<F, Fut, E>(name: impl Into<String>, load: F) -> StoreBuilder
where
    F: Fn() -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<Vec<u8>, E>> + Send + 'static,
    E: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    TokenStore::builder(FnSource::new(name, load))
}

/// Writes `token` (with the newline `echo` leaves) to `dir/token` and loads it with the
/// watcher and the timer off: only the test, or a 401, reloads it.
pub async fn quiet_store(dir: &Path, token: &str) -> (PathBuf, TokenStore) {
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    let store = file(&path)
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    (path, store)
}

/// A quiet store that still holds `old` while its file holds `new`, and a server that
/// accepts `new` alone: the next request is refused, and its 401's re-read finds `new`.
pub async fn behind_a_rotation(dir: &Path) -> (TokenStore, server::AuthServer) {
    let (path, store) = quiet_store(dir, "old").await;
    let server = server::AuthServer::start("new").await;
    std::fs::write(&path, "new").unwrap();
    (store, server)
}

/// Waits until `store` holds `token`, woken by its rotations, checking that generations
/// only go up; fails after [`DEADLINE`] with the store's status.
pub async fn wait_for_token(store: &TokenStore, token: &str) {
    let want = format!("Bearer {token}");
    let mut rx = store.subscribe();
    let mut last = store.generation();
    let waited = tokio::time::timeout(DEADLINE, async {
        loop {
            let generation = *rx.borrow_and_update();
            assert!(generation >= last, "generations go up");
            last = generation;
            if store.current().header_value() == want.as_str() {
                return;
            }
            rx.changed().await.unwrap();
        }
    })
    .await;
    assert!(
        waited.is_ok(),
        "the store never installed the token; status {:?}",
        store.status()
    );
}

/// A store's reload that reads what the caller last wrote: a reload may share a read in
/// flight that started before the write (`TokenStore::reload`'s doc), so this reloads once
/// more after that one, whose read cannot have started earlier.
pub async fn reload_after_write<T, E, F>(mut reload: impl FnMut() -> F) -> Result<T, E>
where
    F: std::future::Future<Output = Result<T, E>>,
{
    let _shared = reload().await;
    reload().await
}

/// Polls `cond` every few milliseconds until it holds; fails after [`DEADLINE`].
pub async fn eventually(what: &str, mut cond: impl FnMut() -> bool) {
    let start = Instant::now();
    while !cond() {
        assert!(start.elapsed() < DEADLINE, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// Everything logged, from every thread, as text.
#[derive(Clone, Default)]
pub struct Logs(Arc<Mutex<Vec<u8>>>);

impl Write for Logs {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for Logs {
    type Writer = Logs;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

impl Logs {
    /// The process-wide subscriber's logs: every event, at every level, of every thread.
    /// Installed by the first call; later calls in the process share it. The tests that
    /// call it run in a process of their own ([`alone`]), so that no other test's events
    /// are written, at every level, meanwhile.
    pub fn capture_globally() -> Self {
        static GLOBAL: OnceLock<Logs> = OnceLock::new();
        GLOBAL
            .get_or_init(|| {
                let logs = Logs::default();
                tracing_subscriber::fmt()
                    .with_writer(logs.clone())
                    .with_ansi(false)
                    .with_max_level(tracing::Level::TRACE)
                    .init();
                logs
            })
            .clone()
    }

    /// Everything logged so far.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap()).into_owned()
    }
}

/// `n` random bytes from the kernel.
pub fn random_bytes(n: usize) -> Vec<u8> {
    use std::io::Read;
    let mut buf = vec![0u8; n];
    std::fs::File::open("/dev/urandom")
        .unwrap()
        .read_exact(&mut buf)
        .unwrap();
    buf
}

/// `n` random bytes as `2n` hex digits.
pub fn random_hex(n: usize) -> String {
    random_bytes(n).iter().map(|b| format!("{b:02x}")).collect()
}

/// What `kube` makes of a kubeconfig file (with a process-wide rustls provider for kube's
/// TLS: [`tls::install_ring`]).
pub async fn kube_config(path: &Path) -> kube::Config {
    tls::install_ring();
    let kubeconfig = kube::config::Kubeconfig::read_from(path).unwrap();
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .unwrap()
}

/// A client as an application builds one: the credentials `config` calls for, and a
/// client on them.
#[cfg(feature = "kube")]
pub async fn kube_client(config: kube::Config) -> Result<kube::Client, bearer_reload::kube::Error> {
    bearer_reload::kube::Credentials::load(&config)
        .await?
        .client(config)
}

/// An error and its causes on one line, `a: b: c`, as `anyhow`'s `{:#}` prints them.
pub fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        line.push_str(": ");
        line.push_str(&e.to_string());
        cause = e.source();
    }
    line
}

/// Writes `issued` as `tls.crt` and `tls.key` in `volume`, as the kubelet rotates a
/// projected certificate.
pub fn rotate_identity(volume: &bearer_reload::testing::ProjectedTokenDir, issued: &pki::Issued) {
    volume
        .rotate_files(&[
            ("tls.crt", issued.cert_pem.as_bytes()),
            ("tls.key", issued.key_pem.as_bytes()),
        ])
        .unwrap();
}

/// While callers send requests to `server` with the client certificate in `volume`
/// (`current` at first): rotates it 3 times, the server refusing the old one at once, each
/// a second after the last and once 20 requests arrived with the one before; returns once
/// 20 arrived with the last. (Real rotations are hours apart: a request refused at one
/// rotation is sent again before the next.)
pub async fn rotate_under_load(
    server: &mtls::MtlsServer,
    ca: &pki::Ca,
    volume: &bearer_reload::testing::ProjectedTokenDir,
    mut current: pki::Issued,
) {
    // Until 20 requests arrived with `fingerprint`, woken by each arrival.
    let in_use = async |fingerprint: String| {
        loop {
            let arrivals = server.arrivals();
            let with = arrivals
                .iter()
                .filter(|a| a.fingerprint == fingerprint && !a.refused);
            if with.count() >= 20 {
                return;
            }
            server
                .wait_requests(arrivals.len() as u64 + 1, DEADLINE)
                .await;
        }
    };
    for _ in 0..3 {
        let next_rotation = tokio::time::Instant::now() + Duration::from_secs(1);
        in_use(current.fingerprint()).await;
        tokio::time::sleep_until(next_rotation).await;
        let next = ca.client("jane", Duration::from_secs(3600));
        rotate_identity(volume, &next);
        server.refuse(&current.fingerprint());
        current = next;
    }
    in_use(current.fingerprint()).await;
}

/// Callers that send requests, each after the last, until stopped.
pub struct Load {
    stop: Arc<std::sync::atomic::AtomicBool>,
    callers: Vec<tokio::task::JoinHandle<(usize, Vec<String>)>>,
}

impl Load {
    /// `n` callers of `send`, which says why a request failed.
    pub fn start<F, Fut>(n: usize, send: F) -> Self
    where
        F: Fn() -> Fut + Clone + Send + 'static,
        Fut: std::future::Future<Output = Result<(), String>> + Send,
    {
        let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let callers = (0..n)
            .map(|_| {
                let (send, stop) = (send.clone(), stop.clone());
                tokio::spawn(async move {
                    let (mut sent, mut failed) = (0, Vec::new());
                    // One request at least, however soon it is stopped.
                    loop {
                        sent += 1;
                        failed.extend(send().await.err());
                        if stop.load(std::sync::atomic::Ordering::Relaxed) {
                            break;
                        }
                    }
                    (sent, failed)
                })
            })
            .collect();
        Self { stop, callers }
    }

    /// Stops the callers: the requests sent, and why each that failed did.
    pub async fn stop(self) -> (usize, Vec<String>) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let (mut sent, mut failed) = (0, Vec::new());
        for caller in self.callers {
            let (n, f) = caller.await.unwrap();
            sent += n;
            failed.extend(f);
        }
        (sent, failed)
    }
}
