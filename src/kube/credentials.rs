//! [`Credentials`]: the stores a client takes its credentials from, how they are read out
//! of a kube `Config`, and the client built on them.

use std::path::Path;

use ::kube::client::retry::RetryPolicy;
use ::kube::client::{Body, ClientBuilder};
#[cfg(feature = "tls")]
use ::kube::config::AuthInfo;
use ::kube::config::KubeConfigOptions;
use ::kube::{Client, Config};
use tower::ServiceBuilder;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

use super::kubeconfig::{self, Snapshot, Which};
use super::{AuthInUse, Error, auth_in_use};
use crate::builder::StoreBuilder;
use crate::layer::BearerLayer;
#[cfg(feature = "tls")]
use crate::source::FnSource;
use crate::source::{ExecError, ExecSource, FileSource};
use crate::store::{Store, TokenStore};
#[cfg(feature = "tls")]
use crate::tls::{IdentityStore, RootStore};
#[cfg(feature = "tls")]
use base64::{Engine as _, engine::general_purpose::STANDARD};
#[cfg(feature = "tls")]
use zeroize::Zeroizing;

/// The stores a `kube::Client` takes its credentials from: the bearer token and, with
/// feature `tls`, the client identity and the CA bundle. Cheap to clone: clients built
/// from clones share the stores (their reads, their plugin runs, their watchers).
///
/// [`Credentials::load`] reads them out of a kube `Config`, and [`client`](Self::client)
/// builds a client on them; or set each store, built with its own options. A
/// [`TokenStore`] alone converts into one.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use bearer_reload::kube::Credentials;
///
/// let config = Credentials::infer_config().await?;
/// let credentials = Credentials::load(&config).await?;
/// // Two clients, one store (one exec plugin run per rotation between them).
/// let api = credentials.client(config.clone())?;
/// let watcher = credentials.client(config)?;
/// # let _ = (api, watcher); Ok(()) }
/// ```
#[derive(Debug, Clone, Default)]
pub struct Credentials {
    pub(super) token: Option<TokenStore>,
    #[cfg(feature = "tls")]
    pub(super) identity: Option<IdentityStore>,
    #[cfg(feature = "tls")]
    pub(super) roots: Option<RootStore>,
}

impl From<TokenStore> for Credentials {
    fn from(token: TokenStore) -> Self {
        Self::default().token(token)
    }
}

impl Credentials {
    /// The config to build credentials and clients for: kube's [`Config::infer`], and the
    /// kubeconfig cluster's `certificate-authority` file as `root_cert_file`, so that
    /// [`load`](Self::load) watches it (kube keeps only its bytes). In a pod,
    /// `root_cert_file` is the service account's `ca.crt` already. For a config of your
    /// own, set `root_cert_file` to the CA file to have it watched.
    ///
    /// kube's own `Config::infer` gives the same config without the CA file's path, so
    /// that a rotated CA bundle would not be followed.
    ///
    /// # Errors
    ///
    /// [`Error::Infer`] when kube finds no config: neither in-cluster variables nor a
    /// kubeconfig.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), bearer_reload::kube::Error> {
    /// use bearer_reload::kube::Credentials;
    ///
    /// let config = Credentials::infer_config().await?;
    /// let client = Credentials::load(&config).await?.client(config)?;
    /// # let _ = client; Ok(()) }
    /// ```
    ///
    /// [`Config::infer`]: https://docs.rs/kube/5/kube/struct.Config.html#method.infer
    pub async fn infer_config() -> Result<Config, Error> {
        super::infer_config().await
    }

