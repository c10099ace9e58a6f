//! One token request: the form, the POST, and the answer read.

use std::fmt;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::header::{ACCEPT, AUTHORIZATION, CONTENT_TYPE};
use http::uri::Scheme;
use http::{Request, StatusCode, Uri};
use http_body_util::{BodyExt, Full, Limited};
use serde_json::Value;
use tower_service::Service;
use zeroize::Zeroizing;

use super::auth::ClientAuth;
use super::error::Error;
use crate::source::{FetchContext, Fetched};
use crate::tls::{HttpsClient, RootStore};

/// The largest answer read from the token endpoint.
const MAX_RESPONSE: usize = 1024 * 1024;

/// What both grants share: where to ask, who asks, and what for.
#[derive(Clone, Debug)]
pub(super) struct Endpoint {
    pub(super) uri: Uri,
    pub(super) client_id: String,
    pub(super) auth: ClientAuth,
    pub(super) https: HttpsClient<Full<Bytes>>,
    pub(super) scopes: Vec<String>,
    pub(super) audiences: Vec<String>,
    pub(super) resources: Vec<String>,
}

impl Endpoint {
    pub(super) fn new(uri: Uri, client_id: String, auth: ClientAuth, roots: RootStore) -> Self {
        Self {
            uri,
            client_id,
            auth,
            https: HttpsClient::new(roots),
            scopes: Vec::new(),
            audiences: Vec::new(),
            resources: Vec::new(),
        }
    }

    pub(super) fn describe(&self, grant: &str) -> String {
        format!("oauth2 {grant} {} at {}", self.client_id, self.uri)
    }

    /// Adds the scope, audiences, resources and client authentication to `form` (which
    /// holds the grant's own parameters), POSTs it, and reads the answer.
    pub(super) async fn request(
        &self,
        mut form: Form,
        cx: &FetchContext,
    ) -> Result<Fetched, Error> {
        if self.uri.scheme() != Some(&Scheme::HTTPS) {
            return Err(Error::InsecureEndpoint {
                endpoint: self.uri.clone(),
            });
        }
        if !self.scopes.is_empty() {
            form.push("scope", &self.scopes.join(" "));
        }
        for audience in &self.audiences {
            form.push("audience", audience);
        }
        for resource in &self.resources {
            form.push("resource", resource);
        }
        let authorization = self.auth.apply(&self.client_id, &mut form).await?;
        let mut request = Request::post(self.uri.clone())
            .header(CONTENT_TYPE, "application/x-www-form-urlencoded")
            .header(ACCEPT, "application/json");
        if let Some(value) = authorization {
            request = request.header(AUTHORIZATION, value);
        }
        let request = request
            .body(Full::new(form.into_body()))
            .expect("a POST to a valid URI with valid headers");

        // Counted from before the request, so the token never seems to live longer.
        let sent_at = cx.now();
        let mut https = self.https.clone();
        std::future::poll_fn(|ready| Service::poll_ready(&mut https, ready))
            .await
            .map_err(transport)?;
        let response = https.call(request).await.map_err(transport)?;
        let status = response.status();
        let body = read_answer(response.into_body()).await?;
        let issued = parse(status, &body)?;
        drop(body);
        issued.fetched(sent_at)
    }
}

fn transport(e: impl Into<Box<dyn std::error::Error + Send + Sync>>) -> Error {
    Error::Transport { source: e.into() }
}

/// The token endpoint's answer, whole, up to [`MAX_RESPONSE`].
pub(super) async fn read_answer<B>(body: B) -> Result<Bytes, Error>
where
    B: http_body::Body,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    Limited::new(body, MAX_RESPONSE)
        .collect()
        .await
        .map(|collected| collected.to_bytes())
        .map_err(transport)
}

/// The longest `expires_in` taken: 2^32 seconds (136 years, the TokenRequest API's cap
/// too). A longer one is refused: added to the clock, it could overflow `SystemTime`.
pub(super) const MAX_EXPIRES_IN: Duration = Duration::from_secs(1 << 32);

/// A token response's useful part.
pub(super) struct Issued {
    /// Secret.
    pub(super) access_token: Zeroizing<String>,
    /// `expires_in`; `None`: used until the server refuses it.
    pub(super) expires_in: Option<Duration>,
}

impl fmt::Debug for Issued {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Issued")
            .field(
                "access_token",
                &format_args!("<{} bytes>", self.access_token.len()),
            )
            .field("expires_in", &self.expires_in)
            .finish()
    }
}

