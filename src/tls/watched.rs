//! The store of a parsed credential: a [`TokenStore`] whose placeholder token carries it,
//! so that the watcher, the timer, single flight, keep-last-good, the refusal reloads and
//! the metrics are the token's own.

use std::marker::PhantomData;
use std::sync::Arc;

use super::source::{Parse, PemSource};
use super::{Certificate, CertificateStatus};
use crate::builder::StoreBuilder;
use crate::source::TokenSource;
use crate::store::{LoadError, TokenStore};

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

/// What a credential shows in its status.
pub(crate) trait Shows {
    /// Its certificates: an identity's chain, leaf first; a bundle's authorities.
    fn certificates(&self) -> Vec<Certificate>;
    /// Whether it is no longer valid: an identity whose certificate expired, a bundle all
    /// of whose authorities did.
    fn is_expired_at(&self, now: std::time::SystemTime) -> bool;
}

impl<T: Parse + Shows> Watched<T> {
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

    pub(crate) fn status(&self) -> CertificateStatus {
        let token = self.store.current();
        let current: Arc<T> = token
            .attached()
            .expect("every token of a credential's store carries the credential");
        let s = self.store.status();
        CertificateStatus {
            source: s.source,
            generation: s.generation,
            certificates: current.certificates(),
            loaded_at: s.loaded_at,
            expires_at: s.expires_at,
            expired: current.is_expired_at(self.store.now()),
            reads: s.reads,
            rotations: s.rotations,
            failures: s.failures,
            last_error: s.last_error,
            watch: s.watch,
            refused: s.unauthorized,
            refused_reloads: s.unauthorized_reloads,
            retries: s.retries,
            retries_succeeded: s.retries_succeeded,
        }
    }
}
