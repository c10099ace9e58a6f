//! Every live store, by number: the plain layer's response future finds its store here,
//! and only after a refusal, instead of holding a reference-counted handle to it.
//!
//! Why a process-wide table: a handle in the future costs an atomic increment when the
//! request leaves and a decrement when its response is back, on the store's one shared
//! counter, contended when threads share the store; a `Copy` number costs neither. The
//! measurements that decided it are in `BENCHMARKS.md` ("What the plain layer's response
//! future holds"). The table holds only weak references, and a store leaves it when dropped: it
//! keeps nothing alive and hands a store to no one but the requests it authorized.

use std::any::Any;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use crate::sync::lock;

/// Each store's state by number, as `Any`: the table knows nothing of a store, which
/// holds its number and is found by it.
static LIVE: LazyLock<Mutex<HashMap<StoreId, Weak<dyn Any + Send + Sync>>>> =
    LazyLock::new(Mutex::default);

/// A store's number, unique for the life of the process: `Copy`, and free to hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) struct StoreId(u64);

impl StoreId {
    /// A new number, for a store about to be built.
    pub(super) fn next() -> Self {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        StoreId(NEXT.fetch_add(1, Ordering::Relaxed))
    }

    /// Registers `shared` under number `self`.
    pub(super) fn register<T: Any + Send + Sync>(self, shared: &Arc<T>) {
        let weak: Weak<T> = Arc::downgrade(shared);
        let weak: Weak<dyn Any + Send + Sync> = weak;
        lock(&LIVE).insert(self, weak);
    }

    /// Forgets the store numbered `self` (it is being dropped).
    pub(super) fn forget(self) {
        lock(&LIVE).remove(&self);
    }

    /// What was registered under number `self`, if it is still alive and a `T`.
    pub(super) fn find<T: Any + Send + Sync>(self) -> Option<Arc<T>> {
        let shared = lock(&LIVE).get(&self)?.upgrade()?;
        shared.downcast().ok()
    }
}

#[cfg(test)]
impl StoreId {
    /// Whether the table holds an entry under number `self`, dead or alive (tests).
    pub(super) fn is_registered(self) -> bool {
        lock(&LIVE).contains_key(&self)
    }
}
