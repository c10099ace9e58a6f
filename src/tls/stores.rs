//! A TLS client's [`Stores`] and their generations; [`Refusal`], what a refusal reloads.

use super::refusal::Blame;
use super::{IdentityStore, RootStore};
use crate::refusal::{AfterRefusal, Refused, Reload, reload};
use crate::store::{Certainty, Credential, Store};

/// The generations of the identity (0 without one) and of the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generations {
    pub(crate) identity: u64,
    pub(crate) roots: u64,
}

#[derive(Debug, Clone)]
pub(crate) struct Stores {
    pub(crate) identity: Option<IdentityStore>,
    pub(crate) roots: RootStore,
}

impl Stores {
    /// The roots' client config, presenting the identity's certificate when there is one.
    pub(crate) fn client_config(&self) -> rustls::ClientConfig {
        let mut config = self.roots.client_config();
        if let Some(identity) = &self.identity {
            config.client_auth_cert_resolver = identity.resolver();
        }
        config
    }

    pub(crate) fn generations(&self) -> Generations {
        Generations {
            identity: self.identity.as_ref().map_or(0, IdentityStore::generation),
            roots: self.roots.generation(),
        }
    }

    /// The store of the credential `blame` points at, and the generation of it the
    /// request went out with (of `sent`); `None` for a client without an identity.
    fn refused_store(&self, blame: Blame, sent: Generations) -> Option<(Box<dyn Blamed>, u64)> {
        match blame {
            Blame::Identity => self
                .identity
                .as_ref()
                .map(|i| (Box::new(i.store.clone()) as Box<dyn Blamed>, sent.identity)),
            Blame::Roots => Some((Box::new(self.roots.store.clone()), sent.roots)),
        }
    }
}

/// The store of the credential a refusal blames: the identity's or the bundle's.
trait Blamed: Send + Sync {
    /// Starts the reload a refusal of generation `sent` calls for.
    fn reload_later(&self, sent: u64, certainty: Certainty);

    /// The reload after a refusal of generation `sent` of this store's credential.
    fn reloading(&self, sent: u64, certainty: Certainty) -> Reload;

    fn count_retried(&self);

    fn count_resent(&self, refused: bool);
}

impl<C: Credential> Blamed for Store<C> {
    fn reload_later(&self, sent: u64, certainty: Certainty) {
        self.reload_after_refusal(sent, certainty);
    }

    fn reloading(&self, sent: u64, certainty: Certainty) -> Reload {
        Box::pin(reload(self.clone(), sent, certainty))
    }

    fn count_retried(&self) {
        Store::count_retried(self);
    }

    fn count_resent(&self, refused: bool) {
        Store::count_resent(self, refused);
    }
}

/// What a refusal reloads, and the counts of the request's second sending.
pub(crate) struct Refusal {
    store: Box<dyn Blamed>,
    sent: u64,
    certainty: Certainty,
}

impl Refusal {
    /// The refusal of a request sent with `sent` that `blame` points at, with `certainty`;
    /// `None` when it reloads nothing (a 401 to a client without an identity).
    pub(crate) fn new(
        stores: &Stores,
        blame: Blame,
        sent: Generations,
        certainty: Certainty,
    ) -> Option<Self> {
        let (store, sent) = stores.refused_store(blame, sent)?;
        Some(Self {
            store,
            sent,
            certainty,
        })
    }

    /// Starts the reload for the requests that follow; the request is not sent again.
    pub(crate) fn reload_later(&self) {
        self.store.reload_later(self.sent, self.certainty);
    }

    /// The reload: whether it brought a newer credential. For a 401 that a retry layer
    /// above sends again ([`crate::refusal`]), whose answer it marks [`Renewed`] if so.
    pub(crate) fn renew(&self) -> Reload {
        self.store.reloading(self.sent, self.certainty)
    }

    /// The reload, then the drain of `answer`: whether the request goes again.
    pub(crate) fn after<R: Refused>(&self, answer: R) -> AfterRefusal<R, R::Body> {
        AfterRefusal::reloading(self.renew(), answer)
    }

    /// Counts the second sending.
    pub(crate) fn resending(&self) {
        self.store.count_retried();
    }

    /// Counts how the second sending went: `refused` when it was refused too.
    pub(crate) fn resent(&self, refused: bool) {
        self.store.count_resent(refused);
    }
}
