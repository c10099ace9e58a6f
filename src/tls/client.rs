//! [`HttpsClient`]: a hyper-util client over rustls that presents the current identity,
//! trusts the current CA bundle, and retires its connections when either rotates.
//!
//! hyper-util's pool cannot be told to drop a connection after the fact: `Connected` is not
//! publicly `Clone`, and `Connected::poison` acts on the one the connector hands over. So
//! the client retires the pool itself: each generation of the identity and the bundle gets
//! its own hyper-util client (pool), built on the same connector. A request takes the pool
//! of the generations current when it starts (two atomic loads); requests already in
//! flight finish on the old pool's connections, which close when the last of them is
//! done. A connection whose handshake straddles a rotation is poisoned as the connector
//! hands it over: it serves the request that dialled it and is not reused.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};
use std::time::Duration;

use bytes::Bytes;
use http::header::AUTHORIZATION;
use http::{Request, Response, StatusCode};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper_timeout::TimeoutConnector;
use hyper_util::client::legacy::{Builder, Client, Error};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use pin_project_lite::pin_project;
use rustls::pki_types::ServerName;
use tower_service::Service;

use super::connect::{Dialled, Serves, Tagging, Unanswered, Verdict, https_connector};
use super::refusal::{Blame, blame};
use super::refusal::{Failure, may_send_again};
use super::stores::{Generations, Refusal, Stores};
use super::{IdentityStore, RootStore};
use crate::body::TryCloneBody;
use crate::refusal::{AfterRefusal, Refused, Reload, Renewed, clone_request};
use crate::store::Certainty;
use crate::sync::lock;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A hyper-util HTTPS client (rustls with ring) that presents an
/// [`IdentityStore`]'s current client certificate, trusts a [`RootStore`]'s current CA
/// bundle, and never sends a request that starts after either rotates on a connection
/// made before: requests already in flight finish, later ones go out on new connections
/// (see the [module docs](super#connections-retired-on-rotation)).
///
/// A request refused because of the identity (a handshake the server refused with a
/// certificate alert, or a 401) reloads the identity at once, and one the bundle did not
/// verify (an unknown issuer) reloads the bundle: one read per burst, as for tokens. A
/// request whose body can be copied ([`TryCloneBody`]) is then sent once more, on a new
/// connection, when the reload brought a newer credential. A 401 to a request that
/// carries an `Authorization` header is not sent again here: it is the retry layer's
/// ([`BearerLayer`](crate::BearerLayer)'s `retry_unauthorized`) to send again, with the
/// new token and the new certificate together, whatever sits between (a `Buffer`). A
/// request hyper-util never wrote (it lost its connection to another's HTTP/2 upgrade) is
/// sent again as well.
///
/// A new connection that closes before it answers anything may be a refusal too (over
/// TLS 1.3 the server refuses a certificate after the client's handshake, and the alert
/// can be lost), and it reloads the identity as well, rate-limited apart from the
/// certain refusals above. But a server that crashed after acting on the request closes
/// the same way, so such a request is sent again only when that cannot matter: it was
/// never written, or its method is idempotent (GET, HEAD, OPTIONS, TRACE, PUT, DELETE).
/// A POST or PATCH comes back as the error, once, and the next request gets the reloaded
/// identity. The rule is the crate's, for every request it resends: see
/// [the crate docs](crate#when-a-request-is-sent-again).
///
/// Requests go over TLS alone: an `http://` one is refused before anything is dialled,
/// with hyper-util's connect error whose source is an `io::Error` of kind `InvalidInput`
/// naming the URI.
///
/// A tower `Service` for request bodies of type `B`, cheap to clone; put a
/// [`BearerLayer`](crate::BearerLayer) in front of it for a token as well. By default it
/// presents no client certificate, keeps hyper-util's default pool (idle connections kept
/// 90 s, HTTP/1.1 and HTTP/2 by ALPN), goes through the proxy `HTTPS_PROXY` names (less
/// `NO_PROXY`), as reqwest does, and gives making a connection 30 s, with no read or write
/// timeout; each setter returns the client with fresh pools.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use bearer_reload::source::FileSource;
/// use bearer_reload::tls::{HttpsClient, IdentityStore, RootStore};
/// use http_body_util::Empty;
/// use tower::ServiceExt;
///
/// let dir = "/var/lib/kubelet/pki";
/// let identity = IdentityStore::builder(FileSource::new(format!("{dir}/kubelet-client-current.pem")))
///     .load()
///     .await?;
/// let roots = RootStore::builder(FileSource::new("/etc/kubernetes/pki/ca.crt")).load().await?;
/// let client = HttpsClient::<Empty<bytes::Bytes>>::new(roots).identity(identity);
/// let response = client
///     .oneshot(http::Request::get("https://10.96.0.1/version").body(Empty::new())?)
///     .await?;
/// println!("{}", response.status());
/// # Ok(()) }
/// ```
pub struct HttpsClient<B> {
    shared: Arc<Shared<B>>,
    /// The pool this clone last used.
    pool: Arc<Pool<B>>,
}

