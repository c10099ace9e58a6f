//! [`Credential`]: what a store holds (a bearer token, a client identity, a CA bundle), and
//! what each kind says of itself: how a read becomes one, when it goes stale, how logs,
//! `status()` and the metrics show it.
//!
//! The store is one type, generic over its credential ([`Shared`](super::shared::Shared)): the
//! watcher, the timer, single flight, keep-last-good, the refusal reloads and the metrics
//! are the same code for the three, and each kind brings only what is its own.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use super::error::LoadError;
use crate::source::Fetched;
use crate::token::Freshness;
pub(crate) use crate::token::Stamp;

/// Logs one event of a store: with message `$token` for a token store, and for a store of
/// another credential with `$other` and the credential named.
macro_rules! event {
    ($credential:expr, $level:ident, { $($fields:tt)* }, $token:literal, $other:literal) => {
        if $credential == $crate::store::credential::Kind::TOKEN {
            tracing::$level!($($fields)* $token)
        } else {
            tracing::$level!(credential = %$credential.name, $($fields)* $other)
        }
    };
}
pub(super) use event;

/// What a store holds, as its logs, `Debug` and metrics name it, and its default size cap:
/// the core's [`TOKEN`](Kind::TOKEN); each integration names its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Kind {
    /// How logs and errors name it: `a token`, `a client certificate`.
    pub(crate) name: &'static str,
    /// Its store's handle, as a store's `Debug` shows it: `TokenStore`, `IdentityStore`.
    pub(crate) handle: &'static str,
    /// Its name in metrics: `token`, `client_certificate`.
    pub(crate) metric: &'static str,
    /// The default cap on what a source gives.
    pub(crate) max_size: usize,
}

impl Kind {
    /// A bearer token: up to 64 KiB.
    pub(crate) const TOKEN: Kind = Kind {
        name: "a token",
        handle: "TokenStore",
        metric: "token",
        max_size: crate::token::DEFAULT_MAX_SIZE,
    };
}

/// What a store holds. Implemented by [`Token`](crate::Token) and (feature `tls`) by a
/// client identity and a CA bundle.
pub(crate) trait Credential: fmt::Display + Send + Sync + Sized + 'static {
    /// What it is.
    const KIND: Kind;

    /// What turns a read into this credential, held by the store: nothing for a token;
    /// a kubeconfig's context and shape; a CA bundle's warnings already given.
    type Parser: Send + Sync + 'static;

    /// A read of the source as this credential at `now`, or why it is not one (naming
    /// `origin`).
    fn from_fetched(
        fetched: Fetched,
        parser: &Self::Parser,
        origin: &Arc<str>,
        max_size: usize,
        now: SystemTime,
    ) -> Result<Self, LoadError>;

    /// The store's stamp on it.
    fn stamp(&self) -> &Stamp;

    /// The same credential with `stamp`.
    fn stamped(self, stamp: Stamp) -> Self;

    /// Whether `other` is the same credential: a read that finds it again is no rotation.
    fn same(&self, other: &Self) -> bool;

    /// Whom it names, never a secret (none, unless it says).
    fn subject(&self) -> Option<&str> {
        None
    }

    /// Its fingerprint, safe to show.
    fn fingerprint(&self) -> String;

    /// How logs name it: a token by its short fingerprint, a certificate by its subject.
    fn logged(&self) -> impl fmt::Display + '_;

    /// How a store's `Debug` shows it (its `Display` unless it says more).
    fn shown(&self) -> String {
        self.to_string()
    }

    /// A number of its own, from its bytes, for drawing a per-credential jitter.
    fn seed(&self) -> u64;

    /// When it expires by its own word (a JWT's `exp`, a certificate's `notAfter`).
    fn own_expiry(&self) -> Option<SystemTime>;

    /// How it stands at `now` against its dates.
    fn freshness_at(&self, now: SystemTime) -> Freshness {
        match self.expires_at() {
            Some(exp) if now >= exp => Freshness::Expired,
            Some(_) => Freshness::Fresh,
            None => Freshness::Unknown,
        }
    }

    /// Moments of its own at which the source should be read again, beyond its expiry
    /// (a projected token's rotation point and the point it is overdue).
    fn own_moments(&self) -> [Option<SystemTime>; 2] {
        [None, None]
    }

    /// From when it is overdue for rotation, if it can be.
    fn overdue_at(&self) -> Option<SystemTime> {
        None
    }

    /// When it was issued, if it says.
    fn issued_at(&self) -> Option<SystemTime> {
        None
    }

    /// When it is due to be replaced: when its source asked, else its own word.
    fn refresh_at(&self) -> Option<SystemTime> {
        self.stamp().refresh_at
    }

    /// Certificates of it left out as unusable (a CA bundle's).
    fn skipped(&self) -> u64 {
        0
    }

    /// The store's generation of it.
    fn generation(&self) -> u64 {
        self.stamp().generation
    }

    /// When the store read it.
    fn loaded_at(&self) -> SystemTime {
        self.stamp().loaded_at
    }

    /// When it expires: the source's word, else its own.
    fn expires_at(&self) -> Option<SystemTime> {
        self.stamp().source_expiry.or_else(|| self.own_expiry())
    }

    /// Whether it has expired at `now`.
    fn is_expired_at(&self, now: SystemTime) -> bool {
        self.freshness_at(now) == Freshness::Expired
    }
}
