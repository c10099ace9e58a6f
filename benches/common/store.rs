//! The benches' `TokenStore`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use bearer_reload::TokenStore;
use bearer_reload::source::FnSource;

use crate::common::token;

/// A `TokenStore` whose loader returns `token(next)`: bump `next`, then `reload`, to rotate.
pub(crate) fn bearer_store(next: Arc<AtomicU64>) -> TokenStore {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .expect("a runtime");
    // The store outlives this runtime: with `load`, its refresher would be dropped with the
    // runtime and every request would then take the path that tries to start it again.
    // The benches run no refresher (nothing but their writers reloads), so it is taken
    // with `pair` and dropped here, as the caller's to run.
    let (store, refresher) = rt
        .block_on(
            TokenStore::builder(FnSource::new("bench", move || {
                let bytes = token(next.load(Ordering::Relaxed)).into_bytes();
                async move { Ok::<_, std::io::Error>(bytes) }
            }))
            .no_periodic_refresh()
            .pair(),
        )
        .expect("first token");
    drop(refresher);
    store
}
