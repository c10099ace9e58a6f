//! [`Credentials`]: the stores a client takes its credentials from, and how they are read
//! out of a kube [`Config`].

#[cfg(feature = "tls")]
use std::path::PathBuf;

use ::kube::Config;
#[cfg(feature = "tls")]
use ::kube::config::AuthInfo;

use super::{AuthInUse, Error, auth_in_use, token_store};
use crate::source::ExecError;
#[cfg(feature = "tls")]
use crate::source::{FileSource, FnSource};
use crate::store::TokenStore;
#[cfg(feature = "tls")]
use crate::tls::{IdentityStore, PemFiles, RootStore};

/// The stores a client built by [`client_with`](super::client_with) takes its
/// credentials from: the bearer token and, with feature `tls`, the client identity and
/// the CA bundle. Cheap to clone: clients given clones share the stores (their reads,
/// their plugin runs, their watchers).
///
/// [`Credentials::load`] reads them out of a kube `Config`; or set each store built with
/// its own options. A [`TokenStore`] alone converts into one.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use bearer_reload::kube::{Credentials, client_with};
///
/// let config = bearer_reload::kube::infer().await?;
/// let credentials = Credentials::load(&config).await?;
/// let api = client_with(config.clone(), credentials.clone())?;
/// let watcher = client_with(config, credentials)?;
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
    /// The stores `config` calls for, each loaded with the default options:
    ///
    /// - the token: the user's token file or exec plugin, as [`token_store`] says;
    /// - with feature `tls`, the client identity: the user's `client-certificate` and
    ///   `client-key` files (watched, as [`PemFiles`]), their `-data` (kept as they are),
    ///   or an exec plugin's `clientCertificateData`/`clientKeyData`
    ///   ([`IdentityStore::exec`]);
    /// - with feature `tls`, the CA bundle: `config.root_cert_file` (watched; the
    ///   in-cluster `ca.crt`, or a kubeconfig's `certificate-authority` as
    ///   [`infer`](super::infer) sets it), else `config.root_cert` (kept as it is).
    ///
    /// A config with a `proxy_url`, or one that verifies no server (`accept_invalid_certs`),
    /// gets neither TLS store: kube's own TLS handles it, reading certificates once.
    ///
    /// Fails, naming the path or the command, when one cannot be loaded. Without feature
    /// `tls`, a plugin that returns a certificate instead of a token fails with
    /// [`ExecError::ClientCertificate`].
    pub async fn load(config: &Config) -> Result<Self, Error> {
        let mut credentials = Self::default();
        #[cfg(feature = "tls")]
        let mut plugin_identity = None;
        // The plugin is kept to ask, once it ran, whether it answered with a certificate.
        let plugin = match auth_in_use(&config.auth_info) {
            AuthInUse::Exec(exec) => Some(crate::source::ExecSource::try_from(exec)?),
            _ => None,
        };
        let builder = match &plugin {
            Some(plugin) => Some(TokenStore::builder(plugin.clone())),
            None => token_store(config)?,
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
        if config.proxy_url.is_some() || config.accept_invalid_certs {
            tracing::debug!(
                "a proxy, or no server verification: TLS as kube does it, certificates read once"
            );
        } else {
            // A plugin that answered with a token and a certificate: both are used, as
            // kube uses them (the plugin then runs for each store).
            let plugin_identity =
                plugin_identity.or(plugin.filter(|plugin| plugin.saw_certificate()));
            credentials.identity = match plugin_identity {
                Some(plugin) => Some(IdentityStore::exec(plugin).load().await?),
                None => match identity_of(&config.auth_info)? {
                    Some(builder) => Some(builder.load().await?),
                    None => None,
                },
            };
            credentials.roots = match roots_of(config) {
                Some(builder) => Some(builder.load().await?),
                None => None,
            };
        }
        Ok(credentials)
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
}

/// The credentials of `config`, or `None` when nothing in them rotates that kube's own
/// client would not handle as well (see the module docs), with the reason logged.
pub(super) async fn load_for(config: &Config) -> Result<Option<Credentials>, Error> {
    match Credentials::load(config).await {
        Ok(credentials) => {
            #[cfg(feature = "tls")]
            let rotating = credentials.identity.is_some() || config.root_cert_file.is_some();
            #[cfg(not(feature = "tls"))]
            let rotating = false;
            if credentials.token.is_none() && !rotating {
                tracing::debug!(
                    auth = auth_in_use(&config.auth_info).name(),
                    "nothing in the kube config rotates: kube's own client handles it"
                );
                return Ok(None);
            }
            Ok(Some(credentials))
        }
        #[cfg(not(feature = "tls"))]
        Err(Error::Load(e))
            if matches!(e.downcast_ref(), Some(ExecError::ClientCertificate { .. })) =>
        {
            tracing::debug!(
                source = e.origin(),
                "exec plugin returned a client certificate and feature `tls` is off: using \
                 kube's own client"
            );
            Ok(None)
        }
        Err(e) => Err(e),
    }
}

/// The identity a kubeconfig user's certificate and key give: two watched files, or the
/// bytes kube's loader would read (`-data` first, as kube does).
#[cfg(feature = "tls")]
fn identity_of(auth: &AuthInfo) -> Result<Option<crate::StoreBuilder<IdentityStore>>, Error> {
    use base64::Engine;
    use base64::engine::general_purpose::STANDARD;
    use secrecy::ExposeSecret;

    let data = |data: Option<&str>, name: &'static str| -> Result<Option<Vec<u8>>, Error> {
        data.map(|data| {
            STANDARD
                .decode(data.trim())
                .map_err(|_| Error::Data { field: name })
        })
        .transpose()
    };
    let cert = data(
        auth.client_certificate_data.as_deref(),
        "client-certificate-data",
    )?;
    let key = data(
        auth.client_key_data.as_ref().map(|key| key.expose_secret()),
        "client-key-data",
    )?;
    Ok(
        match (cert, key, &auth.client_certificate, &auth.client_key) {
            (None, None, Some(cert), Some(key)) => Some(IdentityStore::builder(PemFiles::new(
                PathBuf::from(cert),
                PathBuf::from(key),
            ))),
            (None, None, _, _) => None,
            (cert, key, cert_file, key_file) => {
                // Bytes from the kubeconfig: read once per fetch, never watched.
                let cert_file = cert_file.clone();
                let key_file = key_file.clone();
                let source = FnSource::new("kubeconfig client certificate", move || {
                    let (cert, key) = (cert.clone(), key.clone());
                    let (cert_file, key_file) = (cert_file.clone(), key_file.clone());
                    async move {
                        let mut pem = part(cert, cert_file).await?;
                        pem.push(b'\n');
                        pem.extend(part(key, key_file).await?);
                        Ok::<_, std::io::Error>(pem)
                    }
                });
                Some(IdentityStore::builder(source).no_watch())
            }
        },
    )
}

