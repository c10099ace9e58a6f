//! Metrics an operator can alert on (feature `metrics`), through the [`metrics`] facade:
//! install any exporter and every store reports. Every series has the label `source`, the
//! store's [name](crate::StoreBuilder::name).
//!
//! | name | type | labels | what |
//! |---|---|---|---|
//! | `bearer_reload_reloads_total` | counter | `trigger` (`load`, `call`, `timer`, `watch`, `unauthorized`), `result` (`rotated`, `unchanged`, `failed`) | reads of the source |
//! | `bearer_reload_unauthorized_total` | counter | | unauthorized responses to requests that carried the store's token |
//! | `bearer_reload_retries_total` | counter | `result` (`succeeded`, `refused`) | requests sent again with a newer token |
//! | `bearer_reload_requests_kept_authorization_total` | counter | | requests that kept their own `Authorization` |
//! | `bearer_reload_token_expiry_timestamp_seconds` | gauge | | when the token in use expires (when it says), Unix time |
//! | `bearer_reload_token_issued_timestamp_seconds` | gauge | | when the token in use was issued (its `iat`, else when it was installed), Unix time |
//! | `bearer_reload_client_certificate_expiry_timestamp_seconds` | gauge | | a client-certificate store's (feature `tls`): when the certificate in use expires (its `notAfter`, or the source's earlier expiry), Unix time |
//! | `bearer_reload_client_certificate_issued_timestamp_seconds` | gauge | | when the certificate in use became valid (its `notBefore`), Unix time |
//! | `bearer_reload_ca_bundle_issued_timestamp_seconds` | gauge | | a CA-bundle store's: when the bundle in use was installed, Unix time (a bundle has no expiry of its own, so `bearer_reload_ca_bundle_expiry_timestamp_seconds` is never set) |
//! | `bearer_reload_source_changed_timestamp_seconds` | gauge | | when a read of the source last found a new token, Unix time |
//! | `bearer_reload_watch_state` | gauge | `state` (`active`, `degraded`, `off`, `stopped`) | 1 for the store's watch state, 0 for the others |
//! | `bearer_reload_generation` | gauge | | the token's generation (1, then one more per rotation) |
//! | `bearer_reload_rotation_stalled` | gauge | | 1 while the token in use is past its rotation point and the source holds nothing newer |
//!
//! Dates are Unix timestamps, as the Prometheus instrumentation guidelines advise, not
//! "seconds until": the query computes the countdown (`... - time()`), and nothing runs in
//! the background to keep one current.
//!
//! # Alert rules (Prometheus)
//!
//! ```yaml
//! - alert: BearerTokenExpiresSoon
//!   expr: bearer_reload_token_expiry_timestamp_seconds - time() < 600
//!   for: 1m
//!   annotations:
//!     summary: "{{ $labels.source }}: the token in use expires within 10 minutes"
//! - alert: ClientCertificateExpiresSoon
//!   expr: bearer_reload_client_certificate_expiry_timestamp_seconds - time() < 3600
//!   for: 1m
//!   annotations:
//!     summary: "{{ $labels.source }}: the client certificate in use expires within an hour"
//! - alert: BearerTokenRotatorStalled
//!   expr: bearer_reload_rotation_stalled == 1
//!   for: 5m
//!   annotations:
//!     summary: "{{ $labels.source }}: the token is past its rotation point and nothing
//!       has replaced it (a stopped kubelet or writer, a subPath mount, a failing plugin)"
//! - alert: BearerTokenNotRefreshed
//!   expr: bearer_reload_watch_state{state="stopped"} == 1
//!   for: 5m
//!   annotations:
//!     summary: "{{ $labels.source }}: nothing refreshes the token in the background"
//! ```
//!
//! [`metrics`]: https://docs.rs/metrics/0.24/metrics/

// Without the feature the module is private and its calls do nothing.
#![cfg_attr(not(feature = "metrics"), allow(dead_code, unused_variables))]

use std::sync::Arc;
use std::time::SystemTime;

#[cfg(feature = "metrics")]
use ::metrics::{Unit, counter, describe_counter, describe_gauge, gauge};

const RELOADS: &str = "bearer_reload_reloads_total";
const UNAUTHORIZED: &str = "bearer_reload_unauthorized_total";
const RETRIES: &str = "bearer_reload_retries_total";
const KEPT_AUTHORIZATION: &str = "bearer_reload_requests_kept_authorization_total";
const SOURCE_CHANGED: &str = "bearer_reload_source_changed_timestamp_seconds";
const WATCH_STATE: &str = "bearer_reload_watch_state";
const GENERATION: &str = "bearer_reload_generation";
const STALLED: &str = "bearer_reload_rotation_stalled";

