//! [`TokenRequestSource`]: audience-bound service-account tokens from the Kubernetes
//! TokenRequest API, refreshed the way the kubelet refreshes them (feature `kube`). The
//! type's docs say how.

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use ::kube::Client;
use ::kube::api::PostParams;

use super::{FetchContext, Fetched, TokenSource};

mod builder;
mod error;
mod kubelet;
mod wire;

pub use builder::{BoundObject, TokenRequestBuilder};
pub use error::{InvalidTokenRequest, TokenRequestError};

/// Tokens of a service account from the Kubernetes TokenRequest API, refreshed the way the
/// kubelet refreshes them.
///
/// A workload that calls Vault, or another service that checks a token's audience, asks the
/// API server for a token of a service account with that audience
/// (`POST /api/v1/namespaces/{ns}/serviceaccounts/{name}/token`). This source makes that
/// request with a [`kube::Client`]; the store built on it keeps the token
/// fresh:
///
/// - **Refresh**: each token asks to be fetched again at the kubelet's point (its
///   TokenManager's `requiresRefresh`): `exp − 20% of the TTL − jitter` or
///   `iat + 24 h − jitter`, whichever comes first, jitter 0–9 s; at once when the clock is
///   before `iat`. The store's timer fetches then, in the background: no request waits for
///   the API.
/// - **Failures** (403, 404, 5xx, timeouts) never replace a token that is still valid; the
///   timer retries after 1 s, 2 s, 4 s ..., never waiting past half the time the token has
///   left, and the store's [`status`](crate::TokenStore::status) shows the error, and
///   `Freshness::Expired` once the token has expired. kube's own retry of 429/503/504 (on
///   by default in `kube::Config`) runs inside each fetch until the store's `read_timeout`
///   ends it: turn it off (`default_retry = false`) to leave retries to the store.
/// - **401**: with [`RetryUnauthorized`](crate::RetryUnauthorized) (or the plain layer's
///   reload), a token the server refuses is replaced at once, by a new request: this source
///   keeps no cache of its own, so a revoked token (a service account deleted and created
///   again, kubernetes#132802) is never handed out again.
/// - **Sharing**: sources for the same cluster, namespace, service account, audiences,
///   `expirationSeconds` and bound object have one [`share_key`](TokenSource::share_key):
///   every store built on them with the same options is one store, so two layers that ask
///   for the same audience cause one API call per refresh window, not two.
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use bearer_reload::{BearerLayer, RetryUnauthorized, StoreBuilder};
/// use bearer_reload::source::TokenRequestSource;
///
/// let config = kube::Config::infer().await?;
/// let client = kube::Client::try_from(config.clone())?;
/// let source = TokenRequestSource::builder(client, &config.cluster_url)
///     .service_account("payments")   // in the client's default namespace
///     .audience("vault")
///     .expiration(Duration::from_secs(600))
///     .build()?;
/// let store = StoreBuilder::from_source(source).load().await?;
/// let layer = BearerLayer::new(store).retry_unauthorized(RetryUnauthorized::new());
/// // ServiceBuilder::new().layer(layer).service(http_client_to_vault) ...
/// # let _ = layer; Ok(()) }
/// ```
///
/// Built by [`TokenRequestSource::builder`]; every fetch is one API call: the store is the
/// cache.
///
/// [`kube::Client`]: https://docs.rs/kube/5/kube/struct.Client.html
#[derive(Clone)]
pub struct TokenRequestSource {
    client: Client,
    /// `/api/v1/namespaces/{ns}/serviceaccounts`.
    path: String,
    name: String,
    expiration: Duration,
    /// The request's body, the same for every fetch.
    body: Vec<u8>,
    /// [`describe`](TokenSource::describe)'s text, which every error starts with.
    account: Arc<str>,
    key: String,
    /// Drawn from the key, so that each token's jitter is its own.
    seed: u64,
}

impl fmt::Debug for TokenRequestSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TokenRequestSource")
            .field("account", &self.account)
            .field("expiration", &self.expiration)
            .finish_non_exhaustive()
    }
}

impl TokenRequestSource {
    /// A builder for tokens requested with `client` from the API server at `cluster`.
    ///
    /// `cluster` is the URL the client talks to (`kube::Config::cluster_url`): it tells
    /// apart clients of different clusters, which must not share a token. Stores are shared
    /// within the process whatever the client's own credentials: build the sources of one
    /// process with clients that may all create these tokens.
    pub fn builder(client: Client, cluster: impl fmt::Display) -> TokenRequestBuilder {
        TokenRequestBuilder::new(client, cluster.to_string())
    }

    /// The `expirationSeconds` asked for.
    pub fn expiration(&self) -> Duration {
        self.expiration
    }
}

impl TokenSource for TokenRequestSource {
    type Error = TokenRequestError;

    /// Asks the API server for a new token, whatever the trigger: on
    /// [`Trigger::Unauthorized`](super::Trigger::Unauthorized) above all, nothing cached may
    /// answer.
    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, TokenRequestError> {
        let request = ::kube::core::Request::new(&self.path)
            .create_subresource(
                "token",
                &self.name,
                &PostParams::default(),
                self.body.clone(),
            )
            .map_err(|e| {
                TokenRequestError::from_kube(&self.account, ::kube::Error::BuildRequest(e))
            })?;
        let body = self
            .client
            .request_text(request)
            .await
            .map_err(|e| TokenRequestError::from_kube(&self.account, e))?;
        let issued = wire::parse_response(&body, self.expiration).map_err(|problem| {
            TokenRequestError::Response {
                account: self.account.clone(),
                problem,
            }
        })?;
        drop(body);
        let secs = issued
            .expires_at
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let jitter = kubelet::jitter(self.seed ^ secs);
        let refresh = kubelet::refresh_point(cx.now(), issued.expires_at, issued.ttl, jitter);
        tracing::debug!(
            source = %self.account,
            trigger = cx.trigger.as_str(),
            expires_at = %crate::clock::Rfc3339(issued.expires_at),
            refresh_at = %crate::clock::Rfc3339(refresh),
            "TokenRequest answered"
        );
        Ok(Fetched::new(issued.token)
            .expires_at(issued.expires_at)
            .refresh_at(refresh))
    }

    fn describe(&self) -> String {
        self.account.to_string()
    }

    /// The cluster, namespace, service account, audiences (sorted), `expirationSeconds` and
    /// bound object: the kubelet's cache key, with the cluster.
    fn share_key(&self) -> Option<String> {
        Some(self.key.clone())
    }
}

/// `serviceaccount team-a/payments (TokenRequest, audiences: vault)`.
pub(super) fn describe(namespace: &str, name: &str, audiences: &[String]) -> String {
    let audiences = if audiences.is_empty() {
        "the API server's".to_owned()
    } else {
        audiences.join(", ")
    };
    format!("serviceaccount {namespace}/{name} (TokenRequest, audiences: {audiences})")
}

#[cfg(test)]
mod tests;
