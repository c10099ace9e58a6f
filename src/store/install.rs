//! Installing a fetched token: validate it, keep the last good one, bump the generation.

use std::sync::Arc;

use super::{Config, Counters, LoadError, Reloaded, Shared, Shown, event};
use crate::source::{Fetched, Trigger};
use crate::sync::lock;
use crate::token::{Token, TokenError};

/// Validates fetched bytes as a token, with the source's dates.
pub(super) fn token_of(
    mut fetched: Fetched,
    origin: &Arc<str>,
    config: &Config,
) -> Result<Token, LoadError> {
    let invalid = |source: TokenError| LoadError::Invalid {
        origin: origin.clone(),
        source,
    };
    let token = Token::parse_capped(fetched.bytes(), config.max_size).map_err(invalid)?;
    Ok(token
        .with_source_dates(
            config.clock.now(),
            fetched.expires_at(),
            fetched.refresh_at(),
        )
        .with_attached(fetched.take_attached()))
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
            event!(
                self.config.credential,
                trace,
                { trigger = trigger.as_str(), token = %Shown(&old), },
                "token unchanged",
                "unchanged"
            );
            return Ok(Reloaded::Unchanged);
        }
        let from = old.generation();
        let to = from + 1;
        let token = token.with_generation(to);
        event!(
            self.config.credential,
            info,
            {
                trigger = trigger.as_str(),
                old = %Shown(&old),
                new = %token,
                generation = to,
            },
            "token rotated",
            "rotated"
        );
        self.current.store(Arc::new(token));
        self.set_generation(to);
        Counters::bump(&self.counters.rotations);
        self.generations.send_replace(to);
        Ok(Reloaded::Rotated)
    }
}
