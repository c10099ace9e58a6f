//! [`TokenRequestBuilder`]: what to ask the TokenRequest API for, checked against the
//! API's rules before any request is made; and [`BoundObject`].

use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use ::kube::Client;
use serde_json::{Value, json};

use super::{InvalidTokenRequest, TokenRequestSource, describe, wire};

/// The API's least `expirationSeconds`.
const MIN_EXPIRATION: Duration = Duration::from_secs(600);

/// The API's largest `expirationSeconds`.
const MAX_EXPIRATION: Duration = Duration::from_secs(1 << 32);

/// The API's default `expirationSeconds`, used when the builder is given none.
const DEFAULT_EXPIRATION: Duration = Duration::from_secs(3600);

/// The object a token is bound to (`spec.boundObjectRef`): the token is valid only while
/// that object exists (and has that uid, when given).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct BoundObject {
    kind: &'static str,
    name: String,
    uid: Option<String>,
}

impl BoundObject {
    /// A pod, by name.
    pub fn pod(name: impl Into<String>) -> Self {
        Self::of("Pod", name)
    }

    /// A secret, by name.
    pub fn secret(name: impl Into<String>) -> Self {
        Self::of("Secret", name)
    }

    /// A node, by name (API servers from Kubernetes 1.32).
    pub fn node(name: impl Into<String>) -> Self {
        Self::of("Node", name)
    }

    fn of(kind: &'static str, name: impl Into<String>) -> Self {
        Self {
            kind,
            name: name.into(),
            uid: None,
        }
    }

    /// Only the object with this uid: one deleted and created again under the same name
    /// does not keep the token valid.
    pub fn uid(mut self, uid: impl Into<String>) -> Self {
        self.uid = Some(uid.into());
        self
    }

    pub(super) fn to_json(&self) -> Value {
        let mut reference = json!({"apiVersion": "v1", "kind": self.kind, "name": self.name});
        if let Some(uid) = &self.uid {
            reference["uid"] = json!(uid);
        }
        reference
    }
}

/// Builds a [`TokenRequestSource`]; see [`TokenRequestSource::builder`].
#[derive(Clone)]
pub struct TokenRequestBuilder {
    client: Client,
    cluster: String,
    namespace: String,
    service_account: Option<String>,
    audiences: Vec<String>,
    expiration: Duration,
    bound: Option<BoundObject>,
}

impl fmt::Debug for TokenRequestBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRequestBuilder")
            .field("cluster", &self.cluster)
            .field("namespace", &self.namespace)
            .field("service_account", &self.service_account)
            .field("audiences", &self.audiences)
            .field("expiration", &self.expiration)
            .field("bound", &self.bound)
            .finish_non_exhaustive()
    }
}

impl TokenRequestBuilder {
    pub(super) fn new(client: Client, cluster: String) -> Self {
        let namespace = client.default_namespace().to_owned();
        Self {
            client,
            cluster: cluster.trim_end_matches('/').to_owned(),
            namespace,
            service_account: None,
            audiences: Vec::new(),
            expiration: DEFAULT_EXPIRATION,
            bound: None,
        }
    }

