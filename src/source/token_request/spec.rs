//! What a [`TokenRequestSource`](super::TokenRequestSource) asks the API for, checked
//! against the API's rules before any request is made; and the object a token is bound to.

use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::time::Duration;

use serde_json::json;

use super::TokenRequestError;

const MIN_EXPIRATION: Duration = Duration::from_secs(600);

const MAX_EXPIRATION: Duration = Duration::from_secs(1 << 32);

/// The API's default `expirationSeconds`.
pub(super) const DEFAULT_EXPIRATION: Duration = Duration::from_secs(3600);

/// What to ask for, as the user gave it.
#[derive(Debug, Clone)]
pub(super) struct Spec {
    pub(super) namespace: String,
    pub(super) name: String,
    /// Sorted, without repeats.
    pub(super) audiences: Vec<String>,
    pub(super) expiration: Duration,
    /// The object a token is bound to (`spec.boundObjectRef`), by kind and name.
    pub(super) bound: Option<(&'static str, String)>,
    pub(super) bound_uid: Option<String>,
}

/// A request the API accepts, ready to send.
pub(super) struct Checked {
    /// `/api/v1/namespaces/{ns}/serviceaccounts`.
    pub(super) path: String,
    pub(super) body: Vec<u8>,
    /// `expirationSeconds` as asked for.
    pub(super) expiration: Duration,
    /// Drawn from what is asked for, so that each token's jitter is its own.
    pub(super) seed: u64,
}

impl Spec {
    /// Checks the request against the API's rules.
    pub(super) fn check(&self) -> Result<Checked, TokenRequestError> {
        let names = [
            ("namespace", &self.namespace, false),
            ("service account", &self.name, true),
        ];
        let bound = self
            .bound
            .as_ref()
            .map(|(_, name)| ("bound object", name, true));
        for (what, value, subdomain) in names.into_iter().chain(bound) {
            dns_name(value, subdomain).map_err(|problem| TokenRequestError::InvalidName {
                what,
                value: value.clone(),
                problem,
            })?;
        }
        let bound = match (&self.bound, &self.bound_uid) {
            (None, Some(_)) => return Err(TokenRequestError::UidWithoutObject),
            (None, None) => None,
            (Some((kind, name)), uid) => {
                let mut reference = json!({"apiVersion": "v1", "kind": kind, "name": name});
                if let Some(uid) = uid {
                    reference["uid"] = json!(uid);
                }
                Some(reference)
            }
        };
        if self.audiences.iter().any(String::is_empty) {
            return Err(TokenRequestError::EmptyAudience);
        }
        let seconds = self.expiration.as_secs();
        if self.expiration < MIN_EXPIRATION {
            return Err(TokenRequestError::ExpirationTooShort { seconds });
        }
        if self.expiration > MAX_EXPIRATION {
            return Err(TokenRequestError::ExpirationTooLong { seconds });
        }
        let mut spec = json!({ "expirationSeconds": seconds });
        if !self.audiences.is_empty() {
            spec["audiences"] = json!(self.audiences);
        }
        if let Some(bound) = bound {
            spec["boundObjectRef"] = bound;
        }
        let mut hasher = DefaultHasher::new();
        json!([self.namespace, self.name, spec])
            .to_string()
            .hash(&mut hasher);
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {},
            "spec": spec,
        });
        Ok(Checked {
            path: format!("/api/v1/namespaces/{}/serviceaccounts", self.namespace),
            body: request.to_string().into_bytes(),
            expiration: Duration::from_secs(seconds),
            seed: hasher.finish(),
        })
    }
}

/// A DNS-1123 subdomain, the rule for service account and most object names; or, not
/// `subdomain`, a DNS-1123 label, the rule for namespaces: one part, of at most 63.
fn dns_name(name: &str, subdomain: bool) -> Result<(), &'static str> {
    let [long, chars, ends] = if subdomain {
        [
            "longer than 253 characters",
            "only lowercase letters, digits, '-' and '.' are allowed",
            "each part must start and end with a letter or digit",
        ]
    } else {
        [
            "longer than 63 characters",
            "only lowercase letters, digits and '-' are allowed",
            "must start and end with a letter or digit",
        ]
    };
    if name.is_empty() {
        return Err("empty");
    }
    if name.len() > if subdomain { 253 } else { 63 } {
        return Err(long);
    }
    let parts = if subdomain {
        name.split('.').collect()
    } else {
        vec![name]
    };
    for part in parts {
        if part.is_empty() {
            return Err("has an empty part between dots");
        }
        if !part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        {
            return Err(chars);
        }
        if part.starts_with('-') || part.ends_with('-') {
            return Err(ends);
        }
    }
    Ok(())
}
