//! [`IdentityStore`], and the rustls resolver over it.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::client::ResolvesClientCert;
use rustls::pki_types::pem::{self, PemObject};
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::sign::CertifiedKey;
use rustls::{Error as TlsError, InconsistentKeys, SignatureScheme};
use tokio::sync::watch;

use super::key_type::{key_type, remedy};
use super::source::{Parse, Pem, PemFiles, PemParser, digest};
use super::{Certificate, CertificateError};
use crate::builder::StoreBuilder;
use crate::source::{ExecSource, TokenSource};
use crate::store::{Kind, LoadError, Stamp, Status, Store};

/// A parsed client identity: rustls's signing key and chain, and each certificate's facts.
pub(crate) struct Identity {
    key: Arc<CertifiedKey>,
    chain: Vec<Certificate>,
}

impl fmt::Display for Identity {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "client certificate {}", self.chain[0])
    }
}

impl Parse for Identity {
    /// A chain with intermediates, and its key: up to 1 MiB.
    const KIND: Kind = Kind {
        name: "a client certificate",
        handle: "IdentityStore",
        metric: "client_certificate",
        max_size: 1024 * 1024,
    };

    fn certificate(&self) -> Option<&Certificate> {
        Some(&self.chain[0])
    }

    /// The certificates (leaf first) and the first private key, in any order; refused when
    /// the key is not the leaf's, or the leaf has expired.
    fn parse(pem: &[u8], now: SystemTime) -> Result<Pem<Self>, CertificateError> {
        let chain = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?;
        if chain.is_empty() {
            return Err(CertificateError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
            pem::Error::NoItemsFound => CertificateError::NoKey,
            e => e.into(),
        })?;
        // Typed first, to name a key the provider cannot sign with.
        let key_type = key_type(&key);
        let (provider, name) = super::provider::named()?;
        let signer = provider.key_provider.load_private_key(key).map_err(|_| {
            CertificateError::UnsupportedKey {
                remedy: remedy(&key_type, name),
                key_type,
                provider: name,
            }
        })?;
        let facts = Result::<Vec<_>, _>::from_iter(chain.iter().map(Certificate::from_der))?;
        let digest = digest(chain.iter().map(|c| c.as_ref()));
        let key = CertifiedKey::new(chain, signer);
        match key.keys_match() {
            Ok(()) | Err(TlsError::InconsistentKeys(InconsistentKeys::Unknown)) => {}
            Err(_) => return Err(CertificateError::KeyMismatch),
        }
        if facts[0].is_expired_at(now) {
            let not_after = facts[0].not_after;
            return Err(CertificateError::Expired { not_after });
        }
        Ok(Pem {
            value: Identity {
                key: Arc::new(key),
                chain: facts,
            },
            digest,
            skipped: Vec::new(),
            stamp: Stamp::default(),
        })
    }
}

/// The client certificate (and key) a client presents, kept current as it rotates.
///
/// A store built like a token store ([`StoreBuilder`]) on one PEM file holding both (the
/// kubelet's `kubelet-client-current.pem`, a [`FileSource`](crate::source::FileSource)),
/// two files ([`files`](Self::files)), or an exec plugin ([`exec`](Self::exec)). A read
/// whose key is not the certificate's, or whose certificate has expired, is refused.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use bearer_reload::source::FileSource;
/// use bearer_reload::tls::IdentityStore;
///
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("kubelet-client-current.pem");
/// # let key = rcgen::KeyPair::generate()?;
/// # let cert = rcgen::CertificateParams::new(vec!["node-1".into()])?.self_signed(&key)?;
/// # std::fs::write(&path, format!("{}{}", cert.pem(), key.serialize_pem()))?;
/// let identity = IdentityStore::builder(FileSource::new(&path)).load().await?;
/// println!("presenting {}", identity.certificate().subject);
/// let config = rustls::ClientConfig::builder_with_provider(
///     rustls::crypto::ring::default_provider().into(),
/// )
/// .with_safe_default_protocol_versions()?
/// .with_root_certificates(rustls::RootCertStore::empty())
/// .with_client_cert_resolver(identity.resolver());
/// # let _ = config; Ok(()) }
/// ```
#[derive(Clone)]
pub struct IdentityStore {
    pub(super) store: Store<Pem<Identity>>,
}

impl fmt::Debug for IdentityStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdentityStore")
            .field("source", &self.store.status().source)
            .field("certificate", &self.store.current().value.chain[0])
            .finish_non_exhaustive()
    }
}

impl IdentityStore {
    /// A builder of the store on `source`, whose bytes are PEM holding a chain and its key.
    pub fn builder(source: impl TokenSource) -> StoreBuilder<IdentityStore> {
        StoreBuilder::of(source, PemParser::default(), |store| Self { store })
    }

    /// A builder of the store on a certificate (with its chain) and its key in two PEM
    /// files, such as cert-manager's `tls.crt` and `tls.key`. A read between the writes of
    /// the two is refused ([`CertificateError::KeyMismatch`]) and the pair read again.
    pub fn files(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> StoreBuilder<Self> {
        Self::builder(PemFiles::new(cert, key))
    }

    /// A builder of the store on an exec credential plugin's `clientCertificateData` and
    /// `clientKeyData`; its `expirationTimestamp` counts if before the `notAfter`.
    pub fn exec(plugin: ExecSource) -> StoreBuilder<IdentityStore> {
        Self::builder(plugin.client_certificate())
    }

    /// The certificate presented now (the chain's first).
    pub fn certificate(&self) -> Certificate {
        self.store.current().value.chain[0].clone()
    }

    /// The identity's generation: 1 for the first, one more for each new certificate.
    pub fn generation(&self) -> u64 {
        self.store.generation()
    }

    /// A receiver of generation numbers, updated each time a new identity is installed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.store.subscribe()
    }

    /// Reads the source again; returns the certificate presented after the read.
    ///
    /// # Errors
    ///
    /// The [`LoadError`] of the read; the last good identity stays.
    pub async fn reload(&self) -> Result<Certificate, LoadError> {
        Ok(self.store.reload().await?.value.chain[0].clone())
    }

    /// A snapshot of the store's state: the certificate's subject, fingerprint and
    /// `notAfter`, the reads, the refusals; never the key.
    pub fn status(&self) -> Status {
        self.store.status()
    }

    /// A rustls resolver that answers every handshake with the current identity: turn
    /// [session resumption](super#session-resumption) off where it is used.
    pub fn resolver(&self) -> Arc<dyn ResolvesClientCert> {
        Arc::new(self.store.clone())
    }
}

/// Answers with the current identity.
impl ResolvesClientCert for Store<Pem<Identity>> {
    fn resolve(
        &self,
        _root_hint_subjects: &[&[u8]],
        _sigschemes: &[SignatureScheme],
    ) -> Option<Arc<CertifiedKey>> {
        Some(self.current().value.key.clone())
    }

    fn has_certs(&self) -> bool {
        true
    }
}

#[cfg(test)]
mod tests;
