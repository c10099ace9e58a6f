//! [`TlsMiddleware`]: reqwest requests on connections made with the current client
//! certificate and CA bundle (features `reqwest` and `tls`).

use std::fmt;
use std::sync::{Arc, Mutex};

use ::reqwest::{Body, Client, ClientBuilder, Request, Response, StatusCode};
use arc_swap::ArcSwapOption;
use http::Extensions;
use reqwest_middleware::{Middleware, Next, Result};

use crate::refusal::{Refused, Renewed};
use crate::store::Certainty;
use crate::sync::lock;
use crate::tls::refusal::{Blame, blame};
use crate::tls::stores::{Generations, Refusal, Stores};
use crate::tls::{IdentityStore, RootStore};

/// Builds the `reqwest::ClientBuilder` each generation's client starts from.
type MakeBuilder = Arc<dyn Fn() -> ClientBuilder + Send + Sync>;

/// A [`reqwest_middleware::Middleware`] that sends each request on a `reqwest::Client` made
/// for the credentials current now: a client that trusts the [`RootStore`]'s CA bundle and
/// presents the [`IdentityStore`]'s certificate, built again (with its own connection
/// pool) when either rotates. What [`HttpsClient`](crate::tls::HttpsClient) does for
/// hyper-util, for reqwest:
///
/// - a request that starts after the identity or the bundle rotated never goes out on a
///   connection made before (reqwest's pool would reuse an idle one for up to
///   `pool_idle_timeout`); requests already in flight finish on theirs, and the old pool
///   closes its connections once they are done;
/// - a handshake the server refuses for the certificate, a 401 on a connection already
///   made, or a server certificate the bundle does not verify reloads the credential it
///   points at, once for a burst of them (at most one read a second while the same one
///   keeps being refused), and the request is sent once more on a new connection when
///   [`reqwest::Request::try_clone`] can copy it (after a retrying
///   [`BearerMiddleware`](super::BearerMiddleware), a 401 is that one's to send again,
///   with the new token and the new certificate together).
///
/// It sends the request itself, on the client of the current credentials: put it last,
/// after any other middleware (a [`BearerMiddleware`](super::BearerMiddleware) comes
/// before it). The `reqwest::Client` the `ClientWithMiddleware` is built on is not used:
/// build it with [`client`](Self::client), as in the example, which needs no process-wide
/// rustls provider (`reqwest::Client::new()` over reqwest's rustls backend without a
/// provider panics unless the application installed one). Each generation's client
/// comes from
/// [`client_builder`](Self::client_builder) (reqwest's defaults by default), with this
/// crate's rustls configuration: reqwest's `rustls-no-provider` backend, rustls's
/// provider as [the `tls` module](crate::tls#tls-providers) says, HTTP/2 and HTTP/1.1 by
/// ALPN, session resumption off.
///
/// [`reqwest_middleware::Middleware`]: https://docs.rs/reqwest-middleware/0.5/reqwest_middleware/trait.Middleware.html
/// [`reqwest::Request::try_clone`]: https://docs.rs/reqwest/0.13/reqwest/struct.Request.html#method.try_clone
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use std::time::Duration;
/// use bearer_reload::reqwest::TlsMiddleware;
/// use bearer_reload::source::FileSource;
/// use bearer_reload::tls::{IdentityStore, RootStore};
///
/// // cert-manager's Secret in a projected volume, and the CA that signs Vault's certificate.
/// let identity = IdentityStore::files("/tls/tls.crt", "/tls/tls.key").load().await?;
/// let roots = RootStore::builder(FileSource::new("/tls/ca.crt")).load().await?;
/// let tls = TlsMiddleware::new(roots)
///     .identity(identity)
///     .client_builder(|| reqwest::Client::builder().timeout(Duration::from_secs(10)));
/// let client = reqwest_middleware::ClientBuilder::new(tls.client()?)
///     .with(tls)
///     .build();
/// let response = client.get("https://vault.internal:8200/v1/sys/health").send().await?;
/// # let _ = response; Ok(()) }
/// ```
#[derive(Clone)]
pub struct TlsMiddleware {
    shared: Arc<Shared>,
}