impl<B> Clone for HttpsClient<B> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            pool: self.pool.clone(),
        }
    }
}

impl<B> fmt::Debug for HttpsClient<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("HttpsClient")
            .field("identity", &self.shared.stores.identity)
            .field("roots", &self.shared.stores.roots)
            .field("generations", &self.pool.generations)
            .finish_non_exhaustive()
    }
}

struct Shared<B> {
    stores: Stores,
    settings: Settings,
    connector: Connector,
    /// The pool of the newest generations seen.
    current: Mutex<Arc<Pool<B>>>,
}

/// One generation's hyper-util client.
struct Pool<B> {
    generations: Generations,
    client: Client<Connector, B>,
}

/// The connector under each pool: kube's timeouts over the tagging TLS connector.
type Connector = TimeoutConnector<Tagging>;

/// What a client is built from, besides its stores.
#[derive(Clone)]
struct Settings {
    server_name: Option<ServerName<'static>>,
    proxy: Arc<Matcher>,
    timeouts: Timeouts,
    builder: Builder,
}

/// hyper-timeout's settings, as kube's `Config` has them.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Timeouts {
    pub(crate) connect: Option<Duration>,
    pub(crate) read: Option<Duration>,
    pub(crate) write: Option<Duration>,
    pub(crate) reset_reader_on_write: bool,
}

