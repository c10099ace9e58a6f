//! [`Credentials`]: the stores a client takes its credentials from, and the client built
//! on them.

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
/// feature `tls`, the client identity and the CA bundle: from [`Credentials::load`], or
/// each set by hand. Cheap to clone: clients built from clones share the stores.
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
    /// kube's [`Config::infer`], with the kubeconfig cluster's `certificate-authority`
    /// file as `root_cert_file`, so that [`load`](Self::load) watches it (kube keeps only
    /// its bytes). For a config of your own, set `root_cert_file` to have it watched.
    ///
    /// # Errors
    ///
    /// [`Error::Infer`] when kube finds no config.
    ///
    /// [`Config::infer`]: https://docs.rs/kube/5/kube/struct.Config.html#method.infer
    pub async fn infer_config() -> Result<Config, Error> {
        super::infer_config().await
    }

    /// The stores `config` calls for, each loaded with the default options: the token
    /// ([`token_store_builder`](Self::token_store_builder)); with feature `tls`, the client
    /// identity (the user's `client-certificate` and `client-key` files, watched, their
    /// `-data`, or an exec plugin's, as [`IdentityStore::exec`]) and the CA bundle
    /// (`config.root_cert_file`, watched, else `config.root_cert`).
    ///
    /// None at all when nothing in `config` rotates that kube's own client would not
    /// handle as well (an inline token alone, an auth provider; without feature `tls`, a
    /// client certificate): [`client`](Self::client) then builds kube's own client. A
    /// config that verifies no server (`accept_invalid_certs`) gets no TLS store. A `debug`
    /// or `warn` event says why. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Load`] when a store cannot be loaded, [`Error::Exec`] when the user's `exec`
    /// section cannot be used, [`Error::Data`] when a `-data` field is not base64.
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

    /// The stores `config` calls for; those of the credentials inline in a kubeconfig
    /// `file` follow its store.
    async fn load_all(config: &Config, file: Option<&Store<Snapshot>>) -> Result<Self, Error> {
        let mut credentials = Self::default();
        let inline = file.map(kubeconfig::inline).unwrap_or_default();
        #[cfg(feature = "tls")]
        let mut plugin_identity = None;
        // Kept to ask, once it ran, whether it answered with a certificate.
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
            // A plugin that answered with a token and a certificate: both are used, as kube.
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
        // A certificate the token's run got is not kept past the identity store's load.
        #[cfg(feature = "tls")]
        if let Some(plugin) = plugin {
            plugin.drop_handover();
        }
        Ok(credentials)
    }

    /// The config of a kubeconfig file that something else rewrites (Cluster API's
    /// `<cluster>-kubeconfig`, an Argo CD or Rancher cluster secret), and credentials that
    /// follow it. The context is `options.context`, else the file's `current-context`.
    ///
    /// The file is watched like a token file, and read once per change or when a server
    /// refuses a credential. Each credential inline in the context (the user's `token`;
    /// with feature `tls`, its `client-certificate-data` and `client-key-data`, the
    /// cluster's `certificate-authority-data`) is a store installed when it changed. A read
    /// that cannot be used (it does not parse, lacks the context, holds an invalid inline
    /// credential, or changes the server or another setting) changes nothing, and each
    /// store's [`status`](crate::TokenStore::status) shows the [`Error::Kubeconfig`]: build
    /// a new client to follow such a change.
    ///
    /// The config is kube's for the context
    /// ([`Config::from_custom_kubeconfig`](https://docs.rs/kube/5/kube/struct.Config.html#method.from_custom_kubeconfig)),
    /// without the inline token, with the cluster's `certificate-authority` file as
    /// `root_cert_file`. Must be called within a tokio runtime.
    ///
    /// # Errors
    ///
    /// [`Error::Kubeconfig`] when the file cannot be read or used, [`Error::Kube`] when kube
    /// cannot make a config of the context, and [`load`](Self::load)'s.
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

    /// The builder of the token store `config` calls for, its user's token file or exec
    /// plugin, to set the store's options on; `None` when the user authenticates otherwise.
    ///
    /// # Errors
    ///
    /// [`Error::Exec`] when the user's `exec` section cannot be used.
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

    /// The store of the bearer token, if any.
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

    /// The store the client certificate comes from (feature `tls`); needs
    /// [`roots`](Self::roots).
    #[cfg(feature = "tls")]
    pub fn identity(mut self, store: IdentityStore) -> Self {
        self.identity = Some(store);
        self
    }

    /// The store of the CA bundle that verifies the API server (feature `tls`).
    #[cfg(feature = "tls")]
    pub fn roots(mut self, store: RootStore) -> Self {
        self.roots = Some(store);
        self
    }

    /// A [`kube::Client`] for `config` that takes its credentials from these stores and
    /// retries its 401s once with the new token. Everything else is `config`'s, as kube
    /// uses it (see the [module docs](super#where-the-layer-sits)), but its token file and
    /// exec section: kube's auth layer, closer to the wire, would overwrite the store's
    /// header, and kube would run the plugin while building its client. With no store at
    /// all, kube's own client for `config`, unchanged. With a client identity or a CA
    /// bundle, see [TLS](super#tls).
    ///
    /// Must be called within a tokio runtime (the stack's `Buffer` spawns its worker there).
    ///
    /// # Errors
    ///
    /// [`Error::UnsupportedProxyScheme`], [`Error::NoRoots`], [`Error::ServerName`];
    /// [`Error::Kube`] when kube cannot build its client from the config.
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

#[cfg(feature = "tls")]
async fn load<S>(builder: Option<StoreBuilder<S>>) -> Result<Option<S>, crate::LoadError> {
    Ok(match builder {
        Some(builder) => Some(builder.load().await?),
        None => None,
    })
}

/// A kubeconfig user's identity: two watched files, or their bytes (`-data` first, as kube).
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
                        // Moved to the store, leaving no unwiped copy.
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

/// The CA bundle: the file, watched, else the bytes.
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
