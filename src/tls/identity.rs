//! [`IdentityStore`]: the client certificate and key a client presents, and the rustls
//! resolver that always answers with the current one.

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

/// A parsed client identity: the chain and key rustls signs with, and the certificates'
/// facts (the leaf's first).
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

    /// The certificates in order (leaf first) and the first private key, from any PEM
    /// that holds both, in any order; refused when the key is not the leaf's, or the leaf
    /// has expired.
    fn parse(pem: &[u8], now: SystemTime) -> Result<Pem<Self>, CertificateError> {
        let chain = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?;
        if chain.is_empty() {
            return Err(CertificateError::NoCertificate);
        }
        let key = PrivateKeyDer::from_pem_slice(pem).map_err(|e| match e {
            pem::Error::NoItemsFound => CertificateError::NoKey,
            e => e.into(),
        })?;
        // Read before the provider takes the key: a key it cannot sign with is refused
        // here, naming its type, rather than at the first handshake.
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
/// Built like a token store, with the same options ([`StoreBuilder`]), on any source of
/// PEM that holds the certificate chain and its key: one file holding both (the kubelet's
/// `kubelet-client-current.pem`: a [`FileSource`](crate::source::FileSource)), two files
/// ([`files`](Self::files)), an exec plugin's `clientCertificateData` and
/// `clientKeyData` ([`exec`](Self::exec)), or a source of your own. Each read is checked:
/// the PEM parses, the key is of a type rustls signs with, the key is the certificate's
/// (a read between the writes of a certificate and its key is refused), and the
/// certificate has not expired; a read that fails any of these keeps the last good
/// identity, and the error names the source. The store reads again before `notAfter`
/// (by a tenth of the certificate's remaining life, at least a minute, with a jitter),
/// on every change of the files, and when a server refuses the identity.
///
/// [`resolver`](Self::resolver) puts it in a rustls `ClientConfig`; an
/// [`HttpsClient`](super::HttpsClient) also retires the connections made with the old one.
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
    /// A builder of the store on `source`, whose bytes are PEM holding the certificate
    /// chain and its private key.
    pub fn builder(source: impl TokenSource) -> StoreBuilder<IdentityStore> {
        StoreBuilder::of(source, PemParser::default(), |store| Self { store })
    }

    /// A builder of the store on a certificate (with its chain) and its private key in two
    /// PEM files: a kubeconfig's `client-certificate` and `client-key`, cert-manager's
    /// `tls.crt` and `tls.key`. Both are watched, and read one after the other at each
    /// fetch. A read between the writes of the two files (the new certificate beside the
    /// old key) is refused by the key check ([`CertificateError::KeyMismatch`]), the last
    /// good identity stays, and the watcher's retries (or the second file's event) read
    /// the pair again. One file that holds both (the kubelet's
    /// `kubelet-client-current.pem`) is a [`FileSource`](crate::source::FileSource) for
    /// [`builder`](Self::builder).
    pub fn files(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> StoreBuilder<Self> {
        Self::builder(PemFiles::new(cert, key))
    }

    /// A builder of the store on an exec credential plugin that returns a client
    /// certificate (`status.clientCertificateData` and `status.clientKeyData`); its
    /// `expirationTimestamp`, when earlier than the certificate's `notAfter`, is the
    /// identity's expiry.
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

    /// Reads the source again, and installs the identity if it is valid and new; returns
    /// the certificate presented after the read.
    ///
    /// # Errors
    ///
    /// The [`LoadError`] of the read (the source failed, or timed out, or its PEM is not a
    /// usable certificate and key); the last good identity stays.
    pub async fn reload(&self) -> Result<Certificate, LoadError> {
        Ok(self.store.reload().await?.value.chain[0].clone())
    }

    /// A snapshot of the store's state: the certificate's subject, fingerprint and
    /// `notAfter`, the reads, the refusals; never the key.
    pub fn status(&self) -> Status {
        self.store.status()
    }

    /// A rustls client-certificate resolver that answers every handshake with the current
    /// identity.
    ///
    /// A resumed TLS session skips the client certificate: a session made with the old
    /// identity would go on presenting it. Turn resumption off in a `ClientConfig` that
    /// uses this resolver (`config.resumption = rustls::client::Resumption::disabled()`),
    /// as [`RootStore::client_config`](super::RootStore::client_config) does.
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