    /// The stores `config` calls for, each loaded with the default options:
    ///
    /// - the token: the user's token file or exec plugin, as
    ///   [`token_store_builder`](Self::token_store_builder) says;
    /// - with feature `tls`, the client identity: the user's `client-certificate` and
    ///   `client-key` files (watched, as [`IdentityStore::files`]), their `-data` (kept as
    ///   they are), or an exec plugin's `clientCertificateData`/`clientKeyData`
    ///   ([`IdentityStore::exec`]);
    /// - with feature `tls`, the CA bundle: `config.root_cert_file` (watched; the
    ///   in-cluster `ca.crt`, or a kubeconfig's `certificate-authority` as
    ///   [`infer_config`](Self::infer_config) sets it), else `config.root_cert` (kept as it is).
    ///
    /// None at all when nothing in `config` rotates that kube's own client would not
    /// handle as well (an inline token alone, an auth provider; without feature `tls`, a
    /// client certificate, or an exec plugin that returns one): [`client`](Self::client)
    /// then builds kube's own client, unchanged, and a `debug` event says why. A config
    /// that verifies no server (`accept_invalid_certs`) gets neither TLS store: kube's own
    /// TLS handles it, reading certificates once, and a `warn` event says so.
    ///
    /// Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Load`], naming the path or the command, when a store cannot be loaded
    /// (kube's own client would fail on every request instead); [`Error::Exec`] when the
    /// user's `exec` section cannot be used; [`Error::Data`] when a `-data` field is not
    /// base64.
    pub async fn load(config: &Config) -> Result<Self, Error> {
        let credentials = match Self::load_all(config, None).await {
            Ok(credentials) => credentials,
            #[cfg(not(feature = "tls"))]
            Err(Error::Load(e))
                if matches!(e.downcast_ref(), Some(ExecError::ClientCertificate { .. })) =>
            {
                tracing::debug!(
                    source = e.origin(),
                    "exec plugin returned a client certificate and feature `tls` is off: \
                     kube's own client handles it"
                );
                return Ok(Self::default());
            }
            Err(e) => return Err(e),
        };
        #[cfg(feature = "tls")]
        let rotating = credentials.identity.is_some() || config.root_cert_file.is_some();
        #[cfg(not(feature = "tls"))]
        let rotating = false;
        if credentials.token.is_none() && !rotating {
            tracing::debug!(
                auth = auth_in_use(&config.auth_info).name(),
                "nothing in the kube config rotates: kube's own client handles it"
            );
            return Ok(Self::default());
        }
        Ok(credentials)
    }

    /// The stores `config` calls for; given the store of a kubeconfig `file`
    /// ([`from_kubeconfig`](Self::from_kubeconfig)), those of the credentials inline in it
    /// follow the file's.
    async fn load_all(config: &Config, file: Option<&Store<Snapshot>>) -> Result<Self, Error> {
        let mut credentials = Self::default();
        let inline = file.map(kubeconfig::inline).unwrap_or_default();
        #[cfg(feature = "tls")]
        let mut plugin_identity = None;
        // The plugin is kept to ask, once it ran, whether it answered with a certificate.
        let plugin = match auth_in_use(&config.auth_info) {
            AuthInUse::Exec(exec) => Some(crate::source::ExecSource::try_from(exec)?),
            _ => None,
        };
        let builder = match (file, &plugin) {
            (Some(file), _) if inline.token => {
                Some(kubeconfig::follow(file, Which::Token, TokenStore::builder))
            }
            (_, Some(plugin)) => Some(TokenStore::builder(plugin.clone())),
            _ => Self::token_store_builder(config)?,
        };
        if let Some(builder) = builder {
            match builder.load().await {
                Ok(store) => credentials.token = Some(store),
                #[cfg(feature = "tls")]
                Err(e) if matches!(e.downcast_ref(), Some(ExecError::ClientCertificate { .. })) => {
                    plugin_identity = plugin.clone();
                }
                Err(e) => return Err(e.into()),
            }
        }
        #[cfg(feature = "tls")]
        if config.accept_invalid_certs {
            tracing::warn!(
                "the kube config verifies no server (insecure-skip-tls-verify): kube's own TLS \
                 handles it, and reads its client certificate and CA once"
            );
        } else {
            // A plugin that answered with a token and a certificate: both are used, as
            // kube uses them (the plugin then runs for each store).
            let saw_certificate = plugin.clone().filter(|plugin| plugin.saw_certificate());
            let identity = match (file, plugin_identity.or(saw_certificate)) {
                (Some(file), _) if inline.identity => Some(kubeconfig::follow(
                    file,
                    Which::Identity,
                    IdentityStore::builder,
                )),
                (_, Some(plugin)) => Some(IdentityStore::exec(plugin)),
                _ => identity_of(&config.auth_info)?,
            };
            credentials.identity = load(identity).await?;
            let roots = match file {
                Some(file) if inline.roots => {
                    Some(kubeconfig::follow(file, Which::Roots, RootStore::builder))
                }
                _ => roots_of(config),
            };
            credentials.roots = load(roots).await?;
        }
        // A certificate the token's run got is for the identity store loaded above, if
        // any: dropped once that is done rather than kept with the token's store.
        #[cfg(feature = "tls")]
        if let Some(plugin) = plugin {
            plugin.drop_handover();
        }
        Ok(credentials)
    }

