//! Every live store, by number: a response future finds its store here (only after a 401)
//! rather than holding a reference-counted handle to it, which would cost an atomic
//! increment and decrement on a shared cache line per request.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use super::{Shared, TokenStore};
use crate::sync::lock;

pub(super) static LIVE: LazyLock<Mutex<HashMap<StoreId, Weak<Shared>>>> =
    LazyLock::new(Mutex::default);

/// A store's number, unique for the life of the process: `Copy`, and free to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StoreId(u64);

impl StoreId {
    pub(super) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        StoreId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// The store, if it is still alive.
    pub(crate) fn store(self) -> Option<TokenStore> {
        let shared = lock(&LIVE).get(&self)?.upgrade()?;
        Some(TokenStore { shared })
    }
}

impl StoreId {
    /// Registers `shared` under its number.
    pub(super) fn register(shared: &Arc<Shared>) {
        lock(&LIVE).insert(shared.id, Arc::downgrade(shared));
    }

    /// Forgets the store numbered `self` (it is being dropped).
    pub(super) fn forget(self) {
        lock(&LIVE).remove(&self);
    }
}

/// Every live store (for the process-wide gauge task).
#[cfg(feature = "metrics")]
pub(crate) fn live() -> Vec<TokenStore> {
    lock(&LIVE)
        .values()
        .filter_map(Weak::upgrade)
        .map(|shared| TokenStore { shared })
        .collect()
}
