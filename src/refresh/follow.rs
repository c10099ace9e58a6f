//! Following another store: a store whose credential is a part of another store's (a
//! kubeconfig's token, client identity or CA bundle, parts of the store of the file) is
//! fetched again as each read of that leader completes, and says the leader's watch state
//! as its own: its fetch takes the part out of what the leader holds, so that the file is
//! read once for all of its parts.

use std::future::Future;
use std::sync::Arc;

use crate::source::Trigger;
use crate::store::{Credential, OnFailure, ReadsDone, Recency, Store, WatchState, WeakStore};

/// The store another follows, whatever its credential.
pub(crate) trait Leader: Send + Sync + 'static {
    /// Its reads, as they complete.
    fn reads_done(&self) -> ReadsDone;

    /// What it says of its watch.
    fn watch_state(&self) -> WatchState;
}

impl<C: Credential> Leader for Store<C> {
    fn reads_done(&self) -> ReadsDone {
        Store::reads_done(self)
    }

    fn watch_state(&self) -> WatchState {
        Store::watch_state(self)
    }
}

/// Follows `leader` for the store behind `store`, until either is gone. Subscribes here,
/// before the future first runs, so that no read of the leader is missed.
pub(crate) fn follow<C: Credential>(
    store: WeakStore<C>,
    leader: Arc<dyn Leader>,
) -> impl Future<Output = ()> + Send + use<C> {
    let mut reads = leader.reads_done();
    let say = move |store: &WeakStore<C>| {
        if let Some(follower) = store.upgrade() {
            follower.follow_watch_state(leader.watch_state());
        }
    };
    // Said at once, as a watcher says it subscribed: the status is right from the load on.
    say(&store);
    async move {
        while reads.next().await {
            // A fetch that starts after the leader's read: it takes what that read found.
            let reloaded = store
                .reload(Trigger::Watch, Recency::AfterNow, OnFailure::Report)
                .await;
            if reloaded.is_none() {
                return;
            }
            say(&store);
        }
    }
}
