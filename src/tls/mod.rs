//! Client certificates and CA bundles that rotate (feature `tls`): the credential beside
//! the token, on the same machinery.
//!
//! A Kubernetes client holds two credentials: a bearer token, and TLS — the client
//! certificate it presents (the kubelet's `kubelet-client-current.pem`, cert-manager's
//! `tls.crt`/`tls.key`, a kubeconfig's `client-certificate`, an exec plugin's
//! `clientCertificateData`) and the CA bundle it trusts (the in-cluster `ca.crt`, a
//! kubeconfig's `certificate-authority`). Both rotate. Here each is a store built like a
//! token store, with the same builder and options ([`StoreBuilder`](crate::StoreBuilder)):
//! the directory watcher (symlink chains, `..data` swaps, one inotify instance per
//! process), the timer (before the certificate's `notAfter`, with the token's margin and
//! jitter), single flight, keep-last-good, status and metrics.
//!
//! - [`IdentityStore`]: the certificate chain and key, each read checked (PEM, key type,
//!   the key is the certificate's, not expired); [`IdentityStore::resolver`] is a rustls
//!   `ResolvesClientCert` that answers each handshake with the current one.
//! - [`RootStore`]: the CA bundle; [`RootStore::verifier`] is a rustls
//!   `ServerCertVerifier` over the current one.
//! - [`IdentityStore::files`]: a certificate and its key in two files (one file holding
//!   both is a [`FileSource`](crate::source::FileSource)).
//! - [`RootStore::client_config`]: a rustls `ClientConfig` that trusts the current bundle,
//!   with session resumption off; set its `client_auth_cert_resolver` to
//!   [`IdentityStore::resolver`] to present the current identity too.
//! - [`HttpsClient`]: a hyper-util client with both, that retires its connections on
//!   rotation and reloads (and retries) on a refusal.
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
//! Kubernetes 1.37 made two projected-volume credentials stable that rotate in the volume
//! like the token: a **pod certificate** (`podCertificate`, KEP-4317), the key the kubelet
//! made for the pod and the chain a signer issued for it, refreshed before it expires
//! (lifetimes of 1 h to 91 days, 24 h by default); and a **cluster trust bundle**
//! (`clusterTrustBundle`, KEP-3257), a file of CA certificates the kubelet rewrites as the
//! bundle changes. The pod certificate is an [`IdentityStore`], in either of the volume's
//! layouts: one `credentialBundlePath` file (the PKCS#8 key first, then the chain, leaf
//! first) is a [`FileSource`](crate::source::FileSource); a `keyPath` beside a
//! `certificateChainPath` is [`IdentityStore::files`], which reads the two as one swap of
//! the volume (never the key of one certificate with the other). The trust bundle is a
//! [`RootStore`].
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
//! Every `keyType` a pod may ask for works with the `aws-lc-rs` provider: `RSA3072`,
//! `RSA4096`, `ECDSAP256`, `ECDSAP384`, `ECDSAP521`, `ED25519`. ring cannot sign with
//! `ECDSAP521`: with ring, such a certificate does not load, and the error says so
//! ([`CertificateError::UnsupportedKey`], naming the key's type and the `aws-lc-rs`
//! feature), rather than a client failing at its first handshake. The same holds for a
//! kubeconfig's and an exec plugin's client certificate, read by the same parser.
//!
//! # TLS providers
//!
//! No crypto provider is forced on the application. Each identity and CA bundle read, and
//! so each [`RootStore::client_config`] and [`HttpsClient`], takes rustls's provider in this
//! order:
//!
//! 1. the process default the application installed
//!    (`rustls::crypto::CryptoProvider::install_default`), when there is one;
//! 2. else the provider of this crate's feature: `ring` (on by default), else `aws-lc-rs`;
//! 3. else none: the store does not load, with
//!    [`CertificateError::NoCryptoProvider`] (never a panic).
//!
//! An application on aws-lc-rs turns off the default features and enables `aws-lc-rs`, or
//! installs its provider as the process default before loading the stores.
//!
//! # Connections retired on rotation
//!
//! A TLS connection keeps the identity it was made with: rotating the resolver's answer
//! changes only the connections made next, while a pool goes on reusing the old ones
//! (until they idle out, or the server refuses them). An [`HttpsClient`] retires them: a
//! request that starts after its identity or bundle rotated never goes out on a
//! connection made before, and requests already in flight finish where they are. Each
//! generation of the credentials gets a hyper-util pool of its own (hyper-util cannot be
//! told to drop a pooled connection after the fact), and a connection whose handshake
//! straddles a rotation is poisoned (`Connected::poison`) as the connector hands it over.
//!
//! The same for the other clients, each in the shape its users know:
//!
//! - **reqwest**: [`reqwest::TlsMiddleware`](crate::reqwest::TlsMiddleware) (features
//!   `reqwest` and `tls`), the last middleware of a reqwest-middleware client: each
//!   request goes out on a `reqwest::Client` made for the credentials current now (its own
//!   pool, built again on rotation), and a refused handshake or a 401 reloads and sends it
//!   again, as here.
//! - **tonic**: [`tonic::TlsChannel`](crate::tonic::TlsChannel) (feature `tonic`), the
//!   transport a generated client is built on instead of a `Channel`: each generation of
//!   the credentials gets an HTTP/2 connection of its own, a call that starts after a
//!   rotation goes out on the new one, and a refused handshake or a 401 reloads and sends
//!   the call again, as here.
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
//! A resumed TLS session skips both the client certificate and the server's verification:
//! a session ticket from before a rotation would let the old identity, or roots no longer
//! trusted, survive it. [`RootStore::client_config`] turns resumption off, so that every
//! connection makes a full handshake with the credentials current at that moment; a
//! `ClientConfig` of your own that uses the resolver or the verifier should do the same.

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

/// Whether `pem` is a client identity the [`IdentityStore`] would install, or why not: for
/// a source that checks what it holds before it installs it (a kubeconfig's inline
/// certificate and key, checked with the rest of the file).
#[cfg(feature = "kube")]
pub(crate) fn check_identity(pem: &[u8], now: SystemTime) -> Result<(), CertificateError> {
    <identity::Identity as source::Parse>::parse(pem, now).map(drop)
}

/// Whether `pem` is a CA bundle the [`RootStore`] would install, or why not (see
/// [`check_identity`]).
#[cfg(feature = "kube")]
pub(crate) fn check_roots(pem: &[u8], now: SystemTime) -> Result<(), CertificateError> {
    <roots::Roots as source::Parse>::parse(pem, now).map(drop)
}
