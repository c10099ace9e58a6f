//! [`Snapshot`]: the chosen context's inline credentials in use, checked, as the store of
//! the file holds them; and [`Shape`], what of the context a client holds to for its life.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use secrecy::ExposeSecret;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use super::read::{Problem, Selected};
use crate::kube::{AuthInUse, auth_in_use};
use crate::source::Fetched;
use crate::store::{Credential, Kind, LoadError, Stamp};
use crate::token::Token;

/// A token or a private key: never shown, wiped with the last snapshot that holds it.
pub(super) type Secret = Arc<Zeroizing<Vec<u8>>>;

/// Which of a context's credentials are inline, each a store of its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct Inline {
    /// The user's `token`, when kube would use it.
    pub(crate) token: bool,
    /// The user's `client-certificate-data` and `client-key-data`, both (feature `tls`).
    pub(crate) identity: bool,
    /// The cluster's `certificate-authority-data` (feature `tls`), if verified.
    pub(crate) roots: bool,
}

impl Inline {
    pub(crate) fn any(self) -> bool {
        self.token || self.identity || self.roots
    }

    pub(super) fn of(selected: &Selected) -> Self {
        let user = &selected.user;
        let cluster = &selected.cluster;
        let tls = cfg!(feature = "tls") && cluster.insecure_skip_tls_verify != Some(true);
        Self {
            token: matches!(auth_in_use(user), AuthInUse::InlineToken),
            identity: tls
                && user.client_certificate_data.is_some()
                && user.client_key_data.is_some(),
            roots: tls && cluster.certificate_authority_data.is_some(),
        }
    }
}

/// What a client built on the file holds to for its life: the context, its server, a
/// digest of every other setting of its cluster and user, and which credentials are inline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Shape {
    pub(super) context: String,
    cluster: String,
    user: String,
    server: Option<String>,
    settings: [u8; 32],
    pub(super) inline: Inline,
}

impl Shape {
    pub(super) fn of(selected: &Selected) -> Self {
        let inline = Inline::of(selected);
        let mut cluster = selected.cluster.clone();
        let mut user = selected.user.clone();
        cluster.server = None;
        // The inline credentials followed are left out: they change as they rotate.
        cluster.certificate_authority_data.take_if(|_| inline.roots);
        user.token.take_if(|_| inline.token);
        user.client_certificate_data.take_if(|_| inline.identity);
        user.client_key_data.take_if(|_| inline.identity);
        // Hashed as it is written, never held whole: it holds secrets. These types always
        // serialize, and the same way each time.
        let mut hash = Sha256::new();
        let _ = serde_json::to_writer(Hashing(&mut hash), &(&cluster, &user));
        Self {
            context: selected.context.clone(),
            cluster: selected.cluster_name.clone(),
            user: selected.user_name.clone(),
            server: selected.cluster.server.clone(),
            settings: hash.finalize().into(),
            inline,
        }
    }

    /// What of `self` is not as `first`, in words (no secret: names and the server).
    pub(super) fn change_from(&self, first: &Shape) -> Option<String> {
        if self == first {
            return None;
        }
        let show = |s: &Option<String>| s.clone().unwrap_or_else(|| "(none)".to_owned());
        Some(
            if self.cluster != first.cluster || self.user != first.user {
                format!(
                    "context {:?} now names cluster {:?} and user {:?}, not {:?} and {:?}",
                    self.context, self.cluster, self.user, first.cluster, first.user
                )
            } else if self.server != first.server {
                format!(
                    "the server of cluster {:?} changed from {} to {}",
                    self.cluster,
                    show(&first.server),
                    show(&self.server)
                )
            } else if self.inline != first.inline {
                format!(
                    "which credentials of context {:?} are inline changed ({:?}, was {:?})",
                    self.context, self.inline, first.inline
                )
            } else {
                format!(
                    "settings of cluster {:?} or user {:?} other than their inline credentials \
                 changed (files, plugins, TLS or proxy settings, or an inline credential \
                 this build does not follow)",
                    self.cluster, self.user
                )
            },
        )
    }
}

/// The chosen context's inline credentials in use, checked: what the file's store holds.
#[derive(Clone)]
pub(crate) struct Snapshot {
    pub(super) shape: Shape,
    pub(super) token: Option<Secret>,
    pub(super) identity: Option<Secret>,
    pub(super) roots: Option<Arc<[u8]>>,
    /// Of every inline credential in use: the same for the same credentials.
    digest: [u8; 32],
    stamp: Stamp,
}