    /// The config of a kubeconfig file that something else rewrites, and credentials that
    /// follow it: a kubeconfig mounted from a Secret (Cluster API's `<cluster>-kubeconfig`,
    /// an Argo CD or Rancher cluster secret, a managed service account's), whose inline
    /// credentials rotate with the file. The context is `options.context`, else the file's
    /// `current-context` (and `options.cluster`, `options.user` as kube reads them).
    ///
    /// The file is watched like a token file (the `..data` swap of a mounted Secret,
    /// symlink chains, a read every 60 s as backstop) and read once per change for all its
    /// credentials. Each credential inline in the context — the user's `token`, its
    /// `client-certificate-data` and `client-key-data`, the cluster's
    /// `certificate-authority-data` (these two with feature `tls`) — is a store that takes
    /// its value out of each read, and is installed when it changed: the client's
    /// connections made with an old identity or CA bundle are retired, and a request
    /// refused with the old token is sent again with the new one. A server that refuses a
    /// credential has the file read again at once. The files and plugins the context names
    /// (`tokenFile`, `exec`, `client-certificate`, `certificate-authority`) are loaded as
    /// [`load`](Self::load) loads them.
    ///
    /// A read that cannot be used changes nothing: a file that does not parse, lacks the
    /// context, or holds an inline credential that is not valid (a half-written field)
    /// keeps every credential as it was, and each store's [`status`](crate::TokenStore::status)
    /// shows the error ([`Error::Kubeconfig`], naming the file and the problem). So does a
    /// file whose context changed what a client built on it cannot follow: its server, its
    /// cluster or user, their other settings, which credentials are inline. The client
    /// goes on with the server and the credentials it has, never the old server with new
    /// credentials; to follow such a change, build a new client from the file.
    ///
    /// The config is kube's for the context
    /// ([`Config::from_custom_kubeconfig`](https://docs.rs/kube/5/kube/struct.Config.html#method.from_custom_kubeconfig)),
    /// without the inline token (the token store's header goes on the requests) and with
    /// the cluster's `certificate-authority` file as `root_cert_file`; build clients with
    /// [`client`](Self::client). Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Kubeconfig`] when the file cannot be read or used; [`Error::Kube`] when kube
    /// cannot make a config of the context; and those of [`load`](Self::load) for the
    /// files and plugins it names.
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use bearer_reload::kube::Credentials;
    /// use kube::config::KubeConfigOptions;
    ///
    /// // The workload cluster's kubeconfig, mounted from the Secret Cluster API renews.
    /// let path = "/etc/clusters/prod-eu/value";
    /// let (config, credentials) =
    ///     Credentials::from_kubeconfig(path, &KubeConfigOptions::default()).await?;
    /// let client = credentials.client(config)?;
    /// # let _ = client; Ok(()) }
    /// ```
    pub async fn from_kubeconfig(
        path: impl AsRef<Path>,
        options: &KubeConfigOptions,
    ) -> Result<(Config, Self), Error> {
        let (config, file) = kubeconfig::first_read(path.as_ref(), options).await?;
        let credentials = match &file {
            Some(file) => Self::load_all(&config, Some(file)).await?,
            None => Self::load(&config).await?,
        };
        Ok((config, credentials))
    }

