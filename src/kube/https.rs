//! The stack of a client whose TLS credentials rotate (feature `tls`): kube's middleware
//! over this crate's [`HttpsClient`] instead of kube's hyper client.

use ::kube::client::retry::RetryPolicy;
use ::kube::client::{Body, ClientBuilder, ConfigExt};
use ::kube::{Client, Config};
use rustls::pki_types::ServerName;
use tower::ServiceBuilder;
use tower::retry::RetryLayer;

use super::{Credentials, Error};
use crate::layer::BearerLayer;
use crate::tls::HttpsClient;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// Outermost → innermost: kube's base URI, kube's retry of 429/503/504, the
/// [`BearerLayer`] with its 401 retry, kube's auth for what the config still holds (an
/// inline token, a username and password), kube's extra headers, the [`HttpsClient`].
pub(super) fn client(config: Config, credentials: Credentials) -> Result<Client, Error> {
    if let Some(proxy) = &config.proxy_url {
        return Err(Error::Proxy {
            proxy: proxy.to_string(),
        });
    }
    let roots = credentials.roots.ok_or(Error::NoRoots)?;
    let mut https = HttpsClient::<Body>::new(roots).connect_timeout(config.connect_timeout);
    if let Some(identity) = credentials.identity {
        https = https.identity(identity);
    }
    if let Some(name) = &config.tls_server_name {
        let name = ServerName::try_from(name.clone())
            .map_err(|_| Error::ServerName { name: name.clone() })?;
        https = https.server_name(name);
    }
    let retry = (config.default_retry).then(|| RetryLayer::new(RetryPolicy::server_retry()));
    let bearer = (credentials.token).map(|t| BearerLayer::new(t).retry_unauthorized());
    let stack = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(retry)
        .option_layer(bearer)
        .map_err(Into::<BoxError>::into)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(Into::<BoxError>::into)
        .service(https);
    Ok(ClientBuilder::new(stack, config.default_namespace).build())
}
