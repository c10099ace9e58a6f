//! A `kube::Client` whose token reloads the moment it rotates, and whose 401s are
//! retried once with the new token (feature `kube`): from a token file or an exec plugin;
//! with feature `tls`, whose client certificate and CA bundle do too. (kube-rs reads a
//! `tokenFile` again only about once a minute, and never reloads on a 401.)
//!
//! [`Credentials::load`] takes the token file or the `exec` section out of the [`Config`]
//! into a [`TokenStore`](crate::TokenStore), and [`Credentials::client`] puts a
//! [`BearerLayer`](crate::BearerLayer) into kube's own stack.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::kube::Credentials;
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::Api;
//!
//! // In a pod: the projected service-account token, reloaded as the kubelet rotates it.
//! // On a laptop: the kubeconfig's token file or exec plugin (`aws eks get-token`, ...).
//! let config = Credentials::infer_config().await?;
//! let client = Credentials::load(&config).await?.client(config)?;
//! let configmaps: Api<ConfigMap> = Api::default_namespaced(client);
//! for cm in configmaps.list(&Default::default()).await? {
//!     println!("{}", cm.metadata.name.unwrap_or_default());
//! }
//! # Ok(()) }
//! ```
//!
//! A kubeconfig that something else rewrites is followed by
//! [`Credentials::from_kubeconfig`].
//!
//! # Which configs get the reloading credentials
//!
//! Those whose user has a token file or an exec plugin and nothing kube would use before
//! (an auth provider, username and password, an inline `token`); with feature `tls`, also
//! those with a client certificate or a CA file. Others get kube's own client, unchanged.
//!
//! # Where the layer sits
//!
//! Outermost → innermost: kube's retry of 429/503/504 ([`Config::default_retry`]) →
//! [`BearerLayer`](crate::BearerLayer) with its 401 retry → a `Buffer` → kube's default
//! stack. Request bodies that kube buffers (all of `Api`'s) are replayed on a retry.
//!
//! # TLS
//!
//! With feature `tls` and a client identity or a CA bundle in its [`Credentials`], the
//! client is built on this crate's [`HttpsClient`](crate::tls::HttpsClient) instead of
//! kube's hyper client (which reads certificates once). Everything else is kube's own
//! client (`ClientBuilder::try_from(Config)` in kube 5), layer for layer:
//!
//! | kube's client | the client on rotating TLS credentials |
//! |---|---|
//! | base URI (`cluster_url`) | the same layer |
//! | gzip decompression (kube's `gzip`), unless `disable_compression` | the same layer, with this crate's feature `gzip` (which turns on kube's) |
//! | retry of 429/503/504 (`default_retry`) | the same layer |
//! | — | [`BearerLayer`](crate::BearerLayer) with its 401 retry, when there is a token |
//! | auth (`auth_info`: token, username and password, auth provider) | the same layer, for what the config still holds |
//! | extra headers and impersonation (`headers`, `auth_info.impersonate`) | the same layer |
//! | `TraceLayer` span `HTTP` (method, URL, status, otel fields), errors logged | the same layer |
//! | hyper-util legacy client (`default_namespace` for the `Client`) | one per generation of the credentials, in the `HttpsClient` |
//! | hyper-timeout's `TimeoutConnector` (`connect_timeout` over TCP, proxy and TLS, `read_timeout`, `write_timeout`, `reset_reader_on_write`) | the same, in the `HttpsClient` |
//! | hyper-rustls (`root_cert`, `root_cert_file`, client certificate, `tls_server_name`) | the [`RootStore`](crate::tls::RootStore), the [`IdentityStore`](crate::tls::IdentityStore), `tls_server_name` |
//! | `accept_invalid_certs` | kube's own client (certificates read once), with a `warn` event |
//! | hyper-util's `Tunnel` (`http://`, `https://` `proxy_url`, basic auth from `user:password@`) or `SocksV5` (`socks5://`) | the same connectors, with `socks5h://` too |
//! | hyper-util's `HttpConnector` | the same |
//!
//! kube fills `proxy_url` from the kubeconfig's `proxy-url`, else `HTTPS_PROXY` minus
//! `NO_PROXY`. Runnable examples: `examples/kube_*.rs`, `cert_rotation.rs`,
//! `kubeconfig_rotation.rs`.
//!
//! [`Config`]: https://docs.rs/kube/5/kube/struct.Config.html
//! [`Config::default_retry`]: https://docs.rs/kube/5/kube/struct.Config.html#structfield.default_retry

use std::path::PathBuf;

use ::kube::Config;
use ::kube::config::{AuthInfo, ExecConfig, KubeConfigOptions, Kubeconfig};

