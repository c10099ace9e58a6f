//! [`ClientCredentials`]: the client-credentials grant (RFC 6749 §4.4).

use std::time::Duration;

use http::Uri;

use super::auth::ClientAuth;
use super::error::Error;
use super::request::{Endpoint, Form};
use crate::source::{FetchContext, Fetched, TokenSource};
use crate::tls::RootStore;

/// Access tokens of a confidential client, by the client-credentials grant (RFC 6749
/// §4.4): a service calling another service as itself.
///
/// Each fetch POSTs `grant_type=client_credentials`, with the scopes, audiences and
/// resources given, authenticated as its [`ClientAuth`] says. Refresh, retries and 401s
/// are the store's (see the [module docs](super)); a token without `expires_in` is kept
/// until a server refuses it.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use bearer_reload::oauth2::{ClientAuth, ClientCredentials};
/// use bearer_reload::source::FileSource;
/// use bearer_reload::tls::RootStore;
/// use bearer_reload::{BearerLayer, TokenStore};
///
/// let roots = RootStore::builder(FileSource::new("/etc/ssl/certs/ca-certificates.crt"))
///     .load()
///     .await?;
/// let secret = std::env::var("CLIENT_SECRET")?;
/// let source = ClientCredentials::new(
///     "https://idp.example/oauth2/token".parse()?,
///     "billing",
///     ClientAuth::client_secret_basic(secret),
///     roots,
/// )
/// .scope("invoices.read")
/// .resource("https://api.example");
/// let store = TokenStore::builder(source).load().await?;
/// let layer = BearerLayer::new(store).retry_unauthorized();
/// // ServiceBuilder::new().layer(layer).service(http_client) ...
/// # let _ = layer; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct ClientCredentials {
    endpoint: Endpoint,
}

impl ClientCredentials {
    /// Tokens of `client_id` from `token_endpoint`, verified with `roots`, authenticated
    /// by `auth` (not [`ClientAuth::none`]: the grant is for confidential clients). An
    /// endpoint that is not `https://` fails each fetch with [`Error::InsecureEndpoint`].
    pub fn new(
        token_endpoint: Uri,
        client_id: impl Into<String>,
        auth: ClientAuth,
        roots: RootStore,
    ) -> Self {
        Self {
            endpoint: Endpoint::new(token_endpoint, client_id.into(), auth, roots),
        }
    }

    /// Adds a scope; the scopes go in one `scope` parameter, space-separated, in the order
    /// given. Without any the server grants the client's default scope.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.endpoint.scopes.push(scope.into());
        self
    }

    /// Adds an `audience` parameter: the service the token is for, as servers that
    /// predate RFC 8707 take it (Auth0, Okta's custom servers). One parameter each.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.endpoint.audiences.push(audience.into());
        self
    }

    /// Adds a `resource` parameter (RFC 8707): the absolute URI of the service, one each.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.endpoint.resources.push(resource.into());
        self
    }
}

impl TokenSource for ClientCredentials {
    type Error = Error;

    /// Asks the token endpoint for a new token: the store is the cache.
    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, Error> {
        let mut form = Form::default();
        form.push("grant_type", "client_credentials");
        self.endpoint.request(form, &cx).await
    }

    /// `oauth2 client-credentials <client_id> at <endpoint>`.
    fn describe(&self) -> String {
        self.endpoint.describe("client-credentials")
    }

    fn default_fetch_timeout(&self) -> Duration {
        super::FETCH_TIMEOUT
    }
}
