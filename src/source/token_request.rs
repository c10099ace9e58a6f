//! [`TokenRequestSource`]: audience-bound service-account tokens from the Kubernetes
//! TokenRequest API (feature `kube`).

use std::fmt;
use std::time::{Duration, UNIX_EPOCH};

use ::kube::Client;
use ::kube::api::PostParams;
use zeroize::Zeroizing;

use super::{FetchContext, Fetched, TokenSource};

mod error;
mod kubelet;
mod spec;
mod wire;

/// For the fuzz targets (`--cfg fuzzing`): the API server's answer as a fetch reads it.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_parse_response(
    body: &str,
    asked: Duration,
    seed: u64,
    now: std::time::SystemTime,
) -> Result<Fetched, &'static str> {
    wire::parse_response(body, asked).map(|issued| answer(issued, seed, now).0)
}

pub use error::TokenRequestError;

use spec::{DEFAULT_EXPIRATION, Spec};

/// Tokens of a service account from the Kubernetes TokenRequest API, refreshed the way the
/// kubelet refreshes them.
///
/// For a service that checks a token's audience (Vault, ...): `POST
/// /api/v1/namespaces/{ns}/serviceaccounts/{name}/token` with a [`kube::Client`] whose
/// credentials allow it (RBAC: `create` on `serviceaccounts/token`). The store built on it:
///
/// - **Refresh**: in the background, at the kubelet's point (its TokenManager's
///   `requiresRefresh`): `exp − 20% of the TTL − jitter` or `iat + 24 h − jitter`,
///   whichever comes first, jitter 0–9 s; at once when the clock is before `iat`.
/// - **Failures** never replace a token that is still valid. kube's own retry of
///   429/503/504 runs inside each fetch until the store's
///   [`fetch_timeout`](crate::StoreBuilder::fetch_timeout) ends it: turn it off
///   (`default_retry = false`) to leave retries to the store.
/// - **401**: every fetch is a new request (the store is the cache), so a token the server
///   refuses is replaced at once, and a revoked one is never handed out again.
/// - **Identities**: every fetch is made with this source's client, never answered with a
///   token another client was given. Layers that need the same token share one store.
/// - **Bad requests**: what the API would refuse (an `expirationSeconds` under 600, a name
///   that is not a Kubernetes name, an empty audience) fails
///   [`load`](crate::StoreBuilder::load) before any request is made.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use bearer_reload::{BearerLayer, TokenStore};
/// use bearer_reload::source::TokenRequestSource;
///
/// let client = kube::Client::try_default().await?;
/// let source = TokenRequestSource::new(client, "payments") // in the client's default namespace
///     .audience("vault")
///     .expiration(Duration::from_secs(600));
/// let store = TokenStore::builder(source).load().await?;
/// let layer = BearerLayer::new(store).retry_unauthorized();
/// // ServiceBuilder::new().layer(layer).service(http_client_to_vault) ...
/// # let _ = layer; Ok(()) }
/// ```
///
/// [`kube::Client`]: https://docs.rs/kube/5/kube/struct.Client.html
#[derive(Clone)]
pub struct TokenRequestSource {
    client: Client,
    spec: Spec,
}

