//! Installing a fetched token: validate it, keep the last good one, bump the generation.

use std::sync::Arc;

use super::{Config, Counters, LoadError, Reloaded, Shared};
use crate::source::{Fetched, Trigger};
use crate::sync::lock;
use crate::token::{Token, TokenError};

/// Validates fetched bytes as a token, with the source's dates.
pub(super) fn token_of(
    fetched: Fetched,
    origin: &Arc<str>,
    config: &Config,
) -> Result<Token, LoadError> {
    let invalid = |source: TokenError| LoadError::Invalid {
        origin: origin.clone(),
        source,
    };
    let token = Token::parse_capped(fetched.bytes(), config.max_size).map_err(invalid)?;
    Ok(token.with_source_dates(
        config.clock.now(),
        fetched.expires_at(),
        fetched.refresh_at(),
    ))
}

impl Shared {
    /// Installs a fetched token if it is valid and new.
    pub(super) fn install(
        &self,
        fetched: Fetched,
        trigger: Trigger,
    ) -> Result<Reloaded, LoadError> {
        let token = token_of(fetched, &self.origin, &self.config)?;
        *lock(&self.last_error) = None;
        let old = self.current.load_full();
        if old.same_secret(&token) {
            tracing::trace!(trigger = trigger.as_str(), token = %old.fingerprint(), "token unchanged");
            return Ok(Reloaded::Unchanged);
        }
        let from = old.generation();
        let to = from + 1;
        let token = token.with_generation(to);
        tracing::info!(
            trigger = trigger.as_str(),
            old = %old.fingerprint(),
            new = %token,
            generation = to,
            "token rotated"
        );
        self.current.store(Arc::new(token));
        self.set_generation(to);
        Counters::bump(&self.counters.rotations);
        self.generations.send_replace(to);
        Ok(Reloaded::Rotated)
    }
}
