//! Reload latency under kubelet-style rotations: from the `rename` of `..data` to the first
//! moment `store.current()` carries the new token.
//!
//! ```text
//! cargo run --release --example reload_latency
//! ```
//!
//! The last line reads `reload_latency_ms p50=<x> p99=<y> max=<z> rotations=200 missed=<n>`
//! (missed: rotations not seen within 2 s). The timer is off, so every reload comes from
//! the directory watcher. For comparison, kube-rs re-reads its token file about 50 s after
//! the last read, and client-go at most once a minute.

use std::time::{Duration, Instant};

use bearer_reload::TokenFile;
use bearer_reload::testing::ProjectedTokenDir;

const ROTATIONS: usize = 200;
const MISSED_AFTER: Duration = Duration::from_secs(2);

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let tmp = tempfile::tempdir()?;
    let volume = ProjectedTokenDir::create(tmp.path().join("serviceaccount"), "token-0")?;
    let store = TokenFile::new(volume.token_path())
        .refresh_interval(None)
        .load()
        .await?;
    println!("watch: {:?}", store.status().watch);

    let mut rx = store.subscribe();
    let mut latencies = Vec::with_capacity(ROTATIONS);
    let mut missed = 0;
    for i in 1..=ROTATIONS {
        let want = format!("Bearer token-{i}");
        let renamed_at = volume.rotate(format!("token-{i}"))?;
        let seen = tokio::time::timeout(MISSED_AFTER, async {
            loop {
                if store.current().header_value() == want.as_str() {
                    return Instant::now();
                }
                rx.changed().await.expect("the store is alive");
            }
        })
        .await;
        match seen {
            Ok(at) => latencies.push(at.duration_since(renamed_at)),
            Err(_) => missed += 1,
        }
        // Rotations are minutes apart in real life: let this one's trailing events settle.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }

    latencies.sort();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let pct = |p: f64| {
        latencies
            .get(((latencies.len() as f64 * p).ceil() as usize).saturating_sub(1))
            .map_or(f64::NAN, |d| ms(*d))
    };
    let status = store.status();
    println!(
        "reads={} rotations_installed={} failures={}",
        status.reads, status.rotations, status.failures
    );
    println!(
        "reload_latency_ms p50={:.3} p99={:.3} max={:.3} rotations={ROTATIONS} missed={missed}",
        pct(0.50),
        pct(0.99),
        latencies.last().map_or(f64::NAN, |d| ms(*d)),
    );
    Ok(())
}
