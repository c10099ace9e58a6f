//! Without feature `metrics`, a store reports nothing: the `metrics` module's calls, doing
//! nothing.

use std::sync::Arc;
use std::time::SystemTime;

pub(crate) fn describe() {}

pub(crate) fn reload(_: &Arc<str>, _: &'static str, _: &'static str) {}

pub(crate) fn unauthorized(_: &Arc<str>) {}

pub(crate) fn retry(_: &Arc<str>, _: &'static str) {}

pub(crate) fn kept_authorization(_: &Arc<str>) {}

pub(crate) fn watch_state(_: &Arc<str>, _: &'static str) {}

/// The gauges of a store's credential in use (read by the feature's own `token`).
#[allow(dead_code)]
pub(crate) struct TokenGauges {
    pub(crate) kind: &'static str,
    pub(crate) generation: u64,
    pub(crate) expires_at: Option<SystemTime>,
    pub(crate) issued_at: SystemTime,
    pub(crate) changed_at: SystemTime,
    pub(crate) stalled: bool,
}

pub(crate) fn token(_: &Arc<str>, _: &TokenGauges) {}
