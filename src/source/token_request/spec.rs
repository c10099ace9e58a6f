//! What a [`TokenRequestSource`](super::TokenRequestSource) asks the API for, checked
//! against the API's rules before any request is made; and the object a token is bound to.

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
pub(super) struct BoundObject {
    /// `Pod`, `Secret` or `Node`.
    pub(super) kind: &'static str,
    pub(super) name: String,
    pub(super) uid: Option<String>,
}

impl BoundObject {
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
    /// The uid of the bound object, given apart from it.
    pub(super) bound_uid: Option<String>,
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
        let bound = match (&self.bound, &self.bound_uid) {
            (None, Some(_)) => return Err(TokenRequestError::UidWithoutObject),
            (Some(object), uid) => Some(BoundObject {
                uid: uid.clone(),
                ..object.clone()
            }),
            (None, None) => None,
        };
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
            bound.as_ref().map(BoundObject::to_json),
        ]))
        .expect("a JSON value serializes");
        let mut hasher = DefaultHasher::new();
        key.hash(&mut hasher);
        Ok(Checked {
            path: format!("/api/v1/namespaces/{}/serviceaccounts", self.namespace),
            body: wire::request_body(&audiences, expiration, bound.as_ref()),
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
