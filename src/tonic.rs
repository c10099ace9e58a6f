//! [`TlsChannel`]: a tonic transport whose connections present the current client
//! certificate and trust the current CA bundle, made anew when either rotates (feature
//! `tonic`).
//!
//! A `tonic::transport::Channel` keeps its HTTP/2 connection until it breaks: a client
//! certificate that rotated is presented only after the server has refused the old one
//! long enough to break it, and a CA bundle that rotated is never looked at again. A
//! [`TlsChannel`] is what a generated client is built on instead
//! (`HealthClient::new(channel)`): its calls go out on a connection made with the
//! credentials current when they start, and a refusal reloads them and sends the call
//! again, as [`HttpsClient`](crate::tls::HttpsClient) does for hyper-util. tonic's own
//! transport is not used (nor its TLS features): the connection is hyper's HTTP/2 client
//! over rustls, with the provider [the `tls` module](crate::tls#tls-providers) says.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! use bearer_reload::classify::GrpcUnauthenticated;
//! use bearer_reload::tonic::TlsChannel;
//! use bearer_reload::tls::{IdentityStore, RootStore};
//! use bearer_reload::source::FileSource;
//! use bearer_reload::{BearerLayer, TokenStore};
//! use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
//! use tower::ServiceBuilder;
//!
//! // A SPIFFE workload's files from spiffe-helper, and a token for the service.
//! let identity = IdentityStore::files("/run/spiffe/svid.pem", "/run/spiffe/svid_key.pem")
//!     .load()
//!     .await?;
//! let roots = RootStore::builder(FileSource::new("/run/spiffe/bundle.pem")).load().await?;
//! let token = TokenStore::builder(FileSource::new("/run/secrets/token")).load().await?;
//!
//! let channel = TlsChannel::new("https://inventory.internal:8443".parse()?, roots)?
//!     .identity(identity);
//! let authenticated = ServiceBuilder::new()
//!     .layer(BearerLayer::new(token).classifier(GrpcUnauthenticated))
//!     .service(channel);
//! let mut health = HealthClient::new(authenticated);
//! health.check(HealthCheckRequest::default()).await?;
//! # Ok(()) }
//! ```

mod channel;
mod connection;

pub use channel::TlsChannel;
