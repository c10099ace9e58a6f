//! What a store reports to the `metrics` facade (feature `metrics`; without it, nothing,
//! and these calls compile to nothing).

use std::sync::Arc;

use super::credential::Credential;
#[cfg(feature = "metrics")]
use super::credential::Kind;
use super::error::LoadError;
use super::status::{Reloaded, RetryOutcome, WatchState};
use crate::source::Trigger;

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
                Ok(Reloaded::Rotated) => "rotated",
                Ok(Reloaded::Unchanged) => "unchanged",
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
                WatchState::Stopped { .. } => "stopped",
            },
        );
        #[cfg(not(feature = "metrics"))]
        let _ = state;
    }

    /// The gauges of the token in use.
    pub(crate) fn token<C: Credential>(&self, token: &C, stalled: bool) {
        #[cfg(feature = "metrics")]
        crate::metrics::token(
            &self.source,
            &crate::metrics::TokenGauges {
                dates: match C::KIND {
                    Kind::Token => crate::metrics::TOKEN_DATES,
                    Kind::ClientCertificate => crate::metrics::CERTIFICATE_DATES,
                    Kind::CaBundle => crate::metrics::BUNDLE_DATES,
                    Kind::Kubeconfig => crate::metrics::KUBECONFIG_DATES,
                },
                generation: token.generation(),
                expires_at: token.expires_at(),
                issued_at: token.issued_at().unwrap_or(token.loaded_at()),
                changed_at: token.loaded_at(),
                stalled,
            },
        );
        #[cfg(not(feature = "metrics"))]
        let _ = (token, stalled);
    }
}