impl<B> HttpsClient<B>
where
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// A client that trusts `roots` and presents no client certificate.
    pub fn new(roots: RootStore) -> Self {
        let mut builder = Client::builder(TokioExecutor::new());
        builder.pool_timer(TokioTimer::new());
        let stores = Stores {
            identity: None,
            roots,
        };
        let settings = Settings {
            server_name: None,
            proxy: Arc::new(Matcher::from_env()),
            timeouts: Timeouts {
                connect: Some(Duration::from_secs(30)),
                read: None,
                write: None,
                reset_reader_on_write: false,
            },
            builder,
        };
        Self::build(stores, settings)
    }

    /// Presents `identity`'s client certificate at each handshake (none by default).
    pub fn identity(self, identity: IdentityStore) -> Self {
        self.with(|stores, _| stores.identity = Some(identity))
    }

    /// Verifies servers (and sends SNI) for `name` instead of the host of each request's
    /// URI: a kubeconfig's `tls-server-name`.
    pub fn server_name(self, name: ServerName<'static>) -> Self {
        self.with(|_, settings| settings.server_name = Some(name))
    }

    /// The proxies requests go through, as hyper-util's [`Matcher`] picks one for each
    /// request's URI: by default [`Matcher::from_env`] (`HTTPS_PROXY`, `ALL_PROXY` and
    /// `NO_PROXY`, as reqwest and curl read them); `Matcher::builder().build()` for none.
    /// `http://` and `https://` proxies are tunnelled through with `CONNECT` (the
    /// password of a `user:password@` URL as basic authorization), `socks5://` and
    /// `socks5h://` ones with SOCKS5; TLS to the server goes through the tunnel.
    ///
    /// # Examples
    ///
    /// ```
    /// # fn run(roots: bearer_reload::tls::RootStore) {
    /// use bearer_reload::tls::HttpsClient;
    /// use hyper_util::client::proxy::matcher::Matcher;
    ///
    /// let proxy = Matcher::builder().all("http://proxy.internal:3128").no("10.0.0.0/8").build();
    /// let client = HttpsClient::<http_body_util::Empty<bytes::Bytes>>::new(roots).proxy(proxy);
    /// # let _ = client; }
    /// ```
    pub fn proxy(self, proxy: Matcher) -> Self {
        let proxy = Arc::new(proxy);
        self.with(|_, settings| settings.proxy = proxy)
    }

    /// How long making a connection may take, from the TCP connect through any proxy to
    /// the end of the TLS handshake (30 s by default); `None` for no limit.
    pub fn connect_timeout(self, timeout: Option<Duration>) -> Self {
        self.with(|_, settings| settings.timeouts.connect = timeout)
    }

    /// How long a read from a connection may wait (none by default): a server that takes
    /// a request and never answers fails it with an error of kind `TimedOut`.
    pub fn read_timeout(self, timeout: Option<Duration>) -> Self {
        self.with(|_, settings| settings.timeouts.read = timeout)
    }

    /// How long a write to a connection may wait (none by default).
    pub fn write_timeout(self, timeout: Option<Duration>) -> Self {
        self.with(|_, settings| settings.timeouts.write = timeout)
    }

    /// kube's timeouts all at once, `reset_reader_on_write` among them.
    pub(crate) fn timeouts(self, timeouts: Timeouts) -> Self {
        self.with(|_, settings| settings.timeouts = timeouts)
    }

    /// hyper-util's settings for each pool (idle timeout, HTTP/2 only, ...), instead of
    /// its defaults. The pool's timer is tokio's, whatever `builder` holds: the client
    /// runs on tokio, and without a timer idle connections are never closed on time.
    pub fn hyper(self, mut builder: Builder) -> Self {
        builder.pool_timer(TokioTimer::new());
        self.with(|_, settings| settings.builder = builder)
    }

    /// The same client changed by `change`, on new pools.
    fn with(self, change: impl FnOnce(&mut Stores, &mut Settings)) -> Self {
        let (mut stores, mut settings) = (self.shared.stores.clone(), self.shared.settings.clone());
        change(&mut stores, &mut settings);
        Self::build(stores, settings)
    }

    fn build(stores: Stores, settings: Settings) -> Self {
        let tls = https_connector(
            &stores,
            settings.server_name.clone(),
            settings.proxy.clone(),
            Serves::Any,
        );
        let mut connector = TimeoutConnector::new(Tagging::new(tls, stores.clone()));
        let timeouts = settings.timeouts;
        connector.set_connect_timeout(timeouts.connect);
        connector.set_read_timeout(timeouts.read);
        connector.set_write_timeout(timeouts.write);
        connector.set_reset_reader_on_write(timeouts.reset_reader_on_write);
        let pool = Arc::new(Pool {
            generations: stores.generations(),
            client: settings.builder.build(connector.clone()),
        });
        HttpsClient {
            shared: Arc::new(Shared {
                stores,
                settings,
                connector,
                current: Mutex::new(pool.clone()),
            }),
            pool,
        }
    }
}

impl<B> Shared<B>
where
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// The pool of `generations`, or of newer ones: a new pool when they are newer than
    /// the current one's.
    #[cold]
    fn pool_for(&self, generations: Generations) -> Arc<Pool<B>> {
        let mut current = lock(&self.current);
        let newer = generations.identity > current.generations.identity
            || generations.roots > current.generations.roots;
        if newer {
            tracing::debug!(
                identity = generations.identity,
                roots = generations.roots,
                "TLS credentials rotated: later requests go out on new connections"
            );
            *current = Arc::new(Pool {
                generations,
                client: self.settings.builder.build(self.connector.clone()),
            });
        }
        current.clone()
    }

    /// The pool of the credentials current now.
    fn pool_now(&self) -> Arc<Pool<B>> {
        self.pool_for(self.stores.generations())
    }
}

impl<B> HttpsClient<B>
where
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// The pool of the credentials current now.
    fn pool(&mut self) -> &Client<Connector, B> {
        let now = self.shared.stores.generations();
        if now != self.pool.generations {
            self.pool = self.shared.pool_for(now);
        }
        &self.pool.client
    }
}

impl<B> Service<Request<B>> for HttpsClient<B>
where
    B: http_body::Body + TryCloneBody + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Response = Response<Incoming>;
    type Error = Error;
    // Boxed: an HTTPS round trip dwarfs the allocation.
    type Future = Pin<Box<dyn Future<Output = Outcome> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let token = req.headers().contains_key(AUTHORIZATION);
        let replay = clone_request(&req);
        let fut = self.pool().request(req);
        // The generations of the pool's connections: what a refusal refused.
        let sent = self.pool.generations;
        Box::pin(ResponseFuture {
            state: State::First { fut },
            shared: self.shared.clone(),
            sent,
            replay,
            token,
            refused: None,
        })
    }
}

