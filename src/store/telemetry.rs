//! What a store reports to the `metrics` facade: with feature `metrics` the `metrics`
//! module's series, without it nothing (its twin, `metrics/off.rs`, does nothing).

use std::sync::Arc;

use super::credential::Credential;
use super::error::LoadError;
use super::status::{Reloaded, RetryOutcome, WatchState};
use crate::source::Trigger;

/// One store's metrics: every series carries its `source` label.
pub(crate) struct Telemetry {
    source: Arc<str>,
}

impl Telemetry {
    pub(crate) fn new(source: Arc<str>) -> Self {
        crate::metrics::describe();
        Self { source }
    }

    pub(crate) fn reload(&self, trigger: Trigger, result: &Result<Reloaded, LoadError>) {
        crate::metrics::reload(
            &self.source,
            trigger.as_str(),
            match result {
                Ok(Reloaded::Rotated) => "rotated",
                Ok(Reloaded::Unchanged) => "unchanged",
                Err(_) => "failed",
            },
        );
    }

    pub(crate) fn unauthorized(&self) {
        crate::metrics::unauthorized(&self.source);
    }

    pub(crate) fn retry(&self, outcome: RetryOutcome) {
        match outcome {
            RetryOutcome::Sent => {}
            RetryOutcome::Succeeded => crate::metrics::retry(&self.source, "succeeded"),
            RetryOutcome::Refused => crate::metrics::retry(&self.source, "refused"),
        }
    }

    pub(crate) fn kept_authorization(&self) {
        crate::metrics::kept_authorization(&self.source);
    }

    pub(crate) fn watch_state(&self, state: &WatchState) {
        crate::metrics::watch_state(
            &self.source,
            match state {
                WatchState::Active => "active",
                WatchState::Degraded { .. } => "degraded",
                WatchState::Off => "off",
                WatchState::Stopped { .. } => "stopped",
            },
        );
    }

    /// The gauges of the token in use.
    pub(crate) fn token<C: Credential>(&self, token: &C, stalled: bool) {
        crate::metrics::token(
            &self.source,
            &crate::metrics::TokenGauges {
                kind: C::KIND.metric,
                generation: token.generation(),
                expires_at: token.expires_at(),
                issued_at: token.issued_at().unwrap_or(token.loaded_at()),
                changed_at: token.loaded_at(),
                stalled,
            },
        );
    }
}