impl fmt::Debug for TokenRequestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRequestSource")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl TokenRequestSource {
    /// Tokens of `service_account`, in the client's default namespace, requested with
    /// `client`.
    pub fn new(client: Client, service_account: impl Into<String>) -> Self {
        let namespace = client.default_namespace().to_owned();
        Self {
            client,
            spec: Spec {
                namespace,
                name: service_account.into(),
                audiences: Vec::new(),
                expiration: DEFAULT_EXPIRATION,
                bound: None,
                bound_uid: None,
            },
        }
    }

    /// The namespace of the service account (default: the client's default namespace).
    pub fn namespace(mut self, namespace: impl Into<String>) -> Self {
        self.spec.namespace = namespace.into();
        self
    }

    /// Adds an audience (`spec.audiences`); without any, the API server's own.
    pub fn audience(self, audience: impl Into<String>) -> Self {
        self.audiences([audience])
    }

    /// Adds several audiences.
    pub fn audiences<I: IntoIterator<Item = impl Into<String>>>(mut self, audiences: I) -> Self {
        let all = &mut self.spec.audiences;
        all.extend(audiences.into_iter().map(Into::into));
        all.sort();
        all.dedup();
        self
    }

    /// How long each token lives (`spec.expirationSeconds`, whole seconds; default one
    /// hour). At least 10 minutes. The API server may shorten it; the refresh follows what
    /// it answers.
    pub fn expiration(mut self, lifetime: Duration) -> Self {
        self.spec.expiration = lifetime;
        self
    }

    /// Binds each token to the pod `name` (`spec.boundObjectRef`): valid only while the pod
    /// exists. A later `bound_to_*` call replaces the object.
    pub fn bound_to_pod(self, name: impl Into<String>) -> Self {
        self.bound_to("Pod", name.into())
    }

    /// Binds each token to the secret `name`, as [`bound_to_pod`](Self::bound_to_pod).
    pub fn bound_to_secret(self, name: impl Into<String>) -> Self {
        self.bound_to("Secret", name.into())
    }

    /// Binds each token to the node `name` (Kubernetes 1.32+), as
    /// [`bound_to_pod`](Self::bound_to_pod).
    pub fn bound_to_node(self, name: impl Into<String>) -> Self {
        self.bound_to("Node", name.into())
    }

    /// Only the bound object with this uid keeps the token valid. Needs a `bound_to_*`
    /// call (in either order), else [`TokenRequestError::UidWithoutObject`].
    pub fn bound_uid(mut self, uid: impl Into<String>) -> Self {
        self.spec.bound_uid = Some(uid.into());
        self
    }

    fn bound_to(mut self, kind: &'static str, name: String) -> Self {
        self.spec.bound = Some((kind, name));
        self
    }
}

impl TokenSource for TokenRequestSource {
    type Error = TokenRequestError;

    /// Asks the API server for a new token, whatever the trigger.
    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, TokenRequestError> {
        let checked = self.spec.check()?;
        let request = ::kube::core::Request::new(&checked.path)
            .create_subresource(
                "token",
                &self.spec.name,
                &PostParams::default(),
                checked.body,
            )
            .map_err(|e| TokenRequestError::from_kube(::kube::Error::BuildRequest(e)))?;
        let body = self
            .client
            .request_text(request)
            .await
            .map(Zeroizing::new)
            .map_err(TokenRequestError::from_kube)?;
        let issued = wire::parse_response(&body, checked.expiration)
            .map_err(|problem| TokenRequestError::Response { problem })?;
        drop(body);
        let expires_at = issued.expires_at;
        let (fetched, refresh) = answer(issued, checked.seed, cx.now());
        tracing::debug!(
            source = %self.describe(),
            trigger = cx.trigger().as_str(),
            expires_at = %crate::clock::Rfc3339(expires_at),
            refresh_at = %crate::clock::Rfc3339(refresh),
            "TokenRequest answered"
        );
        Ok(fetched)
    }

    /// `serviceaccount team-a/payments (TokenRequest, audiences: vault)`.
    fn describe(&self) -> String {
        let audiences = if self.spec.audiences.is_empty() {
            "the API server's".to_owned()
        } else {
            self.spec.audiences.join(", ")
        };
        format!(
            "serviceaccount {}/{} (TokenRequest, audiences: {audiences})",
            self.spec.namespace, self.spec.name
        )
    }
}

/// The token `issued`, due for refresh at the kubelet's point seen at `now`, and that point.
fn answer(
    issued: wire::Issued,
    seed: u64,
    now: std::time::SystemTime,
) -> (Fetched, std::time::SystemTime) {
    let secs = issued
        .expires_at
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let jitter = kubelet::jitter(seed ^ secs);
    let refresh = kubelet::refresh_point(now, issued.expires_at, issued.ttl, jitter);
    let mut token = issued.token;
    let fetched = Fetched::new(std::mem::take(&mut *token))
        .with_expires_at(issued.expires_at)
        .with_refresh_at(refresh);
    (fetched, refresh)
}

#[cfg(test)]
mod tests;
