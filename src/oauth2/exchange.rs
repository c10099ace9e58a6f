//! [`TokenExchange`]: token exchange (RFC 8693) of a store's token.

use std::time::Duration;

use http::Uri;

use super::auth::ClientAuth;
use super::error::Error;
use super::request::{Endpoint, Form};
use crate::TokenStore;
use crate::source::{FetchContext, Fetched, TokenSource};
use crate::tls::RootStore;

const GRANT_TYPE: &str = "urn:ietf:params:oauth:grant-type:token-exchange";

/// RFC 8693's token type of a JWT: the default `subject_token_type`.
pub(super) const TOKEN_TYPE_JWT: &str = "urn:ietf:params:oauth:token-type:jwt";

/// Access tokens by token exchange (RFC 8693): a workload trades a token it has (its
/// projected service-account token, another issuer's) for one the token endpoint issues.
///
/// Each fetch sends its [`TokenStore`]'s current token as the `subject_token`, with the
/// `subject_token_type` and the parameters given, authenticated as its [`ClientAuth`]
/// says. Refresh, 401s and failures are the store's, as for
/// [`ClientCredentials`](super::ClientCredentials).
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use bearer_reload::oauth2::{ClientAuth, TokenExchange};
/// use bearer_reload::source::FileSource;
/// use bearer_reload::tls::RootStore;
/// use bearer_reload::TokenStore;
///
/// let roots = RootStore::builder(FileSource::new("/etc/idp/ca.crt")).load().await?;
/// let subject = TokenStore::builder(FileSource::new("/var/run/secrets/tokens/idp-token"))
///     .load()
///     .await?;
/// let source = TokenExchange::new(
///     "https://idp.example/token".parse()?,
///     "payments",
///     ClientAuth::none(),
///     roots,
///     subject,
/// )
/// .audience("https://ledger.example")
/// .scope("ledger.write");
/// let store = TokenStore::builder(source).load().await?;
/// # let _ = store; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct TokenExchange {
    endpoint: Endpoint,
    subject: TokenStore,
    subject_token_type: String,
    requested_token_type: Option<String>,
}

impl TokenExchange {
    /// Tokens for `client_id` from `token_endpoint` (verified with `roots`), authenticated
    /// by `auth`, in exchange for `subject`'s current token at each fetch.
    pub fn new(
        token_endpoint: Uri,
        client_id: impl Into<String>,
        auth: ClientAuth,
        roots: RootStore,
        subject: TokenStore,
    ) -> Self {
        Self {
            endpoint: Endpoint::new(token_endpoint, client_id.into(), auth, roots),
            subject,
            subject_token_type: TOKEN_TYPE_JWT.to_owned(),
            requested_token_type: None,
        }
    }

    /// The `subject_token_type` (default `urn:ietf:params:oauth:token-type:jwt`):
    /// `urn:ietf:params:oauth:token-type:access_token`, `...:id_token`, ...
    pub fn subject_token_type(mut self, token_type: impl Into<String>) -> Self {
        self.subject_token_type = token_type.into();
        self
    }

    /// The `requested_token_type` (none by default: the server's choice, usually an
    /// access token). The token issued must still be a bearer token.
    pub fn requested_token_type(mut self, token_type: impl Into<String>) -> Self {
        self.requested_token_type = Some(token_type.into());
        self
    }

    /// Adds a scope; the scopes go in one `scope` parameter, space-separated.
    pub fn scope(mut self, scope: impl Into<String>) -> Self {
        self.endpoint.scopes.push(scope.into());
        self
    }

    /// Adds an `audience` parameter: the logical name of the service the token is for.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.endpoint.audiences.push(audience.into());
        self
    }

    /// Adds a `resource` parameter: the absolute URI of the service the token is for.
    pub fn resource(mut self, resource: impl Into<String>) -> Self {
        self.endpoint.resources.push(resource.into());
        self
    }
}

impl TokenSource for TokenExchange {
    type Error = Error;

    /// Exchanges the subject store's current token, whatever the trigger.
    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, Error> {
        let current = self.subject.current();
        let value = current.header_value().as_bytes();
        let subject = String::from_utf8_lossy(value.strip_prefix(b"Bearer ").unwrap_or(value));
        let mut form = Form::default();
        form.push("grant_type", GRANT_TYPE);
        form.push("subject_token", &subject);
        form.push("subject_token_type", &self.subject_token_type);
        if let Some(requested) = &self.requested_token_type {
            form.push("requested_token_type", requested);
        }
        self.endpoint.request(form, &cx).await
    }

    /// `oauth2 token-exchange <client_id> at <endpoint>`.
    fn describe(&self) -> String {
        self.endpoint.describe("token-exchange")
    }

    fn default_fetch_timeout(&self) -> Duration {
        super::FETCH_TIMEOUT
    }
}