/// Each credential with gauges of its dates: its name in them, and in their descriptions.
const DATED: [(&str, &str); 4] = [
    ("token", "token"),
    ("client_certificate", "client certificate"),
    ("ca_bundle", "CA bundle"),
    ("kubeconfig", "kubeconfig"),
];

#[cfg(feature = "metrics")]
fn dates(kind: &str) -> [String; 2] {
    ["expiry", "issued"].map(|date| format!("bearer_reload_{kind}_{date}_timestamp_seconds"))
}

/// The watch states, as the `state` label spells them.
pub(crate) const WATCH_STATES: [&str; 4] = ["active", "degraded", "off", "stopped"];

/// Describes every series: for each store, as recorders may be installed late.
pub(crate) fn describe() {
    #[cfg(feature = "metrics")]
    {
        let counters = [
            "Reads of the token source, by trigger and result.",
            "Unauthorized responses to requests that carried the store's token.",
            "Requests sent again with a newer token, by result.",
            "Requests that kept their own Authorization header.",
        ];
        for (name, description) in [RELOADS, UNAUTHORIZED, RETRIES, KEPT_AUTHORIZATION]
            .into_iter()
            .zip(counters)
        {
            describe_counter!(name, description);
        }
        let gauges = [
            "1 for the store's watch state, 0 for the others.",
            "The generation of the token in use.",
            "1 while the token in use is past its rotation point and its source holds nothing newer.",
        ];
        for (name, description) in [WATCH_STATE, GENERATION, STALLED].into_iter().zip(gauges) {
            describe_gauge!(name, description);
        }
        let date = |name: String, what: String| {
            describe_gauge!(name, Unit::Seconds, format!("{what}, as a Unix timestamp."));
        };
        let changed = "When a read of the source last found a new token";
        date(SOURCE_CHANGED.into(), changed.into());
        for (kind, what) in DATED {
            let [expiry, issued] = dates(kind);
            date(expiry, format!("When the {what} in use expires"));
            date(
                issued,
                format!("When the {what} in use was issued (a CA bundle: installed)"),
            );
        }
    }
}

pub(crate) fn reload(source: &Arc<str>, trigger: &'static str, result: &'static str) {
    #[cfg(feature = "metrics")]
    counter!(RELOADS, "source" => source.clone(), "trigger" => trigger, "result" => result)
        .increment(1);
}

pub(crate) fn unauthorized(source: &Arc<str>) {
    #[cfg(feature = "metrics")]
    counter!(UNAUTHORIZED, "source" => source.clone()).increment(1);
}

pub(crate) fn retry(source: &Arc<str>, result: &'static str) {
    #[cfg(feature = "metrics")]
    counter!(RETRIES, "source" => source.clone(), "result" => result).increment(1);
}

pub(crate) fn kept_authorization(source: &Arc<str>) {
    #[cfg(feature = "metrics")]
    counter!(KEPT_AUTHORIZATION, "source" => source.clone()).increment(1);
}

pub(crate) fn watch_state(source: &Arc<str>, state: &'static str) {
    #[cfg(feature = "metrics")]
    for s in WATCH_STATES {
        let value = if s == state { 1.0 } else { 0.0 };
        gauge!(WATCH_STATE, "source" => source.clone(), "state" => s).set(value);
    }
}

/// The gauges that follow the credential in use.
pub(crate) struct TokenGauges {
    /// What the store holds, by its metric name (`token`, `client_certificate`, ...).
    pub(crate) kind: &'static str,
    pub(crate) generation: u64,
    pub(crate) expires_at: Option<SystemTime>,
    pub(crate) issued_at: SystemTime,
    pub(crate) changed_at: SystemTime,
    pub(crate) stalled: bool,
}

fn timestamp(at: SystemTime) -> f64 {
    match at.duration_since(SystemTime::UNIX_EPOCH) {
        Ok(d) => d.as_secs_f64(),
        Err(e) => -e.duration().as_secs_f64(),
    }
}

pub(crate) fn token(source: &Arc<str>, g: &TokenGauges) {
    #[cfg(feature = "metrics")]
    {
        let [expiry, issued] = dates(g.kind);
        let label = || source.clone();
        // Precision loss past 2^53 generations is of no concern.
        #[allow(clippy::cast_precision_loss)]
        gauge!(GENERATION, "source" => label()).set(g.generation as f64);
        if let Some(expires_at) = g.expires_at {
            gauge!(expiry, "source" => label()).set(timestamp(expires_at));
        }
        gauge!(issued, "source" => label()).set(timestamp(g.issued_at));
        gauge!(SOURCE_CHANGED, "source" => label()).set(timestamp(g.changed_at));
        gauge!(STALLED, "source" => label()).set(if g.stalled { 1.0 } else { 0.0 });
    }
}

#[cfg(all(test, feature = "metrics"))]
mod tests;
