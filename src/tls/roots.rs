//! [`RootStore`], and the rustls verifier over it.

use std::fmt;
use std::sync::Arc;
use std::time::SystemTime;

use rustls::client::WebPkiServerVerifier;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime, pem::PemObject};
use rustls::{
    ClientConfig, ConfigBuilder, DigitallySignedStruct, Error as TlsError, RootCertStore,
    SignatureScheme, WantsVerifier,
};
use tokio::sync::watch;

use super::source::{Parse, Pem, PemParser, Skipped, digest};
use super::{Certificate, CertificateError};
use crate::builder::StoreBuilder;
use crate::source::TokenSource;
use crate::store::{Kind, LoadError, Stamp, Status, Store};

/// A parsed CA bundle: its verifier, its authorities, and a `ClientConfig` builder.
pub(crate) struct Roots {
    verifier: Arc<WebPkiServerVerifier>,
    certificates: Vec<Certificate>,
    config: ConfigBuilder<ClientConfig, WantsVerifier>,
}

impl fmt::Display for Roots {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.certificates.as_slice() {
            [one] => write!(f, "CA bundle of 1 certificate: {one}"),
            all => write!(f, "CA bundle of {} certificates", all.len()),
        }
    }
}

fn invalid(e: impl fmt::Display) -> CertificateError {
    CertificateError::Invalid {
        reason: e.to_string(),
    }
}

impl Parse for Roots {
    /// Up to 16 MiB: a corporate bundle with intermediates passes 1 MB.
    const KIND: Kind = Kind {
        name: "a CA bundle",
        handle: "RootStore",
        metric: "ca_bundle",
        max_size: 16 * 1024 * 1024,
    };

    /// Once every authority has.
    fn is_expired_at(&self, now: SystemTime) -> bool {
        self.certificates.iter().all(|c| c.is_expired_at(now))
    }

    /// Every certificate of the PEM, each a trust anchor; expired ones stay (rustls ignores
    /// them). One that does not parse, or that rustls refuses, is skipped, as rustls's
    /// `add_parsable_certificates` does; a PEM cut short, or with none usable, is refused.
    fn parse(pem: &[u8], _now: SystemTime) -> Result<Pem<Self>, CertificateError> {
        let ders = CertificateDer::pem_slice_iter(pem).collect::<Result<Vec<_>, _>>()?;
        if ders.is_empty() {
            return Err(CertificateError::NoCertificate);
        }
        let (provider, _) = super::provider::named()?;
        let mut roots = RootCertStore::empty();
        let (mut certificates, mut used, mut skipped) = (Vec::new(), Vec::new(), Vec::new());
        for (i, der) in ders.into_iter().enumerate() {
            let skip = |subject, error| Skipped {
                position: i + 1,
                subject,
                error,
            };
            // x509-parser first: what it refuses must not reach rustls, which is laxer.
            match Certificate::from_der(&der) {
                Err(error) => skipped.push(skip(None, error)),
                Ok(info) => match roots.add(der.clone()) {
                    Ok(()) => {
                        certificates.push(info);
                        used.push(der);
                    }
                    Err(e) => skipped.push(skip(Some(info.subject), invalid(e))),
                },
            }
        }
        if certificates.is_empty() {
            return Err(skipped.swap_remove(0).error);
        }
        let config = ClientConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(|e| invalid(format_args!("the crypto provider: {e}")))?;
        let verifier = WebPkiServerVerifier::builder_with_provider(Arc::new(roots), provider)
            .build()
            .map_err(invalid)?;
        Ok(Pem {
            value: Roots {
                verifier,
                certificates,
                config,
            },
            digest: digest(used.iter().map(|c| c.as_ref())),
            skipped,
            stamp: Stamp::default(),
        })
    }
}

