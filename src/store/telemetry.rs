//! What a store reports to the `metrics` facade (feature `metrics`; without it, nothing,
//! and these calls compile to nothing).

use std::sync::Arc;
#[cfg(feature = "metrics")]
use std::time::SystemTime;

use super::{LoadError, Reloaded, RetryOutcome, WatchState};
use crate::source::Trigger;
#[cfg(feature = "metrics")]
use crate::token::Token;

/// One store's metrics: every series carries its `source` label.
pub(crate) struct Telemetry {
    #[cfg_attr(not(feature = "metrics"), allow(dead_code))]
    source: Arc<str>,
}

impl Telemetry {
    pub(crate) fn new(source: Arc<str>) -> Self {
        #[cfg(feature = "metrics")]
        crate::metrics::describe();
        Self { source }
    }

    pub(crate) fn reload(&self, trigger: Trigger, result: &Result<Reloaded, LoadError>) {
        #[cfg(feature = "metrics")]
        crate::metrics::reload(
            &self.source,
            trigger.as_str(),
            match result {
                Ok(Reloaded::Rotated { .. }) => "rotated",
                Ok(Reloaded::Unchanged { .. }) => "unchanged",
                Err(_) => "failed",
            },
        );
        #[cfg(not(feature = "metrics"))]
        let _ = (trigger, result);
    }

    pub(crate) fn unauthorized(&self) {
        #[cfg(feature = "metrics")]
        crate::metrics::unauthorized(&self.source);
    }

    pub(crate) fn retry(&self, outcome: RetryOutcome) {
        #[cfg(feature = "metrics")]
        match outcome {
            RetryOutcome::Sent => {}
            RetryOutcome::Succeeded => crate::metrics::retry(&self.source, "succeeded"),
            RetryOutcome::Refused => crate::metrics::retry(&self.source, "refused"),
        }
        #[cfg(not(feature = "metrics"))]
        let _ = outcome;
    }

    pub(crate) fn kept_authorization(&self) {
        #[cfg(feature = "metrics")]
        crate::metrics::kept_authorization(&self.source);
    }

    pub(crate) fn watch_state(&self, state: &WatchState) {
        #[cfg(feature = "metrics")]
        crate::metrics::watch_state(
            &self.source,
            match state {
                WatchState::Active => "active",
                WatchState::Degraded { .. } => "degraded",
                WatchState::Off => "off",
            },
        );
        #[cfg(not(feature = "metrics"))]
        let _ = state;
    }

    /// The gauges of the token in use at `now`.
    #[cfg(feature = "metrics")]
    pub(crate) fn token(&self, token: &Token, now: SystemTime, stalled: bool) {
        let secs = |from: SystemTime, to: SystemTime| match to.duration_since(from) {
            Ok(d) => d.as_secs_f64(),
            Err(e) => -e.duration().as_secs_f64(),
        };
        let issued = token
            .kind()
            .claims()
            .and_then(|c| c.iat)
            .unwrap_or(token.loaded_at());
        crate::metrics::token(
            &self.source,
            &crate::metrics::TokenGauges {
                generation: token.generation(),
                expires_in: token.expires_at().map(|exp| secs(now, exp)),
                age: secs(issued, now),
                source_changed: secs(token.loaded_at(), now),
                stalled,
            },
        );
    }
}
