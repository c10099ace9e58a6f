//! [`Stores`]: the client identity and CA bundle a client's connections are made with,
//! their generations, which tag each connection, and the store a refusal blames.

use super::identity::Identity;
use super::refusal::Blame;
use super::roots::Roots;
use super::source::Pem;
use super::{IdentityStore, RootStore};
use crate::refusal::{AfterRefusal, Refused, Reload, reload};
use crate::store::{Certainty, Store};

/// The generations of the identity (0 without one) and of the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generations {
    pub(crate) identity: u64,
    pub(crate) roots: u64,
}

/// The credentials a client's connections are made with.
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
    pub(crate) fn refused_store(&self, blame: Blame, sent: Generations) -> Option<(Blamed, u64)> {
        match blame {
            Blame::Identity => self
                .identity
                .as_ref()
                .map(|i| (Blamed::Identity(i.store().clone()), sent.identity)),
            Blame::Roots => Some((Blamed::Roots(self.roots.store().clone()), sent.roots)),
        }
    }
}

/// The store of the credential a refusal blames.
#[derive(Clone)]
pub(crate) enum Blamed {
    Identity(Store<Pem<Identity>>),
    Roots(Store<Pem<Roots>>),
}

impl Blamed {
    /// Starts the reload a refusal of generation `sent` calls for, for the requests that
    /// follow.
    pub(crate) fn reload_after_refusal(&self, sent: u64, certainty: Certainty) {
        match self {
            Blamed::Identity(s) => s.reload_after_refusal(sent, certainty),
            Blamed::Roots(s) => s.reload_after_refusal(sent, certainty),
        }
    }

    /// The reload after a refusal of generation `sent` of this store's credential.
    pub(crate) fn reload(&self, sent: u64, certainty: Certainty) -> Reload {
        match self {
            Blamed::Identity(s) => Box::pin(reload(s.clone(), sent, certainty)),
            Blamed::Roots(s) => Box::pin(reload(s.clone(), sent, certainty)),
        }
    }

    /// What follows a refusal of generation `sent` of this store's credential.
    pub(crate) fn after<R: Refused>(
        &self,
        sent: u64,
        certainty: Certainty,
        answer: R,
    ) -> AfterRefusal<R, R::Body> {
        AfterRefusal::reloading(self.reload(sent, certainty), answer)
    }

    pub(crate) fn count_retried(&self) {
        match self {
            Blamed::Identity(s) => s.count_retried(),
            Blamed::Roots(s) => s.count_retried(),
        }
    }

    pub(crate) fn count_resent(&self, refused: bool) {
        match self {
            Blamed::Identity(s) => s.count_resent(refused),
            Blamed::Roots(s) => s.count_resent(refused),
        }
    }
}
