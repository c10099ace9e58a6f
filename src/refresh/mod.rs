//! What keeps a store fresh in the background: the [timer] and the file
//! [watcher](watch) (through the process-wide [registry], on the names of the
//! file's [symlink chain](chain)), run together as the store's refresher ([`start`]).
//!
//! Each holds only a weak reference to its store: the refresher ends when the store is
//! dropped. When it is dropped first (its runtime shut down), it tells the store, which
//! reports it (see `WeakStore::refresher_stopped`).

use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::Clock;
use crate::store::{Credential, WeakStore};

pub(crate) mod chain;
pub(crate) mod follow;
pub(crate) mod registry;
pub(crate) mod timer;
pub(crate) mod watch;

/// What a store's refresher does: the timer's period and clock, the files to watch, and
/// the store to follow.
#[derive(Clone)]
pub(crate) struct Plan {
    pub(crate) period: Option<Duration>,
    pub(crate) clock: Clock,
    pub(crate) watch: Vec<PathBuf>,
    pub(crate) follow: Option<Arc<dyn follow::Leader>>,
}

/// The refresher of the store behind `store`: its timer, for a file its watcher, and for
/// a part of another store's credential its [follower](follow), until the store is
/// dropped. The watcher subscribes (and the store's status says so) before this returns.
pub(crate) async fn start<C: Credential>(
    store: WeakStore<C>,
    plan: Plan,
) -> impl Future<Output = ()> + Send + use<C> {
    let early = Early(store.clone());
    let watcher = match plan.watch.is_empty() {
        true => None,
        false => Some(watch::watch(&registry::GLOBAL, store.clone(), &plan.watch).await),
    };
    let timer = timer::run(store.clone(), plan.period, plan.clock);
    let follower = (plan.follow).map(|leader| follow::follow(store.clone(), leader));
    async move {
        // Dropped at the end, with the store gone: it tells no one.
        let _early = early;
        until_closed(store, async {
            tokio::join!(timer, some(watcher), some(follower));
        })
        .await;
    }
}

/// Runs `work`, if any.
async fn some(work: Option<impl Future<Output = ()>>) {
    if let Some(work) = work {
        work.await;
    }
}

/// Runs `work` until it ends or the store behind `store` is dropped.
pub(crate) async fn until_closed<C: Credential>(
    store: WeakStore<C>,
    work: impl Future<Output = ()>,
) {
    tokio::select! {
        () = store.closed() => {}
        () = work => {}
    }
}

/// Tells the store, if it still lives, that its refresher is gone: dropped before it ended
/// (its runtime shut down). A refresher ends only once its store is gone, so at its end
/// there is no one to tell.
struct Early<C: Credential>(WeakStore<C>);

impl<C: Credential> Drop for Early<C> {
    fn drop(&mut self) {
        self.0.refresher_stopped();
    }
}
