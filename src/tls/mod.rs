//! Client certificates ([`IdentityStore`]) and CA bundles ([`RootStore`]) that rotate
//! (feature `tls`), in stores built like token stores, a rustls resolver and verifier
//! over them, and [`HttpsClient`], a hyper-util client that uses both.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bearer_reload::source::FileSource;
//! use bearer_reload::tls::{HttpsClient, IdentityStore, RootStore};
//! use bearer_reload::{BearerLayer, TokenStore};
//! use http_body_util::Empty;
//! use tower::{ServiceBuilder, ServiceExt};
//!
//! // cert-manager's Secret in a projected volume, and the cluster's CA.
//! let identity = IdentityStore::files("/tls/tls.crt", "/tls/tls.key").load().await?;
//! let sa = "/var/run/secrets/kubernetes.io/serviceaccount";
//! let roots = RootStore::builder(FileSource::new(format!("{sa}/ca.crt"))).load().await?;
//! let token = TokenStore::builder(FileSource::new(format!("{sa}/token"))).load().await?;
//!
//! let https = HttpsClient::new(roots).identity(identity.clone());
//! let client = ServiceBuilder::new()
//!     .layer(BearerLayer::new(token).retry_unauthorized())
//!     .service(https);
//! let response = client
//!     .oneshot(http::Request::get("https://kubernetes.default.svc/version").body(Empty::<bytes::Bytes>::new())?)
//!     .await?;
//! println!("{} as {}", response.status(), identity.certificate().subject);
//! # Ok(()) }
//! ```
//!
//! # Pod certificates and cluster trust bundles
//!
//! A projected `podCertificate` (KEP-4317) is an [`IdentityStore`]: its
//! `credentialBundlePath` file through a [`FileSource`](crate::source::FileSource), or its
//! `keyPath` and `certificateChainPath` through [`IdentityStore::files`]. A
//! `clusterTrustBundle` (KEP-3257) is a [`RootStore`]. A key the provider cannot sign with
//! (`ECDSAP521` under ring) does not load: [`CertificateError::UnsupportedKey`].
//!
//! ```yaml
//! volumes:
//! - name: pod-cert
//!   projected:
//!     sources:
//!     - podCertificate:
//!         signerName: example.com/pod-signer
//!         keyType: ECDSAP256
//!         credentialBundlePath: credentialbundle.pem
//!     - clusterTrustBundle:
//!         signerName: example.com/pod-signer
//!         labelSelector: {}
//!         path: trust-bundle.pem
//! ```
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bearer_reload::source::FileSource;
//! use bearer_reload::tls::{HttpsClient, IdentityStore, RootStore};
//! use bytes::Bytes;
//! use http_body_util::Empty;
//! # let volume = tempfile::tempdir()?;
//! # let signer_key = rcgen::KeyPair::generate()?;
//! # let mut signer = rcgen::CertificateParams::new(Vec::<String>::new())?;
//! # signer.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
//! # signer.distinguished_name.push(rcgen::DnType::CommonName, "example.com/pod-signer");
//! # let signer = signer.self_signed(&signer_key)?;
//! # let key = rcgen::KeyPair::generate()?;
//! # let mut pod = rcgen::CertificateParams::new(Vec::<String>::new())?;
//! # pod.distinguished_name.push(rcgen::DnType::CommonName, "pod");
//! # let pod = pod.signed_by(&key, &signer, &signer_key)?;
//! # let write = |name: &str, pem: String| std::fs::write(volume.path().join(name), pem);
//! # write("credentialbundle.pem", format!("{}{}", key.serialize_pem(), pod.pem()))?;
//! # write("key.pem", key.serialize_pem())?;
//! # write("chain.pem", pod.pem())?;
//! # write("trust-bundle.pem", signer.pem())?;
//!
//! // The volume above, mounted at /var/run/pod-cert.
//! # let dir = volume.path();
//! # /*
//! let dir = std::path::Path::new("/var/run/pod-cert");
//! # */
//! let identity = IdentityStore::builder(FileSource::new(dir.join("credentialbundle.pem")))
//!     .load()
//!     .await?;
//! let roots = RootStore::builder(FileSource::new(dir.join("trust-bundle.pem")))
//!     .load()
//!     .await?;
//! assert_eq!(identity.certificate().issuer, "CN=example.com/pod-signer");
//! assert_eq!(roots.certificates()[0].subject, "CN=example.com/pod-signer");
//! let client = HttpsClient::<Empty<Bytes>>::new(roots).identity(identity.clone());
//!
//! // The other layout: `keyPath: key.pem` and `certificateChainPath: chain.pem`.
//! let same = IdentityStore::files(dir.join("chain.pem"), dir.join("key.pem")).load().await?;
//! assert_eq!(same.certificate(), identity.certificate());
//! # let _ = client; Ok(()) }
//! ```
//!
//! # TLS providers
//!
//! Each identity and bundle read takes rustls's crypto provider in this order:
//!
//! 1. the process default the application installed
//!    (`rustls::crypto::CryptoProvider::install_default`);
//! 2. else that of this crate's feature: `ring` (the default), else `aws-lc-rs`;
//! 3. else none, and the store does not load ([`CertificateError::NoCryptoProvider`]).
//!
//! # Connections retired on rotation
//!
//! A TLS connection keeps the credentials it was made with. [`HttpsClient`],
//! [`reqwest::TlsMiddleware`](crate::reqwest::TlsMiddleware) and
//! [`tonic::TlsChannel`](crate::tonic::TlsChannel) never send a request that starts after
//! a rotation on a connection made before it.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bearer_reload::reqwest::TlsMiddleware;
//! use bearer_reload::source::FileSource;
//! use bearer_reload::tls::{IdentityStore, RootStore};
//! use bearer_reload::tonic::TlsChannel;
//!
//! let identity = IdentityStore::files("/tls/tls.crt", "/tls/tls.key").load().await?;
//! let roots = RootStore::builder(FileSource::new("/tls/ca.crt")).load().await?;
//!
//! // reqwest: the middleware last, on the client it makes (no process default provider).
//! let tls = TlsMiddleware::new(roots.clone()).identity(identity.clone());
//! let client = reqwest_middleware::ClientBuilder::new(tls.client()?)
//!     .with(tls)
//!     .build();
//! let health = client.get("https://vault.internal:8200/v1/sys/health").send().await?;
//!
//! // tonic: any generated client over the channel.
//! let channel = TlsChannel::new("https://etcd.internal:2379".parse()?, roots)?.identity(identity);
//! let mut grpc = tonic_health::pb::health_client::HealthClient::new(channel);
//! let serving = grpc.check(tonic_health::pb::HealthCheckRequest::default()).await?;
//! # let _ = (health, serving); Ok(()) }
//! ```
//!
//! # Session resumption
//!
//! A resumed TLS session skips the client certificate and the server's verification, so
//! old credentials would outlive a rotation. [`RootStore::client_config`] turns resumption
//! off; a `ClientConfig` of your own with the resolver or the verifier should too.

mod certificate;
pub(crate) mod client;
pub(crate) mod connect;
pub(crate) mod error;
mod identity;
mod key_type;
mod provider;
pub(crate) mod refusal;
mod roots;
mod source;
pub(crate) mod stores;

pub use certificate::Certificate;
pub use client::HttpsClient;
pub use error::CertificateError;
#[cfg(feature = "tonic")]
pub(crate) use error::UriError;
pub use identity::IdentityStore;
pub use roots::RootStore;
#[cfg(feature = "kube")]
use std::time::SystemTime;

/// Whether `pem` is an identity the [`IdentityStore`] would install (a kubeconfig's).
#[cfg(feature = "kube")]
pub(crate) fn check_identity(pem: &[u8], now: SystemTime) -> Result<(), CertificateError> {
    <identity::Identity as source::Parse>::parse(pem, now).map(drop)
}

/// Whether `pem` is a CA bundle the [`RootStore`] would install.
#[cfg(feature = "kube")]
pub(crate) fn check_roots(pem: &[u8], now: SystemTime) -> Result<(), CertificateError> {
    <roots::Roots as source::Parse>::parse(pem, now).map(drop)
}