impl fmt::Debug for TlsMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsMiddleware")
            .field("identity", &self.shared.stores.identity)
            .field("roots", &self.shared.stores.roots)
            .field(
                "generations",
                &self.shared.current.load().as_ref().map(|g| g.generations),
            )
            .finish_non_exhaustive()
    }
}

struct Shared {
    stores: Stores,
    make: MakeBuilder,
    /// The client of the newest generations seen; none before the first request.
    current: ArcSwapOption<Generation>,
    /// Held while a new generation's client is built: one build per rotation.
    building: Mutex<()>,
}

/// One generation's client, or why it could not be built.
struct Generation {
    generations: Generations,
    client: std::result::Result<Client, Arc<::reqwest::Error>>,
}

impl TlsMiddleware {
    /// Requests to servers that `roots`' CA bundle verifies, with no client certificate,
    /// on clients from `reqwest::Client::builder()`.
    pub fn new(roots: RootStore) -> Self {
        Self::build(
            Stores {
                identity: None,
                roots,
            },
            Arc::new(Client::builder),
        )
    }

    /// Presents `identity`'s client certificate at each handshake (none by default).
    pub fn identity(self, identity: IdentityStore) -> Self {
        let mut stores = self.shared.stores.clone();
        stores.identity = Some(identity);
        Self::build(stores, self.shared.make.clone())
    }

    /// A `reqwest::Client` to build the `reqwest_middleware::ClientWithMiddleware` on, which
    /// wants one although this middleware sends each request on a client of its own (see
    /// the [example](Self#examples)). Made with the stores' rustls configuration, with
    /// rustls's provider as [the `tls` module](crate::tls#tls-providers) says: unlike
    /// `reqwest::Client::new()` over reqwest's `rustls-no-provider` backend, it needs no
    /// process-wide provider.
    ///
    /// # Errors
    ///
    /// reqwest's, when it cannot build a client (the system's proxy settings or root
    /// certificates cannot be read, ...).
    pub fn client(&self) -> std::result::Result<Client, ::reqwest::Error> {
        Client::builder()
            .tls_backend_preconfigured(self.shared.stores.client_config())
            .build()
    }

    /// Each generation's client starts from the builder `make` returns (timeouts, proxies,
    /// redirect policy, ...); its TLS settings are replaced by the stores'.
    pub fn client_builder(self, make: impl Fn() -> ClientBuilder + Send + Sync + 'static) -> Self {
        Self::build(self.shared.stores.clone(), Arc::new(make))
    }

    fn build(stores: Stores, make: MakeBuilder) -> Self {
        Self {
            shared: Arc::new(Shared {
                stores,
                make,
                current: ArcSwapOption::empty(),
                building: Mutex::new(()),
            }),
        }
    }
}

impl Generation {
    fn new(stores: &Stores, make: &MakeBuilder) -> Self {
        let generations = stores.generations();
        let mut config = stores.client_config();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        let client = make()
            .tls_backend_preconfigured(config)
            .build()
            .map_err(Arc::new);
        Self {
            generations,
            client,
        }
    }
}

impl Generation {
    /// Its client, or why it could not be built, as the middleware's error.
    fn client(&self) -> Result<&Client> {
        self.client
            .as_ref()
            .map_err(|e| reqwest_middleware::Error::middleware(Build(e.clone())))
    }
}

impl Shared {
    /// The client of the credentials current now: a new one when they are newer than the
    /// current client's.
    fn generation(&self) -> Arc<Generation> {
        let now = self.stores.generations();
        if let Some(current) = &*self.current.load()
            && current.generations == now
        {
            return current.clone();
        }
        self.newer(now)
    }

