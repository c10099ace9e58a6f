//! [`Stores`]: the client identity and CA bundle a client's connections are made with,
//! their generations, which tag each connection, and what a refusal reloads
//! ([`Refusal`]): the one decision of `HttpsClient`, `TlsMiddleware` and `TlsChannel`.

use super::refusal::Blame;
use super::{IdentityStore, RootStore};
use crate::refusal::{AfterRefusal, Carried, Handled, Refused, Reload, reload};
use crate::store::{Certainty, Credential, Store};

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
    /// Starts the reload a refusal of generation `sent` calls for, for the requests that
    /// follow.
    fn reload_later(&self, sent: u64, certainty: Certainty);

    /// The reload after a refusal of generation `sent` of this store's credential.
    fn reloading(&self, sent: u64, certainty: Certainty) -> Reload;

    /// Counts the request sent again after the refusal.
    fn count_retried(&self);

    /// Counts how that request went: `refused` when it was refused again.
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

/// What a refusal reloads: the store it blames and, for a 401, the token a retry layer
/// above handed down; then how the request goes again, once, with every credential newer
/// by then.
#[derive(Default)]
pub(crate) struct Refusal {
    blamed: Option<(Box<dyn Blamed>, u64)>,
    token: Option<Carried>,
    certainty: Option<Certainty>,
}

impl Refusal {
    /// The refusal of a request sent with `sent` that `blame` points at, with `certainty`;
    /// `token` for a 401. `None` when it reloads nothing (a 401 to a client without an
    /// identity, and no token handed down).
    pub(crate) fn new(
        stores: &Stores,
        blame: Blame,
        sent: Generations,
        certainty: Certainty,
        token: Option<Carried>,
    ) -> Option<Self> {
        let blamed = stores.refused_store(blame, sent);
        (blamed.is_some() || token.is_some()).then_some(Self {
            blamed,
            token,
            certainty: Some(certainty),
        })
    }

    fn certainty(&self) -> Certainty {
        self.certainty.unwrap_or(Certainty::Certain)
    }

    /// Starts each reload for the requests that follow, without waiting (the request is
    /// not sent again).
    pub(crate) fn reload_later(&self) {
        if let Some((store, sent)) = &self.blamed {
            store.reload_later(*sent, self.certainty());
        }
        if let Some(token) = &self.token {
            token
                .store
                .reload_after_refusal(token.sent, Certainty::Certain);
        }
    }

    /// The reloads, together, then the drain of `answer`: whether the request goes again.
    pub(crate) fn after<R: Refused>(&self, answer: R) -> AfterRefusal<R, R::Body> {
        let blamed = self
            .blamed
            .as_ref()
            .map(|(store, sent)| store.reloading(*sent, self.certainty()));
        let token = self.token.as_ref().map(Carried::reload);
        let reload: Reload = Box::pin(async move {
            let blamed = async move {
                match blamed {
                    Some(reload) => reload.await,
                    None => false,
                }
            };
            let token = async move {
                match token {
                    Some(reload) => reload.await,
                    None => false,
                }
            };
            let (blamed, token) = tokio::join!(blamed, token);
            blamed || token
        });
        AfterRefusal::reloading(reload, answer)
    }

    /// Counts the second sending, and puts the newest token on it.
    pub(crate) fn resending(&self, headers: &mut http::HeaderMap) {
        if let Some((store, _)) = &self.blamed {
            store.count_retried();
        }
        if let Some(token) = &self.token {
            token.store.resend(headers);
        }
    }

    /// Counts how the second sending went: `refused` when it was refused too.
    pub(crate) fn resent(&self, refused: bool) {
        if let Some((store, _)) = &self.blamed {
            store.count_resent(refused);
        }
        if let Some(token) = &self.token {
            token.store.count_resent(refused);
        }
    }

    /// Marks an answer that the retry layer above must not send again: its token was
    /// reloaded here.
    pub(crate) fn mark(&self, extensions: &mut http::Extensions) {
        if self.token.is_some() {
            extensions.insert(Handled);
        }
    }
}