/// What came back refused, a 401 or an error, is drained as a refusal.
impl Refused for Outcome {
    type Body = Either<Incoming, Empty<Bytes>>;

    fn into_body(self) -> Self::Body {
        match self {
            Ok(response) => Either::Left(response.into_body()),
            Err(_) => Either::Right(Empty::new()),
        }
    }
}

type Outcome = Result<Response<Incoming>, Error>;

/// A failure that may be a refusal of one of the client's credentials.
#[derive(Debug, Clone, Copy)]
struct Classified {
    /// Whose credential.
    blame: Blame,
    /// What it proves about the request (see [`crate::refusal`]).
    failure: Failure,
    /// The generations of the connection it came on, when known (an HTTP/1.1 response
    /// carries none: its pool's stand in).
    dialled: Option<Generations>,
}

impl Classified {
    fn certainty(&self) -> Certainty {
        match self.failure {
            Failure::Refused => Certainty::Certain,
            Failure::NotWritten | Failure::Uncertain => Certainty::Possible,
        }
    }
}

/// Whether `outcome` is a refusal, or may be one.
fn refusal(outcome: &Outcome) -> Option<Classified> {
    let error = match outcome {
        Ok(response) => {
            // An HTTP/2 connection's tag: its first answer marks it answered.
            let dialled = response.extensions().get::<Dialled>();
            if let Some(dialled) = dialled {
                dialled.answered();
            }
            let refused = response.status() == StatusCode::UNAUTHORIZED;
            return refused.then(|| Classified {
                blame: Blame::Identity,
                failure: Failure::Refused,
                dialled: dialled.map(|d| d.generations),
            });
        }
        Err(error) => error,
    };
    // An HTTP/2 connection's, whose requests' errors keep no cause.
    let dialled = error.connect_info().and_then(|info| {
        let mut extensions = http::Extensions::new();
        info.get_extras(&mut extensions);
        extensions.remove::<Dialled>()
    });
    // An HTTP/1.1 connection that ended before the server answered.
    let unanswered = Unanswered::find(error);
    let generations =
        (dialled.as_ref().map(|d| d.generations)).or_else(|| unanswered.map(|u| u.generations));
    let verdict =
        (dialled.as_ref().map(Dialled::verdict)).or(unanswered.map(|_| Verdict::Unanswered));
    let (blame, failure) = match (blame(error), verdict) {
        (Some(blame), _) => (blame, Failure::Refused),
        (None, Some(Verdict::Refused)) => (Blame::Identity, Failure::Refused),
        // Ended before the server answered: over TLS 1.3 the server's refusal of the
        // certificate can end a connection after our handshake, before the alert is read;
        // so can a server that crashed after acting on the request.
        (None, Some(Verdict::Unanswered)) => (Blame::Identity, Failure::Uncertain),
        // Closed during hyper's own handshake on a new connection, which never reached the
        // pool (so the error tells nothing of it): the request was never written, and a
        // refusal may have ended the connection there.
        (None, None) if closed_before_pooled(error) => (Blame::Identity, Failure::NotWritten),
        (None, _) => return None,
    };
    Some(Classified {
        blame,
        failure,
        dialled: generations,
    })
}

/// Whether hyper-util says it never wrote the request: its `Canceled` (the request waited
/// for another's HTTP/2 upgrade, or its connection closed before it took it), which it
/// shows only in its message, or a connection it waited for in the pool that closed.
fn never_written(error: &Error) -> bool {
    use hyper_util::client::legacy::pool::Error as Pool;
    use std::error::Error as _;
    let closed = || {
        let source = error.source().and_then(|e| e.downcast_ref::<Pool>());
        source.is_some_and(|e| matches!(e, Pool::CheckedOutClosedValue))
    };
    error.to_string() == "client error (Canceled)" || (error.is_connect() && closed())
}

/// Whether `error` is a connection that closed after it was dialled and before hyper-util
/// pooled it: no connect error, no connection info, and hyper's "channel closed".
fn closed_before_pooled(error: &Error) -> bool {
    use std::error::Error as _;
    !error.is_connect()
        && error.connect_info().is_none()
        && error
            .source()
            .and_then(|e| e.downcast_ref::<hyper::Error>())
            .is_some_and(hyper::Error::is_closed)
}