    /// The namespace of the service account (default: the client's default namespace).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.namespace = namespace.into();
        self
    }

    /// The service account whose token is requested. Required.
    pub fn service_account(mut self, name: impl Into<String>) -> Self {
        self.service_account = Some(name.into());
        self
    }

    /// Adds an audience (`spec.audiences`): the service that checks the token. Without
    /// any, the token is for the API server's own audiences.
    pub fn audience(mut self, audience: impl Into<String>) -> Self {
        self.audiences.push(audience.into());
        self
    }

    /// Adds several audiences.
    pub fn audiences<I: IntoIterator<Item = impl Into<String>>>(mut self, audiences: I) -> Self {
        self.audiences.extend(audiences.into_iter().map(Into::into));
        self
    }

    /// How long each token lives (`spec.expirationSeconds`, whole seconds; default one
    /// hour, the API's default). The API refuses less than 10 minutes, and so does
    /// [`build`](Self::build). The API server may shorten it (its
    /// `--service-account-max-token-expiration`); the refresh follows what it answers.
    pub fn expiration(mut self, lifetime: Duration) -> Self {
        self.expiration = lifetime;
        self
    }

    /// Binds each token to an object (`spec.boundObjectRef`), such as the workload's pod.
    pub fn bound_to(mut self, object: BoundObject) -> Self {
        self.bound = Some(object);
        self
    }

    /// Checks the request against the API's rules and builds the source.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// # // A client that never reaches a cluster: building makes no request.
    /// # let client = kube::Client::new(
    /// #     tower::service_fn(|_: http::Request<kube::client::Body>| async {
    /// #         Err::<http::Response<kube::client::Body>, _>(std::io::Error::other("offline"))
    /// #     }),
    /// #     "default",
    /// # );
    /// use std::time::Duration;
    /// use bearer_reload::source::{InvalidTokenRequest, TokenRequestSource};
    ///
    /// let err = TokenRequestSource::builder(client, "https://10.0.0.1")
    ///     .namespace("team-a")
    ///     .service_account("payments")
    ///     .audience("vault")
    ///     .expiration(Duration::from_secs(599))
    ///     .build()
    ///     .unwrap_err();
    /// assert!(matches!(err, InvalidTokenRequest::ExpirationTooShort { seconds: 599, .. }));
    /// assert_eq!(
    ///     err.to_string(),
    ///     "serviceaccount team-a/payments (TokenRequest, audiences: vault): \
    ///      expirationSeconds 599 is below the API's minimum of 600 (10 minutes)"
    /// );
    /// # }
    /// ```
    pub fn build(self) -> Result<TokenRequestSource, InvalidTokenRequest> {
        let name = self
            .service_account
            .ok_or(InvalidTokenRequest::NoServiceAccount)?;
        let mut audiences = self.audiences;
        audiences.sort();
        audiences.dedup();
        let account = describe(&self.namespace, &name, &audiences);
        let invalid_name = |what, value: &str, problem| InvalidTokenRequest::InvalidName {
            account: account.clone(),
            what,
            value: value.to_owned(),
            problem,
        };
        if let Err(problem) = dns_label(&self.namespace) {
            return Err(invalid_name("namespace", &self.namespace, problem));
        }
        if let Err(problem) = dns_subdomain(&name) {
            return Err(invalid_name("service account", &name, problem));
        }
        if let Some(bound) = &self.bound
            && let Err(problem) = dns_subdomain(&bound.name)
        {
            return Err(invalid_name("bound object", &bound.name, problem));
        }
        if audiences.iter().any(String::is_empty) {
            return Err(InvalidTokenRequest::EmptyAudience { account });
        }
        let seconds = self.expiration.as_secs();
        if self.expiration < MIN_EXPIRATION {
            return Err(InvalidTokenRequest::ExpirationTooShort { account, seconds });
        }
        if self.expiration > MAX_EXPIRATION {
            return Err(InvalidTokenRequest::ExpirationTooLong { account, seconds });
        }
        let expiration = Duration::from_secs(seconds);
        let key = serde_json::to_string(&json!([
            self.cluster,
            self.namespace,
            name,
            audiences,
            seconds,
            self.bound.as_ref().map(BoundObject::to_json),
        ]))
        .expect("a JSON value serializes");
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        Ok(TokenRequestSource {
            body: wire::request_body(&audiences, expiration, self.bound.as_ref()),
            client: self.client,
            path: format!("/api/v1/namespaces/{}/serviceaccounts", self.namespace),
            name,
            expiration,
            account: account.into(),
            key,
            seed: hasher.finish(),
        })
    }
}

/// A DNS-1123 label, the rule for namespaces.
fn dns_label(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name.len() > 63 {
        return Err("longer than 63 characters");
    }
    if !name
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err("only lowercase letters, digits and '-' are allowed");
    }
    if name.starts_with('-') || name.ends_with('-') {
        return Err("must start and end with a letter or digit");
    }
    Ok(())
}

/// A DNS-1123 subdomain, the rule for service account and most object names.
fn dns_subdomain(name: &str) -> Result<(), &'static str> {
    if name.is_empty() {
        return Err("empty");
    }
    if name.len() > 253 {
        return Err("longer than 253 characters");
    }
    for part in name.split('.') {
        if part.is_empty() {
            return Err("has an empty part between dots");
        }
        if !part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err("only lowercase letters, digits, '-' and '.' are allowed");
        }
        if part.starts_with('-') || part.ends_with('-') {
            return Err("each part must start and end with a letter or digit");
        }
    }
    Ok(())
}
