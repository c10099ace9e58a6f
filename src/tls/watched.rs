//! [`Watched`]: the store of a credential parsed from PEM (a client identity, a CA
//! bundle): the crate's one store, holding a [`Pem`], so that the watcher, the timer,
//! single flight, keep-last-good, the refusal reloads and the metrics are the store's own,
//! as for a token.

use std::sync::Arc;

use super::source::{Parse, Pem, PemSource};
use crate::builder::StoreBuilder;
use crate::source::TokenSource;
use crate::store::{LoadError, Status, Store};

/// A store of `T`s.
pub(crate) struct Watched<T: Parse> {
    store: Store<Pem<T>>,
}

impl<T: Parse> Clone for Watched<T> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
        }
    }
}

impl<T: Parse> Watched<T> {
    /// A builder of a store of `T` on `source`'s PEM, handed out as `S`.
    pub(crate) fn builder<S: Send + 'static>(
        source: impl TokenSource,
        finish: fn(Store<Pem<T>>) -> S,
    ) -> StoreBuilder<S> {
        StoreBuilder::of(PemSource::<_, T>::new(source), finish)
    }

    pub(crate) fn new(store: Store<Pem<T>>) -> Self {
        Self { store }
    }

    /// The current credential. Lock-free.
    pub(crate) fn current(&self) -> Arc<Pem<T>> {
        self.store.current()
    }

    pub(crate) fn store(&self) -> &Store<Pem<T>> {
        &self.store
    }

    pub(crate) async fn reload(&self) -> Result<Arc<Pem<T>>, LoadError> {
        self.store.reload().await
    }

    pub(crate) fn status(&self) -> Status {
        self.store.status()
    }
}
