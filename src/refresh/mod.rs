//! What keeps a store fresh in the background: the [timer], the file [watcher](watch)
//! (through the process-wide [registry], on the names of the file's [symlink
//! chain](chain)), and the [follower](follow) of another store, run together as the
//! store's refresher ([`start`]).
//!
//! Each holds only a weak reference to its store: the refresher ends when the store is
//! dropped. When it is dropped first (its runtime shut down), it tells the store ([`Early`]).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::source::Trigger;
use crate::store::{Credential, OnFailure, ReadsDone, Recency, Store, WatchState, WeakStore};

pub(crate) mod chain;
pub(crate) mod registry;
pub(crate) mod timer;
pub(crate) mod watch;

/// What a store's refresher does.
#[derive(Clone)]
pub(crate) struct Plan {
    pub(crate) period: Option<Duration>,
    pub(crate) watch: Vec<PathBuf>,
    pub(crate) follow: Option<Arc<dyn Leader>>,
}

/// The refresher of the store behind `store`, until the store is dropped. The watcher
/// subscribes (and the store's status says so) before this returns.
pub(crate) async fn start<C: Credential>(
    store: WeakStore<C>,
    plan: Plan,
) -> impl Future<Output = ()> + Send + use<C> {
    let early = Early(store.clone());
    let watcher = match plan.watch.is_empty() {
        true => None,
        false => Some(watch::watch(&registry::GLOBAL, store.clone(), &plan.watch).await),
    };
    let timer = timer::run(store.clone(), plan.period);
    let follower = (plan.follow).map(|leader| follow(store.clone(), leader));
    async move {
        // Dropped at the end, with the store gone: it tells no one.
        let _early = early;
        until_closed(store, async {
            tokio::join!(timer, some(watcher), some(follower));
        })
        .await;
    }
}

/// The store another follows, whatever its credential.
pub(crate) trait Leader: Send + Sync + 'static {
    /// A receiver that changes as each of its reads completes, whatever its result.
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

/// Follows `leader`, for a store whose credential is a part of the leader's (a
/// kubeconfig's token, client identity or CA bundle): fetches again as each read of the
/// leader completes, and says the leader's watch state as its own. Subscribes here, before
/// the future first runs, so that no read of the leader is missed.
pub(crate) fn follow<C: Credential>(
    store: WeakStore<C>,
    leader: Arc<dyn Leader>,
) -> impl Future<Output = ()> + Send + use<C> {
    let mut reads = leader.reads_done();
    let say = move |store: &WeakStore<C>| store.set_watch_state(leader.watch_state());
    // Said at once, as a watcher says it subscribed: the status is right from the load on.
    say(&store);
    // Each fetch starts after the leader's read: it takes what that read found.
    async move {
        while reads.changed().await.is_ok()
            && (store.reload(Trigger::Watch, Recency::AfterNow, OnFailure::Report))
                .await
                .is_some()
        {
            say(&store);
        }
    }
}

async fn some(work: Option<impl Future<Output = ()>>) {
    if let Some(work) = work {
        work.await;
    }
}

pub(crate) async fn until_closed<C: Credential>(
    store: WeakStore<C>,
    work: impl Future<Output = ()>,
) {
    tokio::select! {
        () = store.closed() => {}
        () = work => {}
    }
}

/// Tells the store, if it still lives, that its refresher was dropped before it ended.
struct Early<C: Credential>(WeakStore<C>);

impl<C: Credential> Drop for Early<C> {
    fn drop(&mut self) {
        self.0.refresher_stopped();
    }
}
