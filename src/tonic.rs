//! [`TlsChannel`] (feature `tonic`): a tonic transport on hyper's HTTP/2 client and rustls.
//! A `tonic::transport::Channel` keeps its connection, and so its credentials, until it
//! breaks; a generated client built on a [`TlsChannel`] sends each call with the client
//! certificate and CA bundle current when it starts.
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
