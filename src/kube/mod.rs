//! A `kube::Client` whose token reloads the moment it rotates, and whose 401s are
//! retried once with the new token (feature `kube`): from a token file, or from an exec
//! credential plugin; with feature `tls`, whose client certificate and CA bundle do too.
//!
//! kube-rs reads a `tokenFile` (the in-cluster service-account token, or a kubeconfig user's
//! `tokenFile`) again only about once a minute, and a request refused in between fails. It
//! runs an exec plugin up to three times while building a client, refreshes its token only
//! 60 s before an expiry (a token without one is never refreshed), and never on a 401.
//! [`Credentials::load`] takes the token file or the `exec` section out of the
//! [`Config`] into a [`TokenStore`](crate::TokenStore) (a
//! [`FileSource`](crate::source::FileSource) with its directory watcher, or an
//! [`ExecSource`](crate::source::ExecSource) run once per store), and
//! [`Credentials::client`] puts a [`BearerLayer`](crate::BearerLayer) with its 401 retry
//! into kube's own stack. Everything else kube does stays as it is: base URI, TLS with the
//! cluster CA, client certificates, impersonation and extra headers, the default
//! namespace, and kube's retry of 429/503/504.
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
//! Clients built from clones of one [`Credentials`] share its stores: one read per
//! rotation of the file, one exec plugin run per rotation, between them. To set a store's
//! options (a plugin's time limit), build it from [`Credentials::token_store_builder`].
//!
//! # A kubeconfig that rotates itself
//!
//! A kubeconfig mounted from a Secret that something else rewrites — Cluster API's
//! `<cluster>-kubeconfig` (its client certificate renewed), an Argo CD or Rancher cluster
//! secret, a managed service account's token — holds its credentials inline, and the whole
//! file changes at once. [`Credentials::from_kubeconfig`] follows the file: it is watched
//! like a token file and read once per change, and its inline token, client certificate
//! and CA bundle are each a store installed when it changed. A file that cannot be used
//! (half written, without the context, with a credential that does not parse) changes
//! nothing, and neither does one whose server (or any other setting than the inline
//! credentials) changed: the client goes on with what it has and each store's `status()`
//! says why; a new client from the file follows the new server.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::kube::Credentials;
//!
//! let path = "/etc/clusters/prod-eu/value"; // the Secret's key, mounted
//! let (config, credentials) = Credentials::from_kubeconfig(path, &Default::default()).await?;
//! let client = credentials.client(config)?;
//! # let _ = client; Ok(()) }
//! ```
//!
//! # Which configs get the reloading credentials
//!
//! Those whose user authenticates with a token file or an exec plugin, and nothing kube
//! would use before it. kube picks, in this order: an auth provider, username and
//! password, an inline `token`, a `tokenFile`, an exec plugin. So a config with both an
//! inline token and a token file uses the inline token, and one with a token file and an
//! exec section uses the file, as kube does. [`Credentials::token_store_builder`] returns `None`
//! for the others.
//!
//! With feature `tls`, also those whose user presents a client certificate (files, data,
//! or an exec plugin's), and those whose CA bundle is a file (`root_cert_file`: the
//! in-cluster `ca.crt`, or a kubeconfig's `certificate-authority` through [`Credentials::infer_config`]); see
//! [TLS](#tls). For every other config (an inline token alone, auth providers, and without
//! `tls` client certificates), [`Credentials::load`] loads nothing, and
//! [`Credentials::client`] returns kube's own client, unchanged; a `debug` event says why.
//! Inline credentials that rotate with their kubeconfig file are
//! [`Credentials::from_kubeconfig`]'s.
//!
//! # Exec plugins
//!
//! The plugin runs once when the store is loaded, then before its credential's
//! `expirationTimestamp` (a tenth of the lifetime ahead, at least a minute, with a
//! per-token jitter), and on a 401: once per burst of 401s, and the refused request is sent
//! again with the new token. A credential without an expiry is kept until the server
//! refuses it. Each store runs its own plugin: clients that share a store share its runs
//! (`plugin_runs ≤ rotations + 1` between them, as the `exec_rotation` example measures);
//! each [`Credentials::load`] loads stores of its own. [`ExecSource`](crate::source::ExecSource)
//! says how a plugin is run.
//!
//! - A run may take 60 s by default
//!   ([`default_fetch_timeout`](crate::source::TokenSource::default_fetch_timeout)), longer
//!   than a file read's 10 s: cloud plugins log in before they answer. A plugin that waits
//!   for the user (a browser or device-code login) may need more:
//!   [`Credentials::token_store_builder`] then `.fetch_timeout(Duration::from_secs(300))`.
//! - A relative `command` with a path separator is resolved against the kubeconfig's
//!   directory by kube's loader (`Kubeconfig::read_from`, `Config::infer`); a config built
//!   otherwise runs it relative to the working directory.
//! - A plugin whose credential holds a client certificate (`clientCertificateData`): with
//!   feature `tls` its certificate is the client's identity ([`Credentials::load`] loads
//!   it with [`IdentityStore::exec`](crate::tls::IdentityStore::exec), the plugin run once
//!   for both stores); without, [`Credentials::load`] leaves it to kube's own client,
//!   which handles certificates (and runs the plugin itself), and loading
//!   [`Credentials::token_store_builder`]'s builder fails with [`ExecError::ClientCertificate`].
//! - A plugin that fails when the store is loaded is an error ([`Error::Load`], naming the
//!   command and what went wrong); a later failure keeps the last good token.
//!
//! # Where the layer sits
//!
//! Outermost → innermost, the stack is:
//! kube's retry of 429/503/504 (when [`Config::default_retry`] is on) →
//! [`BearerLayer`](crate::BearerLayer) with its 401 retry → a `Buffer` → kube's default
//! stack (base URI, decompression, extra headers, tracing, the HTTPS client), following the
//! rules in
//! [the crate docs](crate#where-the-layer-goes). Each attempt of kube's retry thus carries
//! the token current at that moment, and each gets at most one 401 retry. Request bodies
//! that kube buffers (all of `Api`'s) are replayed on a retry. kube's `Client` wraps the
//! whole stack in its own `Buffer`, as it always does.
//!
//! # TLS
//!
//! With feature `tls` and a client identity or a CA bundle in its [`Credentials`], the
//! client is built on this crate's [`HttpsClient`](crate::tls::HttpsClient) instead of
//! kube's hyper client: the certificate it presents and the bundle it verifies the server
//! with are current at each handshake, connections made with an old identity or bundle
//! are retired on rotation, and a handshake refused for the certificate (or a 401)
//! reloads the identity and sends the request again. kube 5 reads certificates once, and
//! the in-cluster `ca.crt` again only after 60 s.
//!
//! Everything else is kube's own client, layer for layer
//! (`ClientBuilder::try_from(Config)` in kube 5), outermost → innermost:
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
//! `NO_PROXY`; the client goes through exactly that proxy.
//!
//! Runnable examples: `examples/kube_incluster.rs`, `examples/kube_kubeconfig.rs`,
//! `examples/cert_rotation.rs` and `examples/kubeconfig_rotation.rs`.
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

