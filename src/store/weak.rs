//! [`WeakStore`]: a weak reference to a store, for the work that keeps it fresh.

use std::fmt;
use std::sync::{Arc, Weak};

use super::credential::Credential;
use super::error::LoadError;
use super::flight::{Ask, OnFailure, Recency, wait};
use super::shared::Shared;
use super::status::{Reloaded, WatchState};
use crate::source::Trigger;

/// A weak reference to a [`Store`](super::Store), held by background work (the timer, the
/// watcher) so that it never keeps the store alive.
pub(crate) struct WeakStore<C: Credential> {
    shared: Weak<Shared<C>>,
}

impl<C: Credential> fmt::Debug for WeakStore<C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = self.shared.upgrade().map(|s| s.origin.clone());
        f.debug_struct("WeakStore")
            .field("source", &origin)
            .finish()
    }
}

impl<C: Credential> Clone for WeakStore<C> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
        }
    }
}

impl<C: Credential> WeakStore<C> {
    pub(super) fn new(shared: Weak<Shared<C>>) -> Self {
        Self { shared }
    }

    /// The store's state, unless every handle of it has been dropped.
    pub(super) fn shared(&self) -> Option<Arc<Shared<C>>> {
        self.shared.upgrade()
    }

    /// Resolves when the store is dropped.
    pub(crate) async fn closed(&self) {
        let Some(mut generations) = self.shared.upgrade().map(|s| s.current.subscribe()) else {
            return;
        };
        while generations.changed().await.is_ok() {}
    }

    /// Reloads on behalf of `trigger`; `None` when the store is gone. The wait for the
    /// read does not keep the store alive.
    pub(crate) async fn reload(
        &self,
        trigger: Trigger,
        recency: Recency,
        report: OnFailure,
    ) -> Option<Result<Reloaded, LoadError>> {
        let (done, ticket) = {
            let shared = self.shared.upgrade()?;
            let wanted = shared.flight.wanted(recency);
            let ask = Ask { trigger, report };
            (shared.flight.subscribe(), shared.ask(wanted, ask))
        };
        wait(done, ticket).await
    }

    /// Records whether the store's file is watched.
    pub(crate) fn set_watch_state(&self, state: WatchState) {
        if let Some(shared) = self.shared.upgrade() {
            shared.set_watch_state(state);
        }
    }
}
