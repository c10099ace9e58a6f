//! Installing a fetched credential: validate it, keep the last good one, bump the generation.

use std::sync::Arc;

use super::{Config, Counters, Credential, LoadError, Reloaded, Shared, Stamp, event};
use crate::source::{Fetched, Trigger};
use crate::sync::lock;

/// A fetched read as the store's credential, stamped with the time of the read and the
/// source's dates (generation 0 until it is installed).
pub(super) fn credential_of<C: Credential>(
    fetched: Fetched,
    origin: &Arc<str>,
    config: &Config,
) -> Result<C, LoadError> {
    let stamp = Stamp {
        generation: 0,
        loaded_at: config.clock.now(),
        source_expiry: fetched.expires_at(),
        refresh_at: fetched.refresh_at(),
    };
    Ok(C::from_fetched(fetched, origin, config.max_size)?.stamped(stamp))
}

impl<C: Credential> Shared<C> {
    /// Installs a fetched token if it is valid and new.
    pub(super) fn install(
        &self,
        fetched: Fetched,
        trigger: Trigger,
    ) -> Result<Reloaded, LoadError> {
        let token: C = credential_of(fetched, &self.origin, &self.config)?;
        *lock(&self.last_error) = None;
        let old = self.current.load_full();
        if old.same(&token) {
            event!(
                C::KIND,
                trace,
                { trigger = trigger.as_str(), token = %old.logged(), },
                "token unchanged",
                "unchanged"
            );
            return Ok(Reloaded::Unchanged);
        }
        let from = old.generation();
        let to = from + 1;
        let stamp = Stamp {
            generation: to,
            ..*token.stamp()
        };
        let token = token.stamped(stamp);
        event!(
            C::KIND,
            info,
            {
                trigger = trigger.as_str(),
                old = %old.logged(),
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