/// Requests that may wait for the inner stack: the bound of the `Buffer` that makes kube's
/// default stack clonable (kube's own `Client` uses the same bound).
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
    /// The user's `exec` section cannot be used (no command, an unknown `apiVersion`, ...).
    #[error(transparent)]
    Exec(#[from] ExecError),
    /// A kubeconfig file cannot be used ([`Credentials::from_kubeconfig`]): it cannot be
    /// read, does not parse, lacks the context, holds an inline credential that is not
    /// valid, or changed what a client built on it cannot follow (its server, ...). The
    /// source says which; neither holds a secret.
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

/// kube's `Config::infer`, with the CA file's path kept: [`Credentials::infer_config`].
///
/// Both read files (kube's loader reads the kubeconfig and the files it names with
/// `std::fs`, in its async fns): on the blocking pool, never a runtime thread, which a
/// mount that hangs would hold along with every task on it.
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
/// blocking pool, in the runtime's context.
async fn kube_loader<T: Send + 'static>(load: impl FnOnce() -> T + Send + 'static) -> T {
    // Only a panic of kube's, or a runtime shutting down, ends the task otherwise.
    tokio::task::spawn_blocking(load)
        .await
        .unwrap_or_else(|e| std::panic::resume_unwind(e.into_panic()))
}

/// How kube would authenticate a user. The order is kube's (`Auth::try_from(&AuthInfo)` in
/// kube-client): the first one present wins.
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