    /// The builder of the token store `config` calls for: its user's token file
    /// ([`FileSource`](crate::source::FileSource)) or exec plugin
    /// ([`ExecSource`](crate::source::ExecSource)), in kube's order of precedence; `None`
    /// when the user authenticates otherwise (kube's own client handles it).
    ///
    /// Set the store's options on it, load it, and give the store to
    /// [`token`](Self::token).
    ///
    /// # Errors
    ///
    /// [`Error::Exec`] when the user's `exec` section cannot be used (no command, an
    /// unknown `apiVersion`, a `v1` section without `interactiveMode`, ...).
    ///
    /// # Examples
    ///
    /// ```no_run
    /// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use bearer_reload::kube::Credentials;
    ///
    /// let config = Credentials::infer_config().await?;
    /// let Some(builder) = Credentials::token_store_builder(&config)? else {
    ///     return Ok(()); // neither a token file nor a plugin: `kube::Client::try_from(config)`
    /// };
    /// // A plugin that waits for a browser login gets five minutes.
    /// let store = builder.fetch_timeout(Duration::from_secs(300)).load().await?;
    /// let client = Credentials::from(store.clone()).client(config)?;
    /// println!("token {} from {}", store.current(), store.status().source);
    /// # let _ = client; Ok(()) }
    /// ```
    pub fn token_store_builder(config: &Config) -> Result<Option<StoreBuilder>, Error> {
        Ok(match auth_in_use(&config.auth_info) {
            AuthInUse::TokenFile(path) => Some(TokenStore::builder(FileSource::new(path))),
            AuthInUse::Exec(exec) => Some(TokenStore::builder(ExecSource::try_from(exec)?)),
            other => {
                tracing::debug!(
                    auth = other.name(),
                    "kube config authenticates with neither a token file nor an exec plugin: \
                     kube's own client handles it"
                );
                None
            }
        })
    }

    /// The store of the bearer token, if any: to read its
    /// [`status`](TokenStore::status) (a kubeconfig that cannot be used shows there).
    pub fn token_store(&self) -> Option<&TokenStore> {
        self.token.as_ref()
    }

