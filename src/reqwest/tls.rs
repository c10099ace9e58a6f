//! [`TlsMiddleware`]: reqwest requests on clients made for the current TLS credentials.

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

/// A [`reqwest_middleware::Middleware`] that sends each request on a `reqwest::Client`
/// made for the current credentials (the [`RootStore`]'s CA bundle, the
/// [`IdentityStore`]'s certificate), built anew with its own pool when either rotates:
/// what [`HttpsClient`](crate::tls::HttpsClient) does for hyper-util, for reqwest. A
/// refused request goes again if `Request::try_clone` can copy it; a 401 to one with a
/// token, through a retrying [`BearerMiddleware`](super::BearerMiddleware).
///
/// It sends the request itself: put it last, and build the `ClientWithMiddleware` on
/// [`client`](Self::client).
///
/// [`reqwest_middleware::Middleware`]: https://docs.rs/reqwest-middleware/0.5/reqwest_middleware/trait.Middleware.html
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
    /// Requests to servers `roots` verifies, with no client certificate.
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

    /// A `reqwest::Client` to build the `ClientWithMiddleware` on (it sends nothing):
    /// unlike `reqwest::Client::new()` over reqwest's `rustls-no-provider` backend, it
    /// needs no process-wide provider ([TLS providers](crate::tls#tls-providers)).
    ///
    /// # Errors
    ///
    /// reqwest's, when it cannot build a client (unreadable proxy settings, ...).
    pub fn client(&self) -> std::result::Result<Client, ::reqwest::Error> {
        Client::builder()
            .tls_backend_preconfigured(self.shared.stores.client_config())
            .build()
    }

    /// Each generation's client starts from the builder `make` returns (timeouts, proxies,
    /// ...), its TLS settings the stores' (HTTP/2 and HTTP/1.1 by ALPN).
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
    fn client(&self) -> Result<&Client> {
        self.client
            .as_ref()
            .map_err(|e| reqwest_middleware::Error::middleware(Build(e.clone())))
    }
}

impl Shared {
    /// The client of the credentials current now.
    fn generation(&self) -> Arc<Generation> {
        let now = self.stores.generations();
        if let Some(current) = &*self.current.load()
            && current.generations == now
        {
            return current.clone();
        }
        self.newer(now)
    }

    /// The first client, or one for newer credentials; one build for racing callers.
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

/// Whose credential `outcome` refused: a 401 the identity's, an error whose causes hold a
/// certificate alert or an unknown issuer ([`blame`]).
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
            // A 401 with a token: the identity reloads, the middleware before resends.
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
