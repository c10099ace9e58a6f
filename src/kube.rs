//! A `kube::Client` whose token reloads the moment it rotates, and whose 401s are
//! retried once with the new token (feature `kube`): from a token file, or from an exec
//! credential plugin.
//!
//! kube-rs reads a `tokenFile` (the in-cluster service-account token, or a kubeconfig user's
//! `tokenFile`) again only about once a minute, and a request refused in between fails. It
//! runs an exec plugin up to three times while building a client, refreshes its token only
//! 60 s before an expiry (a token without one is never refreshed), and never on a 401. The
//! client built here takes the token file or the `exec` section out of the [`Config`],
//! loads it into a [`TokenStore`] (a [`FileSource`] with its directory watcher, or an
//! [`ExecSource`] run once per client build), and puts a [`BearerLayer`] with
//! [`RetryUnauthorized`] into kube's own stack. Everything else kube does stays as it is:
//! base URI, TLS with the cluster CA, client certificates, impersonation and extra
//! headers, the default namespace, and kube's retry of 429/503/504.
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use k8s_openapi::api::core::v1::ConfigMap;
//! use kube::Api;
//!
//! // In a pod: the projected service-account token, reloaded as the kubelet rotates it.
//! // On a laptop: the kubeconfig's token file or exec plugin (`aws eks get-token`, ...).
//! let client = bearer_reload::kube::infer().await?;
//! let configmaps: Api<ConfigMap> = Api::default_namespaced(client);
//! for cm in configmaps.list(&Default::default()).await? {
//!     println!("{}", cm.metadata.name.unwrap_or_default());
//! }
//! # Ok(()) }
//! ```
//!
//! With options, and the store back for health checks:
//!
//! ```no_run
//! # async fn run() -> Result<(), Box<dyn std::error::Error>> {
//! use std::time::Duration;
//! use bearer_reload::Options;
//! use bearer_reload::kube::{ClientOptions, ReloadingClient, client_with};
//!
//! let config = kube::Config::infer().await?;
//! let options = Options::new().refresh_interval(Some(Duration::from_secs(30)));
//! let ReloadingClient { client, store, .. } = client_with(config, options).await?;
//! if let Some(store) = &store {
//!     println!("token {} from {}", store.current(), store.status().source);
//! }
//! # let _ = client; Ok(()) }
//! ```
//!
//! # Which configs get the reloading token
//!
//! Those whose user authenticates with a token file or an exec plugin, and nothing kube
//! would use before it. kube picks, in this order: an auth provider, username and
//! password, an inline `token`, a `tokenFile`, an exec plugin. So a config with both an
//! inline token and a token file uses the inline token, and one with a token file and an
//! exec section uses the file, as kube does. For every other config (inline tokens, client
//! certificates alone, auth providers), kube's own client is returned unchanged, and a
//! `debug` event says why. Client certificates given alongside a token file or a plugin
//! are used for TLS as kube uses them.
//!
//! # Exec plugins
//!
//! The plugin runs once when the client is built (and not at all when a live client of
//! this process already runs the same plugin with the same options: they share one
//! store), then before its credential's `expirationTimestamp` (a tenth of the lifetime
//! ahead, at least a minute, with a per-token jitter), and on a 401: once per burst of
//! 401s, and the refused request is sent again with the new token. A credential without an
//! expiry is kept until the server refuses it. [`source::exec`](crate::source::exec) says
//! how a plugin is run.
//!
//! - A run may take 60 s by default
//!   ([`default_read_timeout`](crate::source::TokenSource::default_read_timeout)), longer
//!   than a file read's 10 s: cloud plugins log in before they answer. A plugin that waits
//!   for the user (a browser or device-code login) may need more:
//!   `Options::new().read_timeout(Duration::from_secs(300))`.
//! - A relative `command` with a path separator is resolved against the kubeconfig's
//!   directory by kube's loader (`Kubeconfig::read_from`, `Config::infer`); a config built
//!   otherwise runs it relative to the working directory.
//! - A plugin whose credential holds a client certificate (`clientCertificateData`) is out
//!   of scope: the config gets kube's own client, which handles certificates (and then runs
//!   the plugin itself).
//! - A plugin that fails when the client is built is an error ([`Error::Load`], naming the
//!   command and what went wrong); a later failure keeps the last good token.
//!
//! # Where the layer sits
//!
//! Outermost → innermost, the stack is:
//! kube's retry of 429/503/504 (when [`Config::default_retry`] is on) → [`BearerLayer`]
//! with its 401 retry → a `Buffer` → kube's default stack (base URI, decompression,
//! extra headers, tracing, the HTTPS client), following the rules in
//! [the crate docs](crate#where-the-layer-goes). Each attempt of kube's retry thus carries
//! the token current at that moment, and each gets at most one 401 retry. Request bodies
//! that kube buffers (all of `Api`'s) are replayed on a retry. kube's `Client` wraps the
//! whole stack in its own `Buffer`, as it always does.
//!
//! Runnable examples: `examples/kube_incluster.rs` and `examples/kube_kubeconfig.rs`.
//!
//! [`Config`]: https://docs.rs/kube/5/kube/struct.Config.html
//! [`Config::default_retry`]: https://docs.rs/kube/5/kube/struct.Config.html#structfield.default_retry