    /// The store of the client identity, if any (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn identity_store(&self) -> Option<&IdentityStore> {
        self.identity.as_ref()
    }

    /// The store of the CA bundle, if any (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn root_store(&self) -> Option<&RootStore> {
        self.roots.as_ref()
    }

    /// The store the bearer token comes from.
    pub fn token(mut self, store: TokenStore) -> Self {
        self.token = Some(store);
        self
    }

    /// The store the client certificate comes from (feature `tls`). Needs
    /// [`roots`](Self::roots) as well.
    #[cfg(feature = "tls")]
    pub fn identity(mut self, store: IdentityStore) -> Self {
        self.identity = Some(store);
        self
    }

    /// The store the CA bundle that verifies the API server comes from (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn roots(mut self, store: RootStore) -> Self {
        self.roots = Some(store);
        self
    }

    /// A [`kube::Client`] for `config` that takes its credentials from these stores and
    /// retries its 401s once with the new token. Everything else is `config`'s, as kube
    /// uses it (see the [module docs](super#where-the-layer-sits)); its own token file and
    /// exec section, if any, are taken out (kube's auth layer, closer to the wire, would
    /// overwrite the store's header, and kube would run the plugin up to three times
    /// while building its client): give their stores here. With no store at all, kube's
    /// own client for `config`, unchanged.
    ///
    /// With a client identity or a CA bundle (feature `tls`), the client sends its
    /// requests through an [`HttpsClient`](crate::tls::HttpsClient) instead of kube's
    /// hyper client; see [TLS](super#tls).
    ///
    /// Every client built from the same stores shares their credentials, their reads and
    /// their exec plugin's runs. Must be called within a tokio runtime (the stack's
    /// `Buffer` spawns its worker there).
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedProxyScheme`] for a `proxy_url` of a scheme kube does not take either;
    /// [`Error::NoRoots`] for an identity without a bundle;
    /// [`Error::ServerName`] for a `tls_server_name` that is no name; [`Error::Kube`] when
    /// kube cannot build its client from the config.
    ///
    /// [`kube::Client`]: https://docs.rs/kube/5/kube/struct.Client.html
    pub fn client(&self, config: Config) -> Result<Client, Error> {
        let without_auth = |mut config: Config| {
            config.auth_info.token_file = None;
            config.auth_info.exec = None;
            config
        };
        #[cfg(feature = "tls")]
        if self.identity.is_some() || self.roots.is_some() {
            tracing::debug!("kube client with reloading TLS credentials");
            return super::https::client(without_auth(config), self.clone());
        }
        let Some(store) = self.token.clone() else {
            return Ok(Client::try_from(config)?);
        };
        let mut config = without_auth(config);
        // kube's retry goes outside our layer, so that each attempt gets the current token.
        let default_retry = std::mem::replace(&mut config.default_retry, false);
        tracing::debug!(token = %store.current(), "kube client with a reloading token");
        let stack = ServiceBuilder::new()
            .option_layer(default_retry.then(|| RetryLayer::new(RetryPolicy::server_retry())))
            .layer(BearerLayer::new(store).retry_unauthorized())
            .layer(BufferLayer::<http::Request<Body>>::new(super::BUFFER));
        Ok(ClientBuilder::try_from(config)?.with_layer(&stack).build())
    }
}

/// The store of `builder`, if any.
#[cfg(feature = "tls")]
async fn load<S>(builder: Option<StoreBuilder<S>>) -> Result<Option<S>, crate::LoadError> {
    Ok(match builder {
        Some(builder) => Some(builder.load().await?),
        None => None,
    })
}

/// The identity a kubeconfig user's certificate and key give: two watched files, or the
/// bytes kube's loader would read (`-data` first, as kube does).
#[cfg(feature = "tls")]
fn identity_of(auth: &AuthInfo) -> Result<Option<crate::StoreBuilder<IdentityStore>>, Error> {
    use secrecy::ExposeSecret;

    // The key goes from kube's SecretString to wiped memory, never a plain Vec.
    let data = |data: Option<&str>, field| {
        let decoded = data.map(|data| STANDARD.decode(data.trim()).map(Zeroizing::new));
        decoded.transpose().map_err(|_| Error::Data { field })
    };
    let cert = auth.client_certificate_data.as_deref();
    let cert = data(cert, "client-certificate-data")?;
    let key = auth.client_key_data.as_ref().map(|key| key.expose_secret());
    let key = data(key, "client-key-data")?;
    Ok(
        match (cert, key, &auth.client_certificate, &auth.client_key) {
            (None, None, Some(cert), Some(key)) => Some(IdentityStore::files(cert, key)),
            (None, None, _, _) => None,
            (cert, key, cert_file, key_file) => {
                // Bytes from the kubeconfig: read once per fetch, never watched.
                let halves = [(cert, cert_file.clone()), (key, key_file.clone())];
                let source = FnSource::new("kubeconfig client certificate", move || {
                    let [cert, key] = halves.clone().map(|(bytes, file)| half(bytes, file));
                    async move {
                        let (cert, key) = (cert.await?, key.await?);
                        let mut pem = Zeroizing::new([&cert[..], b"\n", &key[..]].concat());
                        // Moved to the store, not copied.
                        Ok::<_, std::io::Error>(std::mem::take(&mut *pem))
                    }
                });
                Some(IdentityStore::builder(source).no_watch())
            }
        },
    )
}

/// One half of a kubeconfig identity, in wiped memory: its `-data` bytes, else its file's.
#[cfg(feature = "tls")]
async fn half(
    bytes: Option<Zeroizing<Vec<u8>>>,
    file: Option<String>,
) -> std::io::Result<Zeroizing<Vec<u8>>> {
    match (bytes, file) {
        (Some(bytes), _) => Ok(bytes),
        (None, Some(file)) => tokio::fs::read(&file)
            .await
            .map(Zeroizing::new)
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot read {file}: {e}"))),
        (None, None) => Ok(Zeroizing::default()),
    }
}

/// The CA bundle that verifies the API server: the file, watched, else the bytes.
#[cfg(feature = "tls")]
fn roots_of(config: &Config) -> Option<crate::StoreBuilder<RootStore>> {
    if let Some(path) = &config.root_cert_file {
        return Some(RootStore::builder(FileSource::new(path.clone())));
    }
    // PEM of one base64 line each, as the PEM reader takes it.
    let pem = (config.root_cert.as_ref()?.iter())
        .map(|der| {
            let body = STANDARD.encode(der);
            format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n")
        })
        .collect::<String>()
        .into_bytes();
    let source = FnSource::new("kube config root certificates", move || {
        let pem = pem.clone();
        async move { Ok::<_, std::io::Error>(pem) }
    });
    Some(RootStore::builder(source).no_watch().no_periodic_refresh())
}
