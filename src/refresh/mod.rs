//! What keeps a store fresh in the background: the [timer] and the file
//! [watcher](watch) (through the process-wide [registry], on the names of the
//! file's [symlink chain](chain)).
//!
//! Each is a future built from a weak [`Handle`]; the builder runs them as one task
//! that ends when the store is dropped ([`until_closed`]).

use std::future::Future;

use crate::store::Handle;

#[cfg(feature = "metrics")]
pub(crate) mod gauges;
pub(crate) mod registry;
pub(crate) mod timer;
pub(crate) mod watch;

pub(crate) mod chain;

/// Runs `work` until it ends or the store behind `handle` is dropped.
pub(crate) async fn until_closed(handle: Handle, work: impl Future<Output = ()>) {
    tokio::select! {
        () = handle.closed() => {}
        () = work => {}
    }
}
