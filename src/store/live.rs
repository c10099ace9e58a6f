//! Every live store, by number: the plain layer's response future finds its store here,
//! and only after a refusal, instead of holding a reference-counted handle to it.
//!
//! Why a process-wide table: a handle in the future costs an atomic increment when the
//! request leaves and a decrement when its response is back, on the store's one shared
//! counter, contended when threads share the store; a `Copy` number costs neither. The
//! measurements that decided it are in `BENCHMARKS.md` ("What the plain layer's response
//! future holds"). The table holds only weak references, and a store leaves it when dropped: it
//! keeps nothing alive and hands a store to no one but the requests it authorized.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use super::{Shared, Store};
use crate::sync::lock;
use crate::token::Token;

static LIVE: LazyLock<Mutex<HashMap<StoreId, Weak<Shared<Token>>>>> = LazyLock::new(Mutex::default);

/// A store's number, unique for the life of the process: `Copy`, and free to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StoreId(u64);

impl StoreId {
    /// A new number, for a store about to be built.
    pub(super) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        StoreId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers `shared` under its number.
    pub(super) fn register(shared: &Arc<Shared<Token>>) {
        lock(&LIVE).insert(shared.id, Arc::downgrade(shared));
    }

    /// Forgets the store numbered `self` (it is being dropped).
    pub(super) fn forget(self) {
        lock(&LIVE).remove(&self);
    }

    /// The store, if it is still alive.
    pub(crate) fn store(self) -> Option<Store<Token>> {
        let shared = lock(&LIVE).get(&self)?.upgrade()?;
        Some(Store { shared })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_store_leaves_the_table_when_its_last_handle_goes() {
        let store = crate::test_support::loader("live", || async {
            Ok::<_, std::io::Error>(b"t".to_vec())
        })
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
        let id = store.0.shared.id;
        let clone = id.store().expect("found while alive");
        assert!(Arc::ptr_eq(&clone.shared, &store.0.shared));
        drop((store, clone));
        assert!(id.store().is_none());
        // Not a dead entry kept for the life of the process: the table holds live stores.
        assert!(!lock(&LIVE).contains_key(&id));
    }
}
