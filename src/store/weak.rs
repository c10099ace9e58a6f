//! [`WeakStore`]: a weak reference to a store, for the work that keeps it fresh.

use std::fmt;
use std::sync::{Arc, Weak};

use super::Store;
use super::credential::Credential;
use super::error::LoadError;
use super::flight::{Ask, OnFailure, Recency, wait};
use super::shared::{STOPPED, Shared};
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

impl<C: Credential> WeakStore<C> {
    /// The refresher was dropped before the store: report it, and let the next use start
    /// it again (see the module docs).
    pub(crate) fn refresher_stopped(&self) {
        let Some(s) = self.shared() else {
            return;
        };
        s.set_watch_state(WatchState::Stopped {
            reason: STOPPED.to_owned(),
        });
        let restarts = s.restart.get().is_some();
        if restarts {
            s.current.stop();
        }
        tracing::warn!(
            source = %s.origin,
            "nothing refreshes the token any more: {STOPPED}; {}",
            if restarts {
                "the next request or reload from a live runtime starts it again"
            } else {
                "its refresher came from `StoreBuilder::pair`, so nothing starts it again"
            }
        );
    }
}

impl<C: Credential> WeakStore<C> {
    /// The store, unless every `TokenStore` clone has been dropped.
    pub(crate) fn upgrade(&self) -> Option<Store<C>> {
        self.shared().map(|shared| Store { shared })
    }
}
