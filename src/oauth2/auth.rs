//! [`ClientAuth`], and the token files (a client assertion, a subject token) it reads.

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::HeaderValue;
use zeroize::Zeroizing;

use super::error::Error;
use super::request::{Form, encode_into};

pub(super) const JWT_BEARER: &str = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer";

/// How the client authenticates at the token endpoint: the one method it is registered
/// with (`token_endpoint_auth_method`). `Debug` shows the method and the secret's length,
/// never the secret.
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
pub struct ClientAuth(Method);

/// The method; a client secret is shown by its length only, and wiped when dropped.
#[derive(Clone)]
enum Method {
    None,
    SecretBasic(Arc<Zeroizing<String>>),
    SecretPost(Arc<Zeroizing<String>>),
    AssertionFile(PathBuf),
}

impl ClientAuth {
    /// No authentication: a public client, which sends its `client_id` in the form. For
    /// token exchange: the client-credentials grant is for confidential clients only.
    pub fn none() -> Self {
        ClientAuth(Method::None)
    }

    /// `client_secret_basic` (RFC 6749 §2.3.1): the client id and `secret`, each
    /// form-urlencoded, in an HTTP Basic `Authorization` header (marked sensitive).
    pub fn client_secret_basic(secret: impl Into<String>) -> Self {
        ClientAuth(Method::SecretBasic(Arc::new(Zeroizing::new(secret.into()))))
    }

    /// `client_secret_post` (RFC 6749 §2.3.1): `client_id` and `client_secret` in the form.
    pub fn client_secret_post(secret: impl Into<String>) -> Self {
        ClientAuth(Method::SecretPost(Arc::new(Zeroizing::new(secret.into()))))
    }

    /// A JWT client assertion (RFC 7523 §2.2: `private_key_jwt`, or a workload identity
    /// federated by the server), read anew from the file at `path` at every fetch: a
    /// projected service-account token, a SPIFFE JWT-SVID. A server that accepts each
    /// `jti` once needs a new assertion in the file for each fetch.
    pub fn client_assertion_file(path: impl Into<PathBuf>) -> Self {
        ClientAuth(Method::AssertionFile(path.into()))
    }

    /// Adds the client's credentials to `form`; returns `client_secret_basic`'s header.
    pub(super) async fn apply(
        &self,
        client_id: &str,
        form: &mut Form,
    ) -> Result<Option<HeaderValue>, Error> {
        if let Method::SecretBasic(secret) = &self.0 {
            return Ok(Some(basic(client_id, secret)));
        }
        form.push("client_id", client_id);
        match &self.0 {
            Method::SecretPost(secret) => form.push("client_secret", secret),
            Method::AssertionFile(path) => {
                let assertion = read_token_file("client assertion", path).await?;
                form.push("client_assertion_type", JWT_BEARER);
                form.push("client_assertion", &assertion);
            }
            Method::None | Method::SecretBasic(_) => {}
        }
        Ok(None)
    }
}

/// `Basic base64(urlencode(id) ":" urlencode(secret))`, marked sensitive, in buffers
/// made at their size and wiped when dropped.
pub(super) fn basic(client_id: &str, secret: &str) -> HeaderValue {
    // Each character encodes to at most three.
    let mut pair = Zeroizing::new(String::with_capacity(
        3 * (client_id.len() + secret.len()) + 1,
    ));
    encode_into(&mut pair, client_id);
    pair.push(':');
    encode_into(&mut pair, secret);
    let mut value = Zeroizing::new(String::with_capacity(6 + pair.len().div_ceil(3) * 4));
    value.push_str("Basic ");
    STANDARD.encode_string(pair.as_bytes(), &mut value);
    let bytes = Zeroizing::new(std::mem::take(&mut *value).into_bytes());
    let mut value = HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(bytes))
        .expect("base64 is a valid header value");
    value.set_sensitive(true);
    value
}

impl fmt::Debug for ClientAuth {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            Method::None => f.write_str("none"),
            Method::SecretBasic(s) => write!(f, "client_secret_basic(<{} bytes>)", s.len()),
            Method::SecretPost(s) => write!(f, "client_secret_post(<{} bytes>)", s.len()),
            Method::AssertionFile(path) => write!(f, "client_assertion_file({})", path.display()),
        }
    }
}

/// The largest client assertion or subject token file read.
const MAX_FILE: u64 = 64 * 1024;

/// Reads a token (an assertion, a subject token) from `path`: one line of visible ASCII
/// once surrounding whitespace is trimmed. Errors name the file, never its content.
pub(super) async fn read_token_file(
    what: &'static str,
    path: &Path,
) -> Result<Zeroizing<String>, Error> {
    use tokio::io::AsyncReadExt as _;
    let read_error = |source| Error::ReadFile {
        what,
        path: path.to_owned(),
        source,
    };
    let bad = |problem| Error::BadFile {
        what,
        path: path.to_owned(),
        problem,
    };
    let mut file = tokio::fs::File::open(path).await.map_err(read_error)?;
    let len = file.metadata().await.map_err(read_error)?.len();
    // Made at the file's size (one more to see the end), so that no growth frees an
    // unwiped copy; `take` stops a file that grows past the limit meanwhile.
    let mut bytes = Zeroizing::new(Vec::with_capacity(len.min(MAX_FILE) as usize + 1));
    let mut limited = (&mut file).take(MAX_FILE + 1);
    limited.read_to_end(&mut bytes).await.map_err(read_error)?;
    if bytes.len() as u64 > MAX_FILE {
        return Err(bad("is larger than 64 KiB"));
    }
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(bad("is empty"));
    }
    if !token.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(bad(
            "holds more than one token, or characters a token cannot have",
        ));
    }
    let token = String::from_utf8(token.to_vec()).expect("visible ASCII is UTF-8");
    Ok(Zeroizing::new(token))
}
