//! Without feature `metrics`, a store reports nothing: the same calls, doing nothing.

use std::sync::Arc;

use crate::source::Trigger;
use crate::store::{Credential, LoadError, Reloaded, RetryOutcome, WatchState};

/// One store's metrics: none.
pub(crate) struct Telemetry;

impl Telemetry {
    pub(crate) fn new(_source: Arc<str>) -> Self {
        Telemetry
    }

    pub(crate) fn reload(&self, _: Trigger, _: &Result<Reloaded, LoadError>) {}

    pub(crate) fn unauthorized(&self) {}

    pub(crate) fn retry(&self, _: RetryOutcome) {}

    pub(crate) fn kept_authorization(&self) {}

    pub(crate) fn watch_state(&self, _: &WatchState) {}

    pub(crate) fn token<C: Credential>(&self, _: &C, _: bool) {}
}
