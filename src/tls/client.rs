//! [`HttpsClient`]. hyper-util cannot drop a pooled connection, so each generation of
//! the credentials gets a pool of its own, and the old one closes with its last request;
//! a connection whose handshake straddles a rotation is poisoned as it is handed over.

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

/// A hyper-util HTTPS client that presents an [`IdentityStore`]'s current client
/// certificate, trusts a [`RootStore`]'s current CA bundle, and never sends a request that
/// starts after either rotates on a connection made before
/// ([module docs](super#connections-retired-on-rotation)).
///
/// A refusal reloads the credential it points at: the identity on a certificate alert, a
/// 401, or a new connection closed unanswered; the bundle on an unknown issuer. The request
/// then goes again as [the crate's rule](crate#when-a-request-is-sent-again) says.
///
/// A tower `Service`, cheap to clone, for `https://` requests alone (others fail with an
/// `io::Error` of kind `InvalidInput`). Each setter returns the client with fresh pools.
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

struct Pool<B> {
    generations: Generations,
    client: Client<Connector, B>,
}

/// The connector under each pool: kube's timeouts over the tagging TLS connector.
type Connector = TimeoutConnector<Tagging>;

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

    /// The proxy for each URI, as hyper-util's [`Matcher`] picks it: by default
    /// [`Matcher::from_env`] (`HTTPS_PROXY`, `ALL_PROXY`, `NO_PROXY`); none with
    /// `Matcher::builder().build()`. Tunnels by `CONNECT`, or SOCKS5 for `socks5(h)://`.
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

    /// How long a read from a connection may wait (none by default), else `TimedOut`.
    pub fn read_timeout(self, timeout: Option<Duration>) -> Self {
        self.with(|_, settings| settings.timeouts.read = timeout)
    }

    /// How long a write to a connection may wait (none by default).
    pub fn write_timeout(self, timeout: Option<Duration>) -> Self {
        self.with(|_, settings| settings.timeouts.write = timeout)
    }

    /// kube's timeouts all at once, `reset_reader_on_write` among them.
    #[cfg(feature = "kube")]
    pub(crate) fn timeouts(self, timeouts: Timeouts) -> Self {
        self.with(|_, settings| settings.timeouts = timeouts)
    }

    /// hyper-util's settings for each pool, instead of its defaults. The pool's timer is
    /// always tokio's: without one, idle connections are never closed on time.
    pub fn hyper(self, mut builder: Builder) -> Self {
        builder.pool_timer(TokioTimer::new());
        self.with(|_, settings| settings.builder = builder)
    }

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
    /// The pool of `generations`, made anew when they are newer than the current one's.
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

    fn pool_now(&self) -> Arc<Pool<B>> {
        self.pool_for(self.stores.generations())
    }
    /// `replay` sent on the current pool, once (`unwritten`), when `outcome` says
    /// hyper-util never wrote the request: it never reached the server. A copy is kept for
    /// what may follow.
    fn unwritten(
        &self,
        replay: &mut Option<Request<B>>,
        unwritten: &mut bool,
        outcome: &Outcome,
    ) -> Option<hyper_util::client::legacy::ResponseFuture>
    where
        B: TryCloneBody,
    {
        if *unwritten || !outcome.as_ref().is_err_and(never_written) {
            return None;
        }
        let req = replay.take_if(|r| r.body().start_replay())?;
        *unwritten = true;
        *replay = clone_request(&req);
        Some(self.pool_now().client.request(req))
    }
}

impl<B> HttpsClient<B>
where
    B: http_body::Body + Send + 'static + Unpin,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
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
            unwritten: false,
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
    blame: Blame,
    failure: Failure,
    /// The generations of its connection, when known (else its pool's stand in).
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
        // Ended unanswered: a TLS 1.3 refusal whose alert was not read, or a crash.
        (None, Some(Verdict::Unanswered)) => (Blame::Identity, Failure::Uncertain),
        // Closed during hyper's handshake on a new connection: never written.
        (None, None) if closed_before_pooled(error) => (Blame::Identity, Failure::NotWritten),
        (None, _) => return None,
    };
    Some(Classified {
        blame,
        failure,
        dialled: generations,
    })
}

/// Whether hyper-util never wrote the request: its `Canceled` (shown only in its message),
/// or a connection it waited for in the pool that closed.
fn never_written(error: &Error) -> bool {
    use hyper_util::client::legacy::pool::Error as Pool;
    use std::error::Error as _;
    let closed = || {
        let source = error.source().and_then(|e| e.downcast_ref::<Pool>());
        source.is_some_and(|e| matches!(e, Pool::CheckedOutClosedValue))
    };
    error.to_string() == "client error (Canceled)" || (error.is_connect() && closed())
}

/// Whether `error` is a connection closed after its dial, before hyper-util pooled it.
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
    struct ResponseFuture<B> {
        #[pin]
        state: State,
        shared: Arc<Shared<B>>,
        sent: Generations,
        replay: Option<Request<B>>,
        // With an `Authorization` header, a 401 is the retry layer's to send again.
        token: bool,
        // Sent again already because hyper-util never wrote it.
        unwritten: bool,
        refused: Option<Refusal>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State {
        First { #[pin] fut: hyper_util::client::legacy::ResponseFuture },
        // A 401 for the retry layer above, once the identity has reloaded.
        Renewing { reload: Reload, answer: Option<Box<Outcome>> },
        // Boxed, as the answer above: the refusal's steps would enlarge every request.
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
                    if let Some(fut) = this.shared.unwritten(this.replay, this.unwritten, &outcome)
                    {
                        this.state.set(State::First { fut });
                        continue;
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
                    // A 401 with a token: the identity reloads, the retry layer resends.
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
                    // Kept, for a retry that is never written.
                    *this.replay = clone_request(&req);
                    if let Some(refused) = this.refused.as_ref() {
                        refused.resending();
                    }
                    let fut = this.shared.pool_now().client.request(req);
                    this.state.set(State::Retrying { fut });
                }
                StateProj::Retrying { fut } => {
                    let outcome = ready!(fut.poll(cx));
                    if let Some(fut) = this.shared.unwritten(this.replay, this.unwritten, &outcome)
                    {
                        this.state.set(State::Retrying { fut });
                        continue;
                    }
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