use std::fmt;
use std::path::PathBuf;

use ::kube::client::retry::RetryPolicy;
use ::kube::client::{Body, ClientBuilder};
use ::kube::config::{AuthInfo, ExecConfig, InferConfigError};
use ::kube::{Client, Config};
use tower::ServiceBuilder;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;
use tower::util::Either;

use crate::builder::Options;
use crate::layer::{BearerLayer, RetryUnauthorized};
use crate::source::{ExecError, ExecSource, FileSource};
use crate::store::{LoadError, TokenStore};

/// Requests that may wait for the inner stack: the bound of the `Buffer` that makes kube's
/// default stack clonable (kube's own `Client` uses the same bound).
const BUFFER: usize = 1024;

/// Why a client could not be built. Never holds a token.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The token could not be loaded (the error names its source).
    #[error(transparent)]
    Load(#[from] LoadError),
    /// kube could not build its client from the config.
    #[error(transparent)]
    Kube(#[from] ::kube::Error),
    /// No kubeconfig and no in-cluster environment was found ([`infer`]).
    #[error(transparent)]
    InferConfig(#[from] InferConfigError),
    /// The user's `exec` section cannot be used (no command, an unknown `apiVersion`, ...).
    #[error(transparent)]
    Exec(#[from] ExecError),
}

/// Whether a request refused with 401 is sent once more with a newer token.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Retry {
    /// Sent once more when the reload found a newer token. The default.
    #[default]
    Once,
    /// Never sent again; the 401 still reloads the token, for the requests that follow.
    Off,
}

/// How the client's token store is built ([`Options`], the same options as every store's),
/// and whether 401s are retried.
///
/// The defaults are the store's: a token file's directory is watched and the file re-read
/// every 60 s regardless, an exec plugin is run again before its token expires, tokens up
/// to 64 KiB are accepted, a read may take 10 s (a plugin run 60 s), and 401s to one token
/// trigger at most one reload a second; a request refused with 401 is sent once more when
/// the reload found a new token.
///
/// ```
/// use std::time::Duration;
/// use bearer_reload::Options;
/// use bearer_reload::kube::{ClientOptions, Retry};
///
/// let options = ClientOptions::new()
///     .store(Options::new().refresh_interval(Some(Duration::from_secs(30))))
///     .retry(Retry::Off);
/// # let _ = options;
/// ```
#[derive(Debug, Clone, Default)]
pub struct ClientOptions {
    store: Options,
    retry: Retry,
}

impl ClientOptions {
    /// The defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// How the token store is built.
    pub fn store(mut self, options: Options) -> Self {
        self.store = options;
        self
    }

    /// Whether 401s are retried (default [`Retry::Once`]).
    pub fn retry(mut self, retry: Retry) -> Self {
        self.retry = retry;
        self
    }
}

impl From<Options> for ClientOptions {
    fn from(store: Options) -> Self {
        Self::new().store(store)
    }
}

/// What [`client_with`] built: the client, and the store of its token when it has one.
///
/// ```no_run
/// # async fn run(config: kube::Config) -> Result<(), bearer_reload::kube::Error> {
/// use bearer_reload::kube::{ClientOptions, ReloadingClient, client_with};
///
/// let ReloadingClient { client, store, .. } = client_with(config, ClientOptions::new()).await?;
/// # let _ = (client, store); Ok(()) }
/// ```
#[non_exhaustive]
pub struct ReloadingClient {
    /// The client; clone it freely, every clone shares the token.
    pub client: Client,
    /// The store the client's token comes from (its token file or exec plugin), for
    /// [`status`](TokenStore::status) and [`subscribe`](TokenStore::subscribe); `None`
    /// when the config uses neither and the client is kube's own.
    pub store: Option<TokenStore>,
}

impl ReloadingClient {
    /// The client alone. The store's background refresh lives on as long as the client
    /// does.
    pub fn into_client(self) -> Client {
        self.client
    }
}

impl From<ReloadingClient> for Client {
    fn from(built: ReloadingClient) -> Self {
        built.client
    }
}

impl fmt::Debug for ReloadingClient {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReloadingClient")
            .field("default_namespace", &self.client.default_namespace())
            .field("store", &self.store)
            .finish()
    }
}

/// `kube::Config::infer()` then [`client`]: in a pod (or with a kubeconfig), the one line
/// an app needs.
///
/// Fails when there is neither a kubeconfig nor an in-cluster environment, when the token
/// file cannot be loaded or the exec plugin gives no token, or when kube cannot build its
/// client.
pub async fn infer() -> Result<Client, Error> {
    let config = Config::infer().await?;
    client(config).await
}

/// A [`kube::Client`] for `config` whose token file is reloaded on every change (or whose
/// exec plugin is run again before its token expires and on a 401) and whose 401s are
/// retried once, with the default [`ClientOptions`].
///
/// Configs that use neither a token file nor an exec plugin get kube's own client,
/// unchanged (see the [module docs](self)). Must be called within a tokio runtime.
///
/// [`kube::Client`]: https://docs.rs/kube/5/kube/struct.Client.html
pub async fn client(config: Config) -> Result<Client, Error> {
    Ok(client_with(config, ClientOptions::new()).await?.client)
}

/// [`client`] with [`ClientOptions`] (or just the store's [`Options`]), returning the
/// token's store along with the client.
///
/// Fails, naming the path, when the token file is missing or does not hold a valid token
/// (kube's own client would fail on every request instead); naming the command when the
/// exec plugin cannot be run or gives no token.
pub async fn client_with(
    mut config: Config,
    options: impl Into<ClientOptions>,
) -> Result<ReloadingClient, Error> {
    let options = options.into();
    let store = match auth_in_use(&config.auth_info) {
        AuthInUse::TokenFile(path) => {
            let path = PathBuf::from(path);
            let store = options.store.source(FileSource::new(&path)).load().await?;
            tracing::debug!(
                path = %path.display(),
                token = %store.current(),
                "kube client with a reloading token file"
            );
            Some(store)
        }
        AuthInUse::Exec(exec) => exec_store(exec, options.store).await?,
        other => {
            tracing::debug!(
                auth = other.name(),
                "kube config authenticates with neither a token file nor an exec plugin: \
                 using kube's own client"
            );
            None
        }
    };
    let Some(store) = store else {
        return Ok(ReloadingClient {
            client: Client::try_from(config)?,
            store: None,
        });
    };

    // kube's auth layer sits closer to the wire than ours and would overwrite the header:
    // with the token file and the plugin gone it has nothing to do, and kube never runs
    // the plugin (it would, up to three times, while building its client).
    config.auth_info.token_file = None;
    config.auth_info.exec = None;
    // kube's retry goes outside our layer, so that each attempt gets the current token.
    let default_retry = std::mem::replace(&mut config.default_retry, false);
    let layer = BearerLayer::new(store.clone());
    let bearer = match options.retry {
        Retry::Once => Either::Left(layer.retry_unauthorized(RetryUnauthorized::new())),
        Retry::Off => Either::Right(layer),
    };
    let stack = ServiceBuilder::new()
        .option_layer(default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
        .layer(bearer)
        .layer(BufferLayer::<http::Request<Body>>::new(BUFFER));
    let client = ClientBuilder::try_from(config)?.with_layer(&stack).build();
    Ok(ReloadingClient {
        client,
        store: Some(store),
    })
}

/// The store of an exec plugin's token: the plugin runs once here. `None` when its
/// credential is a client certificate, which kube's own client handles.
async fn exec_store(exec: &ExecConfig, options: Options) -> Result<Option<TokenStore>, Error> {
    let source = ExecSource::try_from(exec)?;
    let command = source.command().display().to_string();
    match options.source(source).load().await {
        Ok(store) => {
            tracing::debug!(
                %command,
                token = %store.current(),
                "kube client with a reloading exec plugin token"
            );
            Ok(Some(store))
        }
        Err(e) if matches!(e.downcast_ref(), Some(ExecError::ClientCertificate { .. })) => {
            tracing::debug!(
                %command,
                "exec plugin returned a client certificate: using kube's own client"
            );
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
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
        return AuthInUse::AuthProvider;
    }
    if auth.username.is_some() && auth.password.is_some() {
        return AuthInUse::Basic;
    }
    if auth.token.is_some() {
        return AuthInUse::InlineToken;
    }
    if let Some(path) = &auth.token_file {
        return AuthInUse::TokenFile(path);
    }
    if let Some(exec) = &auth.exec {
        return AuthInUse::Exec(exec);
    }
    if auth.client_certificate.is_some() || auth.client_certificate_data.is_some() {
        return AuthInUse::ClientCertificate;
    }
    AuthInUse::None
}

#[cfg(test)]
mod tests {
    use super::*;

    fn in_use(auth: &AuthInfo) -> &'static str {
        auth_in_use(auth).name()
    }

    #[test]
    fn kubes_precedence_decides_which_auth_is_used() {
        let file = AuthInfo {
            token_file: Some("/t".into()),
            ..Default::default()
        };
        assert!(matches!(auth_in_use(&file), AuthInUse::TokenFile("/t")));
        let inline = AuthInfo {
            token: Some("x".to_string().into()),
            ..file.clone()
        };
        assert_eq!(in_use(&inline), "inline token");
        let basic = AuthInfo {
            username: Some("u".into()),
            password: Some("p".to_string().into()),
            ..file.clone()
        };
        assert_eq!(in_use(&basic), "username and password");
        let user_only = AuthInfo {
            username: Some("u".into()),
            ..file.clone()
        };
        assert!(matches!(
            auth_in_use(&user_only),
            AuthInUse::TokenFile("/t")
        ));
        assert_eq!(in_use(&AuthInfo::default()), "none");

        // An exec plugin is used only when nothing before it is set: a token file wins.
        let exec = ExecConfig {
            command: Some("aws".into()),
            ..ExecConfig::default()
        };
        let plugin = AuthInfo {
            exec: Some(exec.clone()),
            client_certificate_data: Some("cert".into()),
            ..AuthInfo::default()
        };
        assert!(matches!(auth_in_use(&plugin), AuthInUse::Exec(e) if e.command == exec.command));
        let both = AuthInfo {
            token_file: Some("/t".into()),
            ..plugin.clone()
        };
        assert!(matches!(auth_in_use(&both), AuthInUse::TokenFile("/t")));
        let cert = AuthInfo {
            exec: None,
            ..plugin
        };
        assert_eq!(in_use(&cert), "client certificate");
    }

    #[test]
    fn errors_hold_no_token() {
        let err = Error::from(LoadError::Timeout {
            origin: "file /d/token".into(),
            after: std::time::Duration::from_secs(10),
        });
        assert_eq!(
            err.to_string(),
            "fetching the token from file /d/token took longer than 10s"
        );
    }
}
