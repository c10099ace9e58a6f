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
/// Each fetch POSTs `grant_type=client_credentials` (with the scope, audiences and
/// resources given) to the token endpoint over HTTPS, authenticated by the
/// [`ClientAuth`] given to [`new`](Self::new), and verifies the server with the CA bundle
/// given there too (a [`RootStore`], which follows the bundle as it rotates). The store
/// built on it is the cache:
///
/// - **Refresh**: the answer's `expires_in` becomes the token's expiry, and the store's
///   timer fetches a new token before it, by the store's margin (a tenth of the lifetime,
///   at least a minute, never before half of it) less a jitter. A token without
///   `expires_in` is kept until a server refuses it. An `expires_in` over 2^32 seconds
///   (136 years) is a bad answer ([`Error::Response`](super::Error::Response)), as is
///   any other the store could not add to the clock: the last good token stays.
/// - **401**: with [`retry_unauthorized`](crate::BearerLayer::retry_unauthorized) a token
///   that a resource server refuses (revoked, or expired early) is replaced by a new
///   request at once, once for a burst of refusals, and the refused request is sent again.
/// - **Failures** (an `invalid_client` after the secret was rotated at the server, a 5xx,
///   a refused connection) keep the last good token while it is valid; the store tries
///   again after 1 s, 2 s, 4 s ..., and reports the [`Error`].
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
///
/// `Debug` shows the endpoint, the client id, the authentication method and the
/// secret's length, never the secret.
#[derive(Clone, Debug)]
pub struct ClientCredentials {
    endpoint: Endpoint,
}

impl ClientCredentials {
    /// Tokens of `client_id` from `token_endpoint` (an `https://` URI: another scheme
    /// fails the first fetch with [`Error::InsecureEndpoint`]), authenticated by `auth`,
    /// the endpoint verified with `roots`.
    ///
    /// [`ClientAuth::none`] is refused by the server: the grant is for confidential
    /// clients.
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

    /// Adds a `resource` parameter (RFC 8707): the absolute URI of the service the token
    /// is for. One parameter each.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.endpoint.resources.push(resource.into());
        self
    }
}

impl TokenSource for ClientCredentials {
    type Error = Error;

    /// Asks the token endpoint for a new token, whatever the trigger: nothing is cached
    /// here, the store is the cache.
    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, Error> {
        let mut form = Form::default();
        form.push("grant_type", "client_credentials");
        self.endpoint.request(form, &cx).await
    }

    /// `oauth2 client-credentials <client_id> at <endpoint>`.
    fn describe(&self) -> String {
        self.endpoint.describe("client-credentials")
    }

    /// 30 s: a remote server, a TLS handshake, perhaps a cold start.
    fn default_fetch_timeout(&self) -> Duration {
        super::FETCH_TIMEOUT
    }
}
