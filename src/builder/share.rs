//! Stores of one shareable source and the same options are one store in the process.

use std::any::TypeId;
use std::collections::HashMap;
use std::sync::{LazyLock, Mutex};
use std::time::Duration;

use super::Refresher;
use crate::store::{Handle, TokenStore};
use crate::sync::lock;

/// What makes two builders build the same store: the source's type and key, and every
/// option (the clock aside, which only tests set).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub(super) struct ShareKey {
    pub(super) source: (TypeId, String),
    pub(super) refresh_interval: Option<Option<Duration>>,
    pub(super) watch: bool,
    pub(super) max_size: usize,
    pub(super) unauthorized_interval: Duration,
    pub(super) read_timeout: Option<Duration>,
}

/// The live stores of shareable sources, by key. An entry goes when its store's refresher
/// ends, that is when the store is dropped.
static SHARED: LazyLock<Mutex<HashMap<ShareKey, Handle>>> = LazyLock::new(Mutex::default);

pub(super) fn shared_store(key: &ShareKey) -> Option<TokenStore> {
    lock(&SHARED).get(key).and_then(Handle::upgrade)
}

/// Makes `store` the one for `key`, and its refresher forget it when it ends; or, when
/// another caller loaded the same key meanwhile, hands back theirs (this one is dropped
/// unstarted).
pub(super) fn adopt(
    key: ShareKey,
    store: TokenStore,
    refresher: Refresher,
) -> (TokenStore, Refresher) {
    let mut shared = lock(&SHARED);
    if let Some(existing) = shared.get(&key).and_then(Handle::upgrade) {
        return (existing, Refresher::idle());
    }
    shared.insert(key.clone(), store.downgrade());
    let work = async move {
        refresher.await;
        // The store is gone: forget it, unless the key serves a newer store by now.
        let mut shared = lock(&SHARED);
        if shared.get(&key).is_some_and(|h| h.upgrade().is_none()) {
            shared.remove(&key);
        }
    };
    (store, Refresher(Box::pin(work)))
}
