//! [`Refresher`]: a store's background work, to spawn.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

/// The background work of a store (its timer and watcher), from [`StoreBuilder::pair`](crate::StoreBuilder::pair):
/// a future to spawn. It ends when the store is dropped.
#[must_use = "a refresher does nothing unless it is spawned or polled"]
pub struct Refresher(pub(super) Pin<Box<dyn Future<Output = ()> + Send>>);

impl Refresher {
    pub(super) fn idle() -> Self {
        Refresher(Box::pin(async {}))
    }
}

impl fmt::Debug for Refresher {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Refresher").finish_non_exhaustive()
    }
}

impl Future for Refresher {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        self.0.as_mut().poll(cx)
    }
}
