//! [`TokenRequestSource`]: audience-bound service-account tokens from the Kubernetes
//! TokenRequest API, refreshed the way the kubelet refreshes them (feature `kube`). The
//! type's docs say how.

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

/// The API server's answer read as a fetch reads it, for the fuzz targets (`--cfg
/// fuzzing`, which cargo-fuzz sets; never in a normal build): the token with its expiry
/// and the kubelet's refresh point seen at `now`, or the problem with `body`.
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
/// A workload that calls Vault, or another service that checks a token's audience, asks the
/// API server for a token of a service account with that audience
/// (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`). This source makes that
/// request with a [`kube::Client`], whose own credentials must allow it (RBAC: `create` on
/// `serviceaccounts/token`); the store built on it keeps the token fresh:
///
/// - **Refresh**: each token asks to be fetched again at the kubelet's point (its
///   TokenManager's `requiresRefresh`): `exp − 20% of the TTL − jitter` or
///   `iat + 24 h − jitter`, whichever comes first, jitter 0–9 s; at once when the clock is
///   before `iat`. The store's timer fetches then, in the background: no request waits for
///   the API.
/// - **Failures** (403, 404, 5xx, timeouts) never replace a token that is still valid; the
///   timer retries after 1 s, 2 s, 4 s ..., never waiting past half the time the token has
///   left, and the store's [`status`](crate::TokenStore::status) shows the error, and
///   `expired` once the token has expired. kube's own retry of 429/503/504 (on
///   by default in `kube::Config`) runs inside each fetch until the store's
///   [`fetch_timeout`](crate::StoreBuilder::fetch_timeout) ends it: turn it off
///   (`default_retry = false`) to leave retries to the store.
/// - **401**: with [`retry_unauthorized`](crate::BearerLayer::retry_unauthorized) (or the
///   plain layer's reload), a token the server refuses is replaced at once, by a new
///   request: this source keeps no cache of its own, so a revoked token (a service account
///   deleted and created again, kubernetes#132802) is never handed out again.
/// - **Identities**: every fetch is made with this source's client, and its store is this
///   source's alone: a client whose credentials may not create the token gets the API
///   server's 403, never a token another client was given. Two layers that need the same
///   token share it by sharing one store (clone it), which makes one API call per refresh
///   window between them.
/// - **Bad requests**: what the API would refuse (an `expirationSeconds` under 600, a name
///   that is not a Kubernetes name, an empty audience) fails the first fetch, that is
///   [`load`](crate::StoreBuilder::load), with an error naming the account, before any
///   request is made.
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
/// Every fetch is one API call: the store is the cache.
///
/// [`kube::Client`]: https://docs.rs/kube/5/kube/struct.Client.html
#[derive(Clone)]
pub struct TokenRequestSource {
    client: Client,
    spec: Spec,
}

impl fmt::Debug for TokenRequestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // What it asks for; not the client.
        f.debug_struct("TokenRequestSource")
            .field("spec", &self.spec)
            .finish_non_exhaustive()
    }
}

impl TokenRequestSource {
    /// Tokens of `service_account`, in the client's default namespace, requested with
    /// `client`: for the API server's own audiences, living an hour (the API's default).
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

    /// Adds an audience (`spec.audiences`): the service that checks the token. Without
    /// any, the token is for the API server's own audiences.
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
    /// hour, the API's default). The API refuses less than 10 minutes, and so does the
    /// first fetch. The API server may shorten it (its
    /// `--service-account-max-token-expiration`); the refresh follows what it answers.
    pub fn expiration(mut self, lifetime: Duration) -> Self {
        self.spec.expiration = lifetime;
        self
    }

    /// Binds each token to the pod `name` (`spec.boundObjectRef`): the token is valid only
    /// while the pod exists, as a projected token is. A token is bound to one object: a
    /// later `bound_to_*` call replaces this one.
    pub fn bound_to_pod(self, name: impl Into<String>) -> Self {
        self.bound_to("Pod", name.into())
    }

    /// Binds each token to the secret `name`, as [`bound_to_pod`](Self::bound_to_pod)
    /// does to a pod.
    pub fn bound_to_secret(self, name: impl Into<String>) -> Self {
        self.bound_to("Secret", name.into())
    }

    /// Binds each token to the node `name` (API servers from Kubernetes 1.32), as
    /// [`bound_to_pod`](Self::bound_to_pod) does to a pod.
    pub fn bound_to_node(self, name: impl Into<String>) -> Self {
        self.bound_to("Node", name.into())
    }

    /// Only the bound object with this uid keeps the token valid: one deleted and created
    /// again under the same name does not. Needs a `bound_to_*` call (in either order);
    /// without one the first fetch fails with [`TokenRequestError::UidWithoutObject`].
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

    /// Asks the API server for a new token, whatever the trigger: after a 401 above all,
    /// nothing cached may answer.
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

/// The token `issued`, due for refresh at the kubelet's point seen at `now` (with a
/// jitter drawn from `seed` and the expiry), and that point.
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
