//! [`ClientAuth`]: how the client authenticates at the token endpoint.

use std::fmt;
use std::path::PathBuf;
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;

use super::error::Error;
use super::form::{Form, encode_into};
use super::token_file::read_token_file;

/// RFC 7523's client assertion type: a JWT.
pub(super) const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How the client authenticates at the token endpoint: one method, as the client is
/// registered with one (`token_endpoint_auth_method`).
///
/// Given whole to [`ClientCredentials::new`](super::ClientCredentials::new) or
/// [`TokenExchange::new`](super::TokenExchange::new), so that a client has exactly one.
/// `Debug` shows the method and the secret's length, never the secret.
///
/// # Examples
///
/// ```
/// use bearer_reload::oauth2::ClientAuth;
///
/// let auth = ClientAuth::client_secret_basic("s3cr3t");
/// assert_eq!(format!("{auth:?}"), "client_secret_basic(<6 bytes>)");
/// ```
#[derive(Clone)]
pub struct ClientAuth(pub(super) Method);

#[derive(Clone)]
pub(super) enum Method {
    None,
    SecretBasic(Secret),
    SecretPost(Secret),
    AssertionFile(PathBuf),
}

/// A client secret: shown by its length only.
#[derive(Clone)]
pub(super) struct Secret(Arc<str>);

impl ClientAuth {
    /// No authentication: a public client (`none`), which sends its `client_id` in the
    /// form. Allowed for token exchange, where the subject token is the credential; the
    /// client-credentials grant is for confidential clients only (RFC 6749 §4.4).
    pub fn none() -> Self {
        ClientAuth(Method::None)
    }

    /// `client_secret_basic` (RFC 6749 §2.3.1): the client id and `secret`, each
    /// form-urlencoded, in an HTTP Basic `Authorization` header (marked sensitive).
    pub fn client_secret_basic(secret: impl Into<String>) -> Self {
        ClientAuth(Method::SecretBasic(Secret(secret.into().into())))
    }

    /// `client_secret_post` (RFC 6749 §2.3.1): `client_id` and `client_secret` in the form.
    pub fn client_secret_post(secret: impl Into<String>) -> Self {
        ClientAuth(Method::SecretPost(Secret(secret.into().into())))
    }

    /// A JWT client assertion (RFC 7523 §2.2: `private_key_jwt`, or a workload identity
    /// federated by the server) read from the file at `path` at every fetch: a projected
    /// service-account token that the kubelet rotates, a SPIFFE JWT-SVID that an agent
    /// writes. Sent as `client_assertion`, with `client_assertion_type`
    /// `urn:ietf:params:oauth:client-assertion-type:jwt-bearer` and the `client_id`.
    ///
    /// Each fetch reads the file anew, so a rotated assertion is used from the next fetch
    /// on; a server that accepts each `jti` once needs a new assertion in the file for
    /// each fetch.
    pub fn client_assertion_file(path: impl Into<PathBuf>) -> Self {
        ClientAuth(Method::AssertionFile(path.into()))
    }

    /// The method's registered name (`client_secret_basic`, `private_key_jwt`, ...).
    pub(super) fn name(&self) -> &'static str {
        match &self.0 {
            Method::None => "none",
            Method::SecretBasic(_) => "client_secret_basic",
            Method::SecretPost(_) => "client_secret_post",
            Method::AssertionFile(_) => "client_assertion_file",
        }
    }

    /// Adds the client's credentials to `form`, and returns the `Authorization` value of
    /// `client_secret_basic`.
    pub(super) async fn apply(
        &self,
        client_id: &str,
        form: &mut Form,
    ) -> Result<Option<HeaderValue>, Error> {
        match &self.0 {
            Method::None => form.push("client_id", client_id),
            Method::SecretBasic(secret) => return Ok(Some(basic(client_id, &secret.0))),
            Method::SecretPost(secret) => {
                form.push("client_id", client_id);
                form.push("client_secret", &secret.0);
            }
            Method::AssertionFile(path) => {
                let assertion = read_token_file("client assertion", path).await?;
                form.push("client_id", client_id);
                form.push("client_assertion_type", JWT_BEARER);
                form.push("client_assertion", &assertion);
            }
        }
        Ok(None)
    }
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))`, marked sensitive.
pub(super) fn basic(client_id: &str, secret: &str) -> HeaderValue {
    let mut pair = String::new();
    encode_into(&mut pair, client_id);
    pair.push(':');
    encode_into(&mut pair, secret);
    let mut value = HeaderValue::try_from(format!("Basic {}", STANDARD.encode(pair)))
        .expect("base64 is a valid header value");
    value.set_sensitive(true);
    value
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Method::None => f.write_str("none"),
            Method::SecretBasic(s) | Method::SecretPost(s) => {
                write!(f, "{}(<{} bytes>)", self.name(), s.0.len())
            }
            Method::AssertionFile(path) => write!(f, "{}({})", self.name(), path.display()),
        }
    }
}
