//! Whether the store's refresher runs, and starting it again when its runtime went away.
//!
//! The builder spawns a store's refresher (its timer and watcher) on the runtime that
//! loads the store. A store can outlive that runtime: loaded by a short-lived runtime (a
//! start-up step, a test fixture) and used on another. When the refresher is dropped while
//! its store lives, the store says so ([`WatchState::Stopped`], a warning) and sets the
//! `STOPPED` flag of its word, so that the next request through a layer (or a
//! [`reload`](crate::TokenStore::reload)) made from a live runtime starts a new refresher there,
//! reads the source once (for what changed while nothing watched) and follows it again. A refresher the caller runs
//! ([`StoreBuilder::pair`](crate::StoreBuilder::pair)) is the caller's: the store reports
//! that it stopped but starts nothing.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::credential::Credential;
use super::flight::{OnFailure, Recency};
use super::shared::Shared;
use super::status::WatchState;
use super::weak::WeakStore;
use crate::source::Trigger;
use crate::sync::lock;

/// Builds a store's refresher: the same timer and watcher each time.
pub(crate) type Start<C> =
    Arc<dyn Fn(WeakStore<C>) -> Pin<Box<dyn Future<Output = ()> + Send>> + Send + Sync>;

/// Why [`WatchState::Stopped`].
const STOPPED: &str = "the store's refresher stopped while the store lives (its tokio \
                       runtime shut down, or its future was dropped)";

impl<C: Credential> Shared<C> {
    /// Makes `start` the way to start the store's refresher again (a store whose refresher
    /// the crate spawned).
    pub(super) fn restart_with(&self, start: Start<C>) {
        let _ = self
            .restart
            .set(Box::new(move |shared| start(WeakStore::new(shared))));
    }

    /// Starts the refresher again on the current runtime, if it stopped, the store knows
    /// how, and the caller is in a runtime. One caller wins; the others find the flag
    /// cleared.
    #[cold]
    pub(super) fn revive(self: &Arc<Self>) {
        let Some(start) = self.restart.get() else {
            return;
        };
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        if !self.current.resume() {
            return;
        }
        *lock(&self.runtime) = runtime.clone();
        self.set_watch_state(WatchState::Off);
        // Built here, on this thread: a watcher subscribes (and reports itself) at once.
        // Then one read, for what changed while nothing watched, before the refresher runs.
        let refresher = start(Arc::downgrade(self));
        let weak = WeakStore::new(Arc::downgrade(self));
        runtime.spawn(async move {
            let _ = weak
                .reload(Trigger::Timer, Recency::AfterNow, OnFailure::Report)
                .await;
            refresher.await;
        });
        tracing::info!(
            source = %self.origin,
            "the store's refresher started again on the current runtime"
        );
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