use crate::source::ExecError;
use crate::store::LoadError;

mod credentials;
#[cfg(feature = "tls")]
mod https;
mod kubeconfig;

use kubeconfig::ca_file;

pub use credentials::Credentials;

/// The bound of the `Buffer` that makes kube's default stack clonable, as kube's own.
const BUFFER: usize = 1024;

/// Why a client could not be built. Never holds a token or a key.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A credential could not be loaded (the error names its source).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// kube could not build its client from the config.
    #[error(transparent)]
    Kube(#[from] ::kube::Error),
    /// kube found no config ([`Credentials::infer_config`]).
    #[error(transparent)]
    Infer(#[from] ::kube::config::InferConfigError),
    /// The user's `exec` section cannot be used.
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A kubeconfig file cannot be used ([`Credentials::from_kubeconfig`]); the source says
    /// why, without a secret.
    #[error("kubeconfig {}", path.display())]
    Kubeconfig {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// A kubeconfig field meant to hold base64 does not.
    #[error("the kubeconfig's {field} is not base64")]
    Data {
        /// The field, as the kubeconfig spells it (`client-certificate-data`, ...).
        field: &'static str,
    },
    /// [`Credentials`] with a client identity but no CA bundle to verify the server with.
    #[error("a client identity needs a CA bundle to verify the server with: Credentials::roots")]
    NoRoots,
    /// The config's `tls_server_name` is not a DNS name or an IP address.
    #[error("tls_server_name {name:?} is not a DNS name or an IP address")]
    ServerName {
        /// The name.
        name: String,
    },
    /// The config's `proxy_url` is not an `http://`, `https://`, `socks5://` or
    /// `socks5h://` URL (kube's own client refuses it as well).
    #[error(
        "proxy {proxy}: only http://, https://, socks5:// and socks5h:// proxies are supported"
    )]
    UnsupportedProxyScheme {
        /// The proxy's URL, without its credentials.
        proxy: String,
    },
}

async fn infer_config() -> Result<Config, Error> {
    kube_loader(|| {
        let mut config = tokio::runtime::Handle::current().block_on(Config::infer())?;
        if config.root_cert_file.is_none() {
            config.root_cert_file = Kubeconfig::read()
                .ok()
                .and_then(|kubeconfig| ca_file(&kubeconfig, &KubeConfigOptions::default()));
        }
        Ok(config)
    })
    .await
}

/// Runs `load` (kube's config loader, whose async fns read files with `std::fs`) on the
/// blocking pool: a mount that hangs must not hold a runtime thread.
async fn kube_loader<T: Send + 'static>(load: impl FnOnce() -> T + Send + 'static) -> T {
    // Only a panic of kube's, or a runtime shutting down, ends the task otherwise.
    tokio::task::spawn_blocking(load)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// How kube would authenticate a user: the first present, in kube's order
/// (`Auth::try_from(&AuthInfo)` in kube-client).
#[derive(Debug, Clone, Copy)]
enum AuthInUse<'a> {
    AuthProvider,
    Basic,
    InlineToken,
    TokenFile(&'a str),
    Exec(&'a ExecConfig),
    ClientCertificate,
    None,
}

impl AuthInUse<'_> {
    fn name(&self) -> &'static str {
        match self {
            AuthInUse::AuthProvider => "auth provider",
            AuthInUse::Basic => "username and password",
            AuthInUse::InlineToken => "inline token",
            AuthInUse::TokenFile(_) => "token file",
            AuthInUse::Exec(_) => "exec plugin",
            AuthInUse::ClientCertificate => "client certificate",
            AuthInUse::None => "none",
        }
    }
}

fn auth_in_use(auth: &AuthInfo) -> AuthInUse<'_> {
    if auth.auth_provider.is_some() {
        AuthInUse::AuthProvider
    } else if auth.username.is_some() && auth.password.is_some() {
        AuthInUse::Basic
    } else if auth.token.is_some() {
        AuthInUse::InlineToken
    } else if let Some(path) = &auth.token_file {
        AuthInUse::TokenFile(path)
    } else if let Some(exec) = &auth.exec {
        AuthInUse::Exec(exec)
    } else if auth.client_certificate.is_some() || auth.client_certificate_data.is_some() {
        AuthInUse::ClientCertificate
    } else {
        AuthInUse::None
    }
}

/// kube's own body, buffered ones copied for a resend.
impl crate::body::TryCloneBody for ::kube::client::Body {
    fn try_clone_body(&self) -> Option<Self> {
        self.try_clone()
    }
}

#[cfg(test)]
mod tests;