pin_project! {
    /// The response future of [`HttpsClient`]: hyper-util's, and after a refusal the
    /// reload of the credential refused and, for a request that can be, its second
    /// sending.
    struct ResponseFuture<B> {
        #[pin]
        state: State,
        shared: Arc<Shared<B>>,
        sent: Generations,
        replay: Option<Request<B>>,
        // The request carries an `Authorization` header: a 401 is the retry layer's to send
        // again (`crate::refusal`).
        token: bool,
        refused: Option<Refusal>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State {
        First { #[pin] fut: hyper_util::client::legacy::ResponseFuture },
        // A 401 for the retry layer above: the identity reloads before it goes up. The
        // answer boxed, as the refusal's steps below, so that no request's future carries
        // its room.
        Renewing { reload: Reload, answer: Option<Box<Outcome>> },
        // Boxed: the refusal's steps are larger than the rest of the future together,
        // and every request's future would carry their room.
        Refused {
            after: Pin<Box<AfterRefusal<Outcome, Either<Incoming, Empty<Bytes>>>>>,
        },
        Retrying { #[pin] fut: hyper_util::client::legacy::ResponseFuture },
    }
}

impl<B> Future for ResponseFuture<B>
where
    B: http_body::Body + TryCloneBody + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    type Output = Outcome;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::First { fut } => {
                    let outcome = ready!(fut.poll(cx));
                    if outcome.as_ref().is_err_and(never_written) {
                        let replay = &mut *this.replay;
                        if let Some(req) = replay.take_if(|r| r.body().start_replay()) {
                            let fut = this.shared.pool_now().client.request(req);
                            this.state.set(State::Retrying { fut });
                            continue;
                        }
                    }
                    let Some(refusal) = refusal(&outcome) else {
                        return Poll::Ready(outcome);
                    };
                    let sent = refusal.dialled.unwrap_or(*this.sent);
                    let stores = &this.shared.stores;
                    let certainty = refusal.certainty();
                    let Some(refused) = Refusal::new(stores, refusal.blame, sent, certainty) else {
                        return Poll::Ready(outcome);
                    };
                    // A 401 (the one answer `refusal` takes for a refusal) to a request
                    // with a token is the retry layer's to send again: the identity
                    // reloads first, and the answer says whether it found a newer one.
                    if *this.token && outcome.is_ok() {
                        let reload = refused.renew();
                        let answer = Some(Box::new(outcome));
                        this.state.set(State::Renewing { reload, answer });
                        continue;
                    }
                    let resend = this
                        .replay
                        .as_ref()
                        .is_some_and(|r| may_send_again(r.method(), refusal.failure));
                    if !resend {
                        // Not sent again: the reload starts for the requests that follow.
                        refused.reload_later();
                        return Poll::Ready(outcome);
                    }
                    let after = Box::pin(refused.after(outcome));
                    *this.refused = Some(refused);
                    this.state.set(State::Refused { after });
                }
                StateProj::Renewing { reload, answer } => {
                    let newer = ready!(reload.as_mut().poll(cx));
                    let mut outcome = *answer.take().expect("polled after completion");
                    if let (true, Ok(response)) = (newer, &mut outcome) {
                        response.extensions_mut().insert(Renewed);
                    }
                    return Poll::Ready(outcome);
                }
                StateProj::Refused { after } => {
                    let replay = &mut *this.replay;
                    let replayable = || replay.as_ref().is_some_and(|r| r.body().start_replay());
                    if let Err(answer) = ready!(after.as_mut().poll_with(cx, replayable)) {
                        return Poll::Ready(answer);
                    }
                    let req = this.replay.take().expect("a refusal is retried once");
                    if let Some(refused) = this.refused.as_ref() {
                        refused.resending();
                    }
                    // The pool of the credentials current now: a connection made with
                    // the new one.
                    let fut = this.shared.pool_now().client.request(req);
                    this.state.set(State::Retrying { fut });
                }
                StateProj::Retrying { fut } => {
                    let outcome = ready!(fut.poll(cx));
                    if let Some(refused) = this.refused.as_ref() {
                        refused.resent(refusal(&outcome).is_some());
                    }
                    return Poll::Ready(outcome);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests;