impl Issued {
    /// The token, expiring `expires_in` after `sent_at`.
    ///
    /// # Errors
    ///
    /// [`Error::Response`] when that moment is past what the system clock holds.
    pub(super) fn fetched(self, sent_at: SystemTime) -> Result<Fetched, Error> {
        let mut token = self.access_token;
        let fetched = Fetched::new(std::mem::take(&mut *token));
        let Some(lifetime) = self.expires_in else {
            return Ok(fetched);
        };
        let at = sent_at.checked_add(lifetime).ok_or(Error::Response {
            problem: "has an expires_in past what the system clock holds",
        })?;
        Ok(fetched.with_expires_at(at))
    }
}

/// Reads the token endpoint's answer (RFC 6749 §5.1, §5.2), never quoting the body.
pub(super) fn parse(status: StatusCode, body: &[u8]) -> Result<Issued, Error> {
    let json: Option<Value> = serde_json::from_slice(body).ok();
    let field = |name| json.as_ref()?.get(name)?.as_str();
    if !status.is_success() {
        return Err(match field("error") {
            Some(code) => Error::OAuth {
                status,
                code: printable(code, 64),
                description: field("error_description").map(|d| printable(d, 512)),
            },
            None => Error::Status { status },
        });
    }
    let bad = |problem| Error::Response { problem };
    let Some(Value::Object(mut object)) = json else {
        return Err(bad("is not a JSON object"));
    };
    let access_token = match object.remove("access_token") {
        Some(Value::String(token)) if !token.is_empty() => Zeroizing::new(token),
        _ => return Err(bad("has no access_token")),
    };
    match object.get("token_type") {
        Some(Value::String(t)) if t.eq_ignore_ascii_case("bearer") => {}
        Some(Value::String(t)) => {
            return Err(Error::NotBearer {
                token_type: printable(t, 64),
            });
        }
        _ => return Err(bad("has no token_type")),
    }
    let not_seconds = || bad("has an expires_in that is not a number of seconds");
    let seconds = match object.get("expires_in") {
        None | Some(Value::Null) => 0,
        // Some servers send the number as a string.
        Some(Value::String(s)) => s.trim().parse().map_err(|_| not_seconds())?,
        Some(Value::Number(n)) => n
            .as_u64()
            .or_else(|| n.as_f64().filter(|s| *s >= 0.0).map(|s| s as u64))
            .ok_or_else(not_seconds)?,
        Some(_) => return Err(not_seconds()),
    };
    // Zero says nothing useful: the token is kept until a 401, as without one.
    let expires_in = (seconds > 0).then(|| Duration::from_secs(seconds));
    if expires_in.is_some_and(|lifetime| lifetime > MAX_EXPIRES_IN) {
        return Err(bad("has an expires_in over 2^32 seconds (136 years)"));
    }
    Ok(Issued {
        access_token,
        expires_in,
    })
}

fn printable(s: &str, max: usize) -> String {
    s.chars().filter(|c| !c.is_control()).take(max).collect()
}

/// An `application/x-www-form-urlencoded` body being built. Its values include secrets:
/// `Debug` shows the names alone.
#[derive(Default)]
pub(super) struct Form(Zeroizing<String>);

impl Form {
    pub(super) fn push(&mut self, name: &str, value: &str) {
        // Room for the pair however it encodes, made by a copy into a new buffer: a
        // `String`'s own growth would free the old one unwiped.
        let needed = self.0.len() + 2 + 3 * (name.len() + value.len());
        if needed > self.0.capacity() {
            let mut grown = Zeroizing::new(String::with_capacity(needed.max(2 * self.0.len())));
            grown.push_str(&self.0);
            self.0 = grown;
        }
        if !self.0.is_empty() {
            self.0.push('&');
        }
        encode_into(&mut self.0, name);
        self.0.push('=');
        encode_into(&mut self.0, value);
    }

    /// The body, wiped when the client drops it (it holds a client secret).
    pub(super) fn into_body(self) -> Bytes {
        Bytes::from_owner(self.0)
    }

    #[cfg(test)]
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }

    #[cfg(test)]
    pub(super) fn capacity(&self) -> usize {
        self.0.capacity()
    }
}

impl fmt::Debug for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.0.split('&').filter_map(|pair| pair.split('=').next());
        f.debug_list().entries(names).finish()
    }
}

/// Appends `s` form-urlencoded (WHATWG's serializer, as RFC 6749 Appendix B asks):
/// unreserved bytes as they are, space as `+`, the rest `%XX`.
pub(super) fn encode_into(out: &mut String, s: &str) {
    use std::fmt::Write as _;
    for byte in s.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => write!(out, "%{byte:02X}").expect("a String takes any write"),
        }
    }
}
