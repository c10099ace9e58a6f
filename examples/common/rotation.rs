//! What the rotation examples (`cert_rotation`, `kubeconfig_rotation`) take and print:
//! their options, each client's requests and failures, and the quantiles of the time from
//! each rotation to the first request with the new credential.

use std::sync::atomic::AtomicU64;

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