/// One half of a kubeconfig identity: its `-data` bytes, else its file's.
#[cfg(feature = "tls")]
async fn part(bytes: Option<Vec<u8>>, file: Option<String>) -> std::io::Result<Vec<u8>> {
    match (bytes, file) {
        (Some(bytes), _) => Ok(bytes),
        (None, Some(file)) => tokio::fs::read(&file)
            .await
            .map_err(|e| std::io::Error::new(e.kind(), format!("cannot read {file}: {e}"))),
        (None, None) => Ok(Vec::new()),
    }
}

/// The CA bundle that verifies the API server: the file, watched, else the bytes.
#[cfg(feature = "tls")]
fn roots_of(config: &Config) -> Option<crate::StoreBuilder<RootStore>> {
    if let Some(path) = &config.root_cert_file {
        return Some(RootStore::builder(FileSource::new(path.clone())));
    }
    let ders = config.root_cert.clone()?;
    let pem = ders
        .iter()
        .map(|der| pem_of(der))
        .collect::<String>()
        .into_bytes();
    let source = FnSource::new("kube config root certificates", move || {
        let pem = pem.clone();
        async move { Ok::<_, std::io::Error>(pem) }
    });
    Some(RootStore::builder(source).no_watch().refresh_interval(None))
}

/// One DER certificate as PEM.
#[cfg(feature = "tls")]
fn pem_of(der: &[u8]) -> String {
    use base64::Engine;
    let body = base64::engine::general_purpose::STANDARD.encode(der);
    let mut pem = String::from("-----BEGIN CERTIFICATE-----\n");
    for line in body.as_bytes().chunks(64) {
        pem.push_str(std::str::from_utf8(line).expect("base64 is ASCII"));
        pem.push('\n');
    }
    pem.push_str("-----END CERTIFICATE-----\n");
    pem
}