impl fmt::Display for Snapshot {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "kubeconfig context {:?} ({}, credentials {})",
            self.shape.context,
            self.shape.server.as_deref().unwrap_or("no server"),
            self.fingerprint()
        )
    }
}

impl Credential for Snapshot {
    /// Room for a CA bundle inline.
    const KIND: Kind = Kind {
        name: "a kubeconfig",
        handle: "KubeconfigStore",
        metric: "kubeconfig",
        max_size: 16 * 1024 * 1024,
    };

    type Parser = super::KubeconfigParser;

    fn from_fetched(
        fetched: Fetched,
        parser: &super::KubeconfigParser,
        origin: &Arc<str>,
        _max_size: usize,
        now: SystemTime,
    ) -> Result<Self, LoadError> {
        parser
            .parse(fetched.bytes(), now)
            .map_err(|error| LoadError::Fetch {
                origin: origin.clone(),
                error: Arc::new(error),
            })
    }

    fn stamp(&self) -> &Stamp {
        &self.stamp
    }

    fn stamped(mut self, stamp: Stamp) -> Self {
        self.stamp = stamp;
        self
    }

    fn same(&self, other: &Self) -> bool {
        self.digest == other.digest
    }

    fn fingerprint(&self) -> String {
        let first: [u8; 4] = self.digest[..4].try_into().expect("4 bytes");
        format!("{:08x}", u32::from_be_bytes(first))
    }

    fn logged(&self) -> impl fmt::Display + '_ {
        self
    }

    fn seed(&self) -> u64 {
        u64::from_be_bytes(self.digest[..8].try_into().expect("8 bytes"))
    }

    fn own_expiry(&self) -> Option<SystemTime> {
        None
    }
}

pub(super) fn snapshot(selected: &Selected, now: SystemTime) -> Result<Snapshot, Problem> {
    let shape = Shape::of(selected);
    let (user, user_name) = (&selected.user, &selected.user_name);
    let (cluster, cluster_name) = (&selected.cluster, &selected.cluster_name);
    let decode = |data: &str, field: &'static str, owner: String| {
        STANDARD
            .decode(data.trim())
            .map_err(|_| Problem::Base64 { field, owner })
    };
    let token = match &user.token {
        Some(token) if shape.inline.token => {
            let bytes = token.expose_secret().as_bytes();
            Token::parse(bytes).map_err(|source| Problem::Token {
                user: user_name.clone(),
                source,
            })?;
            Some(Arc::new(Zeroizing::new(bytes.to_vec())))
        }
        _ => None,
    };
    let identity = match (&user.client_certificate_data, &user.client_key_data) {
        (Some(cert), Some(key)) if shape.inline.identity => {
            let owner = || format!("user {user_name}");
            let cert = decode(cert, "client-certificate-data", owner())?;
            let key = decode(key.expose_secret(), "client-key-data", owner())?;
            let key = Zeroizing::new(key);
            // Sized at once by `concat`: a Vec's growth would free a copy of the key unwiped.
            let pem = Zeroizing::new([&cert[..], b"\n", &key[..]].concat());
            #[cfg(feature = "tls")]
            crate::tls::check_identity(&pem, now).map_err(|source| Problem::Identity {
                user: user_name.clone(),
                source,
            })?;
            Some(Arc::new(pem))
        }
        _ => None,
    };
    let roots = match &cluster.certificate_authority_data {
        Some(data) if shape.inline.roots => {
            let owner = format!("cluster {cluster_name}");
            let pem = decode(data, "certificate-authority-data", owner)?;
            #[cfg(feature = "tls")]
            crate::tls::check_roots(&pem, now).map_err(|source| Problem::Roots {
                cluster: cluster_name.clone(),
                source,
            })?;
            Some(Arc::from(pem))
        }
        _ => None,
    };
    #[cfg(not(feature = "tls"))]
    let _ = now;
    let digest = digest([
        token.as_ref().map_or(&[][..], |s| &s[..]),
        identity.as_ref().map_or(&[][..], |s| &s[..]),
        roots.as_deref().unwrap_or_default(),
    ]);
    Ok(Snapshot {
        shape,
        token,
        identity,
        roots,
        digest,
        stamp: Stamp::default(),
    })
}

/// A writer that feeds what is written to a hash, and keeps nothing.
struct Hashing<'a>(&'a mut Sha256);

impl std::io::Write for Hashing<'_> {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.update(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// SHA-256 of `parts`, each after its length: the same for the same parts.
fn digest<const N: usize>(parts: [&[u8]; N]) -> [u8; 32] {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update((part.len() as u64).to_be_bytes());
        hash.update(part);
    }
    hash.finalize().into()
}