/// The CA bundle a client trusts, kept current as it rotates.
///
/// A store built like a token store ([`StoreBuilder`]) on any source of PEM certificates:
/// the in-cluster `ca.crt`, a kubeconfig's `certificate-authority`.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use bearer_reload::source::FileSource;
/// use bearer_reload::tls::RootStore;
///
/// # let dir = tempfile::tempdir()?;
/// # let path = dir.path().join("ca.crt");
/// # let key = rcgen::KeyPair::generate()?;
/// # let mut ca = rcgen::CertificateParams::new(Vec::<String>::new())?;
/// # ca.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
/// # std::fs::write(&path, ca.self_signed(&key)?.pem())?;
/// let roots = RootStore::builder(FileSource::new(&path)).load().await?;
/// assert_eq!(roots.certificates().len(), 1);
/// let config = rustls::ClientConfig::builder_with_provider(
///     rustls::crypto::ring::default_provider().into(), // or the provider of your choice
/// )
/// .with_safe_default_protocol_versions()?
/// .dangerous() // a verifier of the crate's own, over rustls's WebPKI verifier
/// .with_custom_certificate_verifier(roots.verifier())
/// .with_no_client_auth();
/// # let _ = config; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RootStore {
    pub(super) store: Store<Pem<Roots>>,
}

impl fmt::Debug for RootStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RootStore")
            .field("source", &self.store.status().source)
            .field("certificates", &self.store.current().value.certificates)
            .finish_non_exhaustive()
    }
}

impl RootStore {
    /// A builder of the store on `source`, whose bytes are PEM certificates.
    pub fn builder(source: impl TokenSource) -> StoreBuilder<RootStore> {
        StoreBuilder::of(source, PemParser::default(), |store| Self { store })
    }

    /// The authorities trusted now.
    pub fn certificates(&self) -> Vec<Certificate> {
        self.store.current().value.certificates.clone()
    }

    /// The bundle's generation: 1 for the first, one more for each new bundle.
    pub fn generation(&self) -> u64 {
        self.store.generation()
    }

    /// A receiver of generation numbers, updated each time a new bundle is installed.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.store.subscribe()
    }

    /// Reads the source again; returns the authorities trusted after the read.
    ///
    /// # Errors
    ///
    /// The [`LoadError`] of the read; the last good bundle stays.
    pub async fn reload(&self) -> Result<Vec<Certificate>, LoadError> {
        Ok(self.store.reload().await?.value.certificates.clone())
    }

    /// A snapshot of the store's state, with the certificates skipped as unusable.
    pub fn status(&self) -> Status {
        self.store.status()
    }

    /// A rustls verifier that checks each server by WebPKI against the current bundle.
    pub fn verifier(&self) -> Arc<dyn ServerCertVerifier> {
        Arc::new(self.store.clone())
    }

    /// A rustls `ClientConfig` that verifies servers with the current bundle, presents no
    /// client certificate, and resumes no session
    /// ([Session resumption](super#session-resumption)); TLS 1.2 and 1.3, no ALPN.
    ///
    /// # Examples
    ///
    /// With an [`IdentityStore`](super::IdentityStore)'s client certificate:
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), bearer_reload::LoadError> {
    /// use bearer_reload::source::FileSource;
    /// use bearer_reload::tls::{IdentityStore, RootStore};
    ///
    /// let roots = RootStore::builder(FileSource::new("/pki/ca.crt")).load().await?;
    /// let identity = IdentityStore::files("/pki/tls.crt", "/pki/tls.key").load().await?;
    /// let mut config = roots.client_config();
    /// config.client_auth_cert_resolver = identity.resolver();
    /// # Ok(()) }
    /// ```
    pub fn client_config(&self) -> ClientConfig {
        let builder = self.store.current().value.config.clone();
        let mut config = builder
            .dangerous()
            .with_custom_certificate_verifier(self.verifier())
            .with_no_client_auth();
        config.resumption = rustls::client::Resumption::disabled();
        config
    }
}

impl Store<Pem<Roots>> {
    fn webpki(&self) -> Arc<WebPkiServerVerifier> {
        self.current().value.verifier.clone()
    }
}

/// Verifies with the current bundle's verifier.
impl ServerCertVerifier for Store<Pem<Roots>> {
    fn verify_server_cert(
        &self,
        end_entity: &CertificateDer<'_>,
        intermediates: &[CertificateDer<'_>],
        server_name: &ServerName<'_>,
        ocsp_response: &[u8],
        now: UnixTime,
    ) -> Result<ServerCertVerified, TlsError> {
        self.webpki()
            .verify_server_cert(end_entity, intermediates, server_name, ocsp_response, now)
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki().verify_tls12_signature(message, cert, dss)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, TlsError> {
        self.webpki().verify_tls13_signature(message, cert, dss)
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.webpki().supported_verify_schemes()
    }
}

#[cfg(test)]
mod tests;
