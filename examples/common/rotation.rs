//! What the rotation examples (`cert_rotation`, `kubeconfig_rotation`, `pod_certificate`)
//! share: their options, the callers that keep each client busy, each client's requests and
//! failures, and the quantiles of the time from each rotation to the first request with the
//! new credential.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::task::JoinHandle;

use crate::mtls::Arrival;

/// The options of a rotation example.
#[derive(clap::Parser)]
pub(crate) struct Args {
    /// Rotations of the credentials.
    #[arg(long, default_value_t = 5)]
    pub(crate) rotations: usize,
    /// Concurrent requests per client.
    #[arg(long, default_value_t = 4)]
    pub(crate) workers: usize,
    /// Time between rotations, in milliseconds.
    #[arg(long, default_value_t = 300)]
    pub(crate) every_ms: u64,
}

/// One client's requests and failures.
#[derive(Default)]
pub(crate) struct Counts {
    pub(crate) requests: AtomicU64,
    pub(crate) failed: AtomicU64,
}

/// The `q` quantile of `latencies` (nearest rank), a rotation never picked up counting as
/// the slowest: `never` when the rank falls on one.
pub(crate) fn percentile(latencies: &[Option<f64>], q: f64) -> String {
    let mut sorted: Vec<f64> = latencies
        .iter()
        .map(|l| l.unwrap_or(f64::INFINITY))
        .collect();
    sorted.sort_by(f64::total_cmp);
    let rank = ((q * sorted.len() as f64).ceil() as usize).clamp(1, sorted.len().max(1));
    match sorted.get(rank - 1) {
        Some(ms) if ms.is_finite() => format!("{ms:.2}"),
        _ => "never".to_owned(),
    }
}

/// A client of a rotation example.
pub(crate) trait Call: Clone + Send + 'static {
    /// One request: whether it succeeded.
    fn call(&mut self) -> impl Future<Output = bool> + Send;
}

/// `workers` callers of each of `clients`, calling until `stop` and counting into `counts`.
/// A failed call is followed by a pause of 5 ms, as a controller's requeue would: a client
/// that fails fast would spin.
pub(crate) fn spawn_callers<C: Call, const N: usize>(
    clients: &[C; N],
    workers: usize,
    stop: &Arc<AtomicBool>,
    counts: &Arc<[Counts; N]>,
) -> Vec<JoinHandle<()>> {
    let mut callers = Vec::new();
    for (k, client) in clients.iter().enumerate() {
        for _ in 0..workers {
            let (mut client, stop, counts) = (client.clone(), stop.clone(), counts.clone());
            callers.push(tokio::spawn(async move {
                while !stop.load(Ordering::Relaxed) {
                    let ok = client.call().await;
                    counts[k].requests.fetch_add(1, Ordering::Relaxed);
                    if !ok {
                        counts[k].failed.fetch_add(1, Ordering::Relaxed);
                        tokio::time::sleep(Duration::from_millis(5)).await;
                    }
                }
            }));
        }
    }
    callers
}

/// Milliseconds from each rotation (`rotated_at[r]`) to the first of client `name`'s
/// requests that arrived with rotation `r`'s credential (`new(r, arrival)`); `None` where
/// none did.
pub(crate) fn first_arrivals(
    arrivals: &[Arrival],
    name: &str,
    rotated_at: &[Instant],
    new: impl Fn(usize, &Arrival) -> bool,
) -> Vec<Option<f64>> {
    rotated_at
        .iter()
        .enumerate()
        .map(|(r, at)| {
            arrivals
                .iter()
                .filter(|a| a.client.as_deref() == Some(name) && new(r, a))
                .map(|a| a.at.saturating_duration_since(*at).as_secs_f64() * 1e3)
                .reduce(f64::min)
        })
        .collect()
}
