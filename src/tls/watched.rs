//! The store of a parsed credential: a [`TokenStore`] whose placeholder token carries it,
//! so that the watcher, the timer, single flight, keep-last-good, the refusal reloads and
//! the metrics are the token's own.

use std::marker::PhantomData;
use std::sync::Arc;

use super::source::{Parse, PemSource};
use crate::builder::StoreBuilder;
use crate::source::TokenSource;
use crate::store::{LoadError, Status, TokenStore};
use crate::token::AttachedValue;

/// A store of `T`s.
pub(crate) struct Watched<T> {
    store: TokenStore,
    parsed: PhantomData<fn() -> T>,
}

impl<T> Clone for Watched<T> {
    fn clone(&self) -> Self {
        Self {
            store: self.store.clone(),
            parsed: PhantomData,
        }
    }
}

impl<T: Parse + AttachedValue> Watched<T> {
    /// A builder of a store of `T` on `source`'s PEM, handed out as `S`.
    pub(crate) fn builder<S>(
        source: impl TokenSource,
        finish: fn(TokenStore) -> S,
    ) -> StoreBuilder<S> {
        StoreBuilder::of(PemSource::<_, T>::new(source), T::CREDENTIAL, finish)
    }

    pub(crate) fn new(store: TokenStore) -> Self {
        Self {
            store,
            parsed: PhantomData,
        }
    }

    /// The current credential. Lock-free.
    pub(crate) fn current(&self) -> Arc<T> {
        self.store
            .current()
            .attached()
            .expect("every token of a credential's store carries the credential")
    }

    pub(crate) fn store(&self) -> &TokenStore {
        &self.store
    }

    pub(crate) async fn reload(&self) -> Result<Arc<T>, LoadError> {
        self.store.reload().await?;
        Ok(self.current())
    }

    /// The store's status: its token speaks for the credential (see `AttachedValue`).
    pub(crate) fn status(&self) -> Status {
        self.store.status()
    }
}
