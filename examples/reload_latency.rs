//! Reload latency under kubelet-style rotations: from the `rename` of `..data` to the
//! moment the store holds the new token, next to the floor any watcher has.
//!
//! ```text
//! cargo run --release --example reload_latency
//! ```
//!
//! The last line reads
//! `reload_latency_ms p50=<x> p99=<y> max=<z> rotations=200 missed=<n> floor_p50=<a> floor_p99=<b> floor_missed=<m> ratio_p99=<y/b>`
//! (missed: rotations not seen within 2 s). The timer is off, so every reload comes from
//! the store's directory watcher.
//!
//! The store's moment is its new token's [`loaded_at`](bearer_reload::Token::loaded_at),
//! taken as the read is validated, microseconds before it is installed: from then on every
//! request carries it. (A task that waits for the news through `subscribe` learns it one
//! wake-up later, a quarter of a millisecond here; that wake-up is the waiting task's, not
//! the store's, and would hide the store's own time.)
//!
//! The floor: a bare `notify` watcher of its own (one watcher, one non-recursive watch on
//! the same directory) that reads the token file once on each event until it holds the
//! new token, timed on its thread as the read returns. It runs in the same process for
//! every rotation, timed from the same rename as the store, so both see the same moment of
//! the machine: on a machine busy with other work both rise together, and `ratio_p99` (the
//! store's p99 over the floor's) says what the store adds to what the kernel and the
//! scheduler already cost.
//!
//! For comparison, kube-rs re-reads its token file about 50 s after the last read, and
//! client-go at most once a minute.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bearer_reload::TokenStore;
use bearer_reload::source::FileSource;
use bearer_reload::testing::ProjectedTokenDir;
use notify::{RecommendedWatcher, RecursiveMode, Watcher};
use tokio::sync::mpsc;

const ROTATIONS: usize = 200;
const MISSED_AFTER: Duration = Duration::from_secs(2);

/// The floor: a bare notify watch on the volume's directory plus one read per event.
struct Floor {
    /// The rotation whose token the floor waits for (0: none).
    want: Arc<AtomicUsize>,
    /// Each rotation's number and the moment a read returned its token.
    seen: mpsc::UnboundedReceiver<(usize, Instant)>,
    _watcher: RecommendedWatcher,
}

impl Floor {
    fn watch(volume: &ProjectedTokenDir) -> notify::Result<Self> {
        let want = Arc::new(AtomicUsize::new(0));
        let (tx, seen) = mpsc::unbounded_channel();
        let path: PathBuf = volume.token_path();
        let handler = {
            let want = want.clone();
            move |event: notify::Result<notify::Event>| {
                let i = want.load(Ordering::Acquire);
                if event.is_err() || i == 0 {
                    return;
                }
                let Ok(bytes) = std::fs::read(&path) else {
                    return;
                };
                if bytes.trim_ascii() == format!("token-{i}").as_bytes()
                    && want
                        .compare_exchange(i, 0, Ordering::AcqRel, Ordering::Acquire)
                        .is_ok()
                {
                    let _ = tx.send((i, Instant::now()));
                }
            }
        };
        let mut watcher = notify::recommended_watcher(handler)?;
        watcher.watch(volume.dir(), RecursiveMode::NonRecursive)?;
        Ok(Floor {
            want,
            seen,
            _watcher: watcher,
        })
    }

    /// The moment the floor read rotation `i`'s token.
    async fn seen(&mut self, i: usize) -> Instant {
        loop {
            match self.seen.recv().await {
                Some((n, at)) if n == i => return at,
                Some(_) => {}
                None => std::future::pending().await,
            }
        }
    }
}

/// Latencies in ms, sorted, with the count of rotations not seen in time.
#[derive(Default)]
struct Latencies {
    ms: Vec<f64>,
    missed: usize,
}

impl Latencies {
    fn record(&mut self, seen: Result<Instant, tokio::time::error::Elapsed>, from: Instant) {
        match seen {
            Ok(at) => self.ms.push(at.duration_since(from).as_secs_f64() * 1000.0),
            Err(_) => self.missed += 1,
        }
    }

    fn pct(&mut self, p: f64) -> f64 {
        self.ms.sort_by(f64::total_cmp);
        let i = ((self.ms.len() as f64 * p).ceil() as usize).saturating_sub(1);
        self.ms.get(i).copied().unwrap_or(f64::NAN)
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let volume = ProjectedTokenDir::create(tmp.path().join("serviceaccount"), "token-0")?;
    let store = TokenStore::builder(FileSource::new(volume.token_path()))
        .no_periodic_refresh()
        .load()
        .await?;
    println!("watch: {:?}", store.status().watch);
    let mut floor = Floor::watch(&volume)?;

    let mut rx = store.subscribe();
    let (mut ours, mut base) = (Latencies::default(), Latencies::default());
    for i in 1..=ROTATIONS {
        let want = format!("Bearer token-{i}");
        floor.want.store(i, Ordering::Release);
        // The two clocks read together, to place the token's wall-clock `loaded_at` on
        // the monotonic clock of the rename.
        let (wall, mono) = (SystemTime::now(), Instant::now());
        let renamed_at = volume.rotate(format!("token-{i}"))?;
        let store_seen = tokio::time::timeout(MISSED_AFTER, async {
            loop {
                let token = store.current();
                if token.header_value() == want.as_str() {
                    let after = token.loaded_at().duration_since(wall).unwrap_or_default();
                    return mono + after;
                }
                rx.changed().await.expect("the store is alive");
            }
        });
        let floor_seen = tokio::time::timeout(MISSED_AFTER, floor.seen(i));
        let (store_seen, floor_seen) = tokio::join!(store_seen, floor_seen);
        ours.record(store_seen, renamed_at);
        base.record(floor_seen, renamed_at);
        // Rotations are minutes apart in real life: let this one's trailing events settle.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    let status = store.status();
    println!(
        "reads={} rotations_installed={} failures={}",
        status.reads, status.rotations, status.failures
    );
    let (p99, floor_p99) = (ours.pct(0.99), base.pct(0.99));
    println!(
        "reload_latency_ms p50={:.3} p99={p99:.3} max={:.3} rotations={ROTATIONS} missed={} \
         floor_p50={:.3} floor_p99={floor_p99:.3} floor_missed={} ratio_p99={:.2}",
        ours.pct(0.50),
        ours.pct(1.0),
        ours.missed,
        base.pct(0.50),
        base.missed,
        p99 / floor_p99,
    );
    Ok(())
}
