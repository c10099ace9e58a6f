//! [`Stores`]: the client identity and CA bundle a client's connections are made with, and
//! their generations, which tag each connection.

use super::{IdentityStore, RootStore};

/// The generations of the identity (0 without one) and of the bundle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Generations {
    pub(crate) identity: u64,
    pub(crate) roots: u64,
}

/// The credentials a client's connections are made with.
#[derive(Debug, Clone)]
pub(crate) struct Stores {
    pub(super) identity: Option<IdentityStore>,
    pub(super) roots: RootStore,
}

impl Stores {
    /// The roots' client config, presenting the identity's certificate when there is one.
    pub(super) fn client_config(&self) -> rustls::ClientConfig {
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
}
