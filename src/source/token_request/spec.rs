//! What a [`TokenRequestSource`](super::TokenRequestSource) asks the API for, checked
//! against the API's rules before any request is made; and [`BoundObject`].

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use serde_json::{Value, json};

use super::{TokenRequestError, wire};

/// The API's least `expirationSeconds`.
const MIN_EXPIRATION: Duration = Duration::from_secs(600);

/// The API's largest `expirationSeconds`.
const MAX_EXPIRATION: Duration = Duration::from_secs(1 << 32);

/// The API's default `expirationSeconds`, used when the source is given none.
pub(super) const DEFAULT_EXPIRATION: Duration = Duration::from_secs(3600);

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

/// What to ask for, as the user gave it.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    pub(super) namespace: String,
    pub(super) name: String,
    pub(super) audiences: Vec<String>,
    pub(super) expiration: Duration,
    pub(super) bound: Option<BoundObject>,
}

/// A request the API accepts, ready to send.
pub(super) struct Checked {
    /// `/api/v1/namespaces/{ns}/serviceaccounts`.
    pub(super) path: String,
    /// The request's body.
    pub(super) body: Vec<u8>,
    /// `expirationSeconds` as asked for.
    pub(super) expiration: Duration,
    /// Drawn from what is asked for, so that each token's jitter is its own.
    pub(super) seed: u64,
}

impl Spec {
    /// Checks the request against the API's rules (see the tests for each).
    pub(super) fn check(&self) -> Result<Checked, TokenRequestError> {
        let mut audiences = self.audiences.clone();
        audiences.sort();
        audiences.dedup();
        let invalid_name = |what, value: &str, problem| TokenRequestError::InvalidName {
            what,
            value: value.to_owned(),
            problem,
        };
        if let Err(problem) = dns_label(&self.namespace) {
            return Err(invalid_name("namespace", &self.namespace, problem));
        }
        if let Err(problem) = dns_subdomain(&self.name) {
            return Err(invalid_name("service account", &self.name, problem));
        }
        if let Some(bound) = &self.bound
            && let Err(problem) = dns_subdomain(&bound.name)
        {
            return Err(invalid_name("bound object", &bound.name, problem));
        }
        if audiences.iter().any(String::is_empty) {
            return Err(TokenRequestError::EmptyAudience);
        }
        let seconds = self.expiration.as_secs();
        if self.expiration < MIN_EXPIRATION {
            return Err(TokenRequestError::ExpirationTooShort { seconds });
        }
        if self.expiration > MAX_EXPIRATION {
            return Err(TokenRequestError::ExpirationTooLong { seconds });
        }
        let expiration = Duration::from_secs(seconds);
        let key = serde_json::to_string(&json!([
            self.namespace,
            self.name,
            audiences,
            seconds,
            self.bound.as_ref().map(BoundObject::to_json),
        ]))
        .expect("a JSON value serializes");
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        Ok(Checked {
            path: format!("/api/v1/namespaces/{}/serviceaccounts", self.namespace),
            body: wire::request_body(&audiences, expiration, self.bound.as_ref()),
            expiration,
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