    /// The first client, or one for credentials newer than the current client's; one
    /// build for callers that race to it.
    #[cold]
    fn newer(&self, now: Generations) -> Arc<Generation> {
        let _building = lock(&self.building);
        if let Some(current) = self.current.load_full() {
            let newer = now.identity > current.generations.identity
                || now.roots > current.generations.roots;
            if !newer {
                return current;
            }
        }
        tracing::debug!(
            identity = now.identity,
            roots = now.roots,
            "TLS credentials rotated: later reqwest requests go out on new connections"
        );
        let next = Arc::new(Generation::new(&self.stores, &self.make));
        self.current.store(Some(next.clone()));
        next
    }
}

/// What came back refused: a 401, or an error.
enum Answer {
    Response(Response),
    Error(::reqwest::Error),
}

impl Refused for Answer {
    type Body = Body;

    fn into_body(self) -> Body {
        match self {
            Answer::Response(response) => Body::from(response),
            Answer::Error(_) => Body::from(Vec::new()),
        }
    }
}

impl Answer {
    fn into_result(self) -> Result<Response> {
        match self {
            Answer::Response(response) => Ok(response),
            Answer::Error(error) => Err(error.into()),
        }
    }
}

/// Whose credential a request's outcome refused, if any: a 401 the identity (a server
/// that refuses a certificate on a connection already made answers so), an error whose
/// causes hold the server's certificate alert or our verifier's unknown issuer.
fn refused(outcome: &std::result::Result<Response, ::reqwest::Error>) -> Option<Blame> {
    match outcome {
        Ok(response) => (response.status() == StatusCode::UNAUTHORIZED).then_some(Blame::Identity),
        Err(error) => blame(error),
    }
}

/// A generation's client that could not be built, as the middleware's error.
#[derive(Debug, thiserror::Error)]
#[error("cannot build the reqwest client for the current TLS credentials")]
struct Build(#[source] Arc<::reqwest::Error>);

#[async_trait::async_trait]
impl Middleware for TlsMiddleware {
    async fn handle(
        &self,
        req: Request,
        _extensions: &mut Extensions,
        _next: Next<'_>,
    ) -> Result<Response> {
        // A request with a token: a 401 is the `BearerMiddleware`'s to send again.
        let token = req.headers().contains_key(http::header::AUTHORIZATION);
        let generation = self.shared.generation();
        let client = generation.client()?;
        // The copy is made before the request goes: sending consumes it.
        let replay = req.try_clone();
        let outcome = client.execute(req).await;
        let Some(blame) = refused(&outcome) else {
            return Ok(outcome?);
        };
        let (stores, sent) = (&self.shared.stores, generation.generations);
        let Some(refusal) = Refusal::new(stores, blame, sent, Certainty::Certain) else {
            return Ok(outcome?);
        };
        let outcome = match (token, outcome) {
            // A 401 (the one answer `refused` takes for a refusal): the middleware before
            // this one sends it again, and the identity reloads first.
            (true, Ok(mut response)) => {
                if refusal.renew().await {
                    response.extensions_mut().insert(Renewed);
                }
                return Ok(response);
            }
            (_, outcome) => outcome,
        };
        // A refusal proves the server did not act on it: any method goes again.
        let Some(replay) = replay else {
            // The reload starts for the requests that follow; this one gets its answer.
            refusal.reload_later();
            return Ok(outcome?);
        };
        let answer = match outcome {
            Ok(response) => Answer::Response(response),
            Err(error) => Answer::Error(error),
        };
        let after = refusal.after(answer);
        let mut after = std::pin::pin!(after);
        if let Err(answer) = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || true)).await
        {
            // Nothing newer to send it with.
            return answer.into_result();
        }
        // The client of the credentials current now: a connection made with the new one.
        let generation = self.shared.generation();
        let client = generation.client()?;
        refusal.resending();
        let outcome = client.execute(replay).await;
        refusal.resent(refused(&outcome).is_some());
        Ok(outcome?)
    }
}

#[cfg(test)]
mod tests;
