//! [`TlsChannel`]: tonic calls on one HTTP/2 connection per generation of the credentials.

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http::uri::{PathAndQuery, Scheme};
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{Either, Empty};
use hyper::body::Incoming;
use hyper::client::conn::TrySendError;
use hyper::client::conn::http2::{Builder, SendRequest};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioTimer;
use rustls::pki_types::ServerName;
use tower_service::Service;

use super::connection::{Connection, Dial, Spawn};
use crate::body::{ReplayBody, TryCloneBody};
use crate::refusal::{Refused, Renewed, clone_request};
use crate::store::Certainty;
use crate::sync::lock;
use crate::tls::connect::{Serves, https_connector};
use crate::tls::error::Redacted;
use crate::tls::refusal::{Blame, blame};
use crate::tls::stores::{Generations, Refusal, Stores};
use crate::tls::{IdentityStore, RootStore, UriError};

type BoxError = Box<dyn StdError + Send + Sync>;

/// A tonic transport (what a generated client is built on, in place of a
/// `tonic::transport::Channel`) whose HTTP/2 connections present an [`IdentityStore`]'s
/// current client certificate and trust a [`RootStore`]'s current CA bundle.
///
/// As [`HttpsClient`](crate::tls::HttpsClient) does, each generation of the credentials
/// gets a connection of its own, and a refusal reloads the credential and sends the call
/// again if its body was kept ([`ReplayBody`](crate::body::ReplayBody)); so does a call
/// the server did not process (`GOAWAY`, `REFUSED_STREAM`). Every call goes to `origin`.
/// Like tonic's channel, it reads no proxy from the environment; it needs HTTP/2 by ALPN.
///
/// For a token, put a [`BearerLayer`](crate::BearerLayer) with the
/// [`GrpcUnauthenticated`](crate::classify::GrpcUnauthenticated) classifier in front
/// ([`body`](crate::body) shows the stack). Each setter returns the channel unconnected.
///
/// # Examples
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use bearer_reload::tonic::TlsChannel;
/// use bearer_reload::tls::{IdentityStore, RootStore};
/// use bearer_reload::source::FileSource;
/// use tonic_health::pb::{HealthCheckRequest, health_client::HealthClient};
///
/// // An etcd client's certificate from cert-manager, and the CA of etcd's.
/// let identity = IdentityStore::files("/tls/tls.crt", "/tls/tls.key").load().await?;
/// let roots = RootStore::builder(FileSource::new("/tls/ca.crt")).load().await?;
/// let channel = TlsChannel::new("https://etcd.internal:2379".parse()?, roots)?.identity(identity);
/// let mut health = HealthClient::new(channel);
/// let serving = health.check(HealthCheckRequest::default()).await?;
/// # let _ = serving; Ok(()) }
/// ```
pub struct TlsChannel<B = tonic::body::Body> {
    shared: Arc<Shared<B>>,
    /// The connection of the generations this clone last called with, and its sender.
    connection: Arc<Connection<ReplayBody<B>>>,
    sender: Option<SendRequest<ReplayBody<B>>>,
}

impl<B> Clone for TlsChannel<B> {
    fn clone(&self) -> Self {
        Self {
            shared: self.shared.clone(),
            connection: self.connection.clone(),
            sender: self.sender.clone(),
        }
    }
}

impl<B> fmt::Debug for TlsChannel<B> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsChannel")
            .field("origin", &self.shared.settings.origin)
            .field("identity", &self.shared.stores.identity)
            .field("roots", &self.shared.stores.roots)
            .field("generations", &self.connection.generations)
            .finish_non_exhaustive()
    }
}

struct Shared<B> {
    stores: Stores,
    settings: Settings,
    dial: Dial,
    /// The connection of the newest generations seen.
    current: Mutex<Arc<Connection<ReplayBody<B>>>>,
}

#[derive(Clone)]
struct Settings {
    origin: Uri,
    server_name: Option<ServerName<'static>>,
    connect_timeout: Option<Duration>,
    http2: Builder<Spawn>,
}

impl<B> TlsChannel<B>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    /// Calls to `origin` (`https://host:port`) trusting `roots`, dialled at the first call.
    ///
    /// # Errors
    ///
    /// An [`io::Error`](std::io::Error) of kind `InvalidInput` naming `origin` when it is
    /// not `https://` or has no host.
    pub fn new(origin: Uri, roots: RootStore) -> Result<Self, std::io::Error> {
        if origin.scheme() != Some(&Scheme::HTTPS) {
            return Err(UriError::NotHttps { uri: origin }.into());
        }
        if origin.authority().is_none_or(|a| a.host().is_empty()) {
            return Err(UriError::NoHost { uri: origin }.into());
        }
        let mut http2 = Builder::new(Spawn);
        http2.timer(TokioTimer::new());
        let stores = Stores {
            identity: None,
            roots,
        };
        let settings = Settings {
            // Userinfo never goes to the server (HTTP/2 forbids it), nor into an error.
            origin: Redacted(&origin).uri(),
            server_name: None,
            connect_timeout: Some(Duration::from_secs(30)),
            http2,
        };
        Ok(Self::build(stores, settings))
    }

    /// Presents `identity`'s client certificate at each handshake (none by default).
    pub fn identity(self, identity: IdentityStore) -> Self {
        self.with(|stores, _| stores.identity = Some(identity))
    }

    /// Verifies the server (and sends SNI) for `name` instead of the origin's host (tonic's
    /// `ClientTlsConfig::domain_name`).
    pub fn server_name(self, name: ServerName<'static>) -> Self {
        self.with(|_, settings| settings.server_name = Some(name))
    }

    /// How long making a connection may take, from the TCP connect to the end of the
    /// HTTP/2 handshake (30 s by default); `None` for no limit.
    pub fn connect_timeout(self, timeout: Option<Duration>) -> Self {
        self.with(|_, settings| settings.connect_timeout = timeout)
    }

    fn with(self, change: impl FnOnce(&mut Stores, &mut Settings)) -> Self {
        let (mut stores, mut settings) = (self.shared.stores.clone(), self.shared.settings.clone());
        change(&mut stores, &mut settings);
        Self::build(stores, settings)
    }

    fn build(stores: Stores, settings: Settings) -> Self {
        let dial = Dial {
            connector: https_connector(
                &stores,
                settings.server_name.clone(),
                Arc::new(Matcher::builder().build()),
                Serves::Http2,
            ),
            connect_timeout: settings.connect_timeout,
            http2: settings.http2.clone(),
            origin: settings.origin.clone(),
        };
        let connection = Arc::new(Connection::new(stores.generations()));
        TlsChannel {
            shared: Arc::new(Shared {
                stores,
                settings,
                dial,
                current: Mutex::new(connection.clone()),
            }),
            connection,
            sender: None,
        }
    }
}

impl<B> Shared<B> {
    /// The connection of `generations`, made anew when they are newer.
    #[cold]
    fn connection_for(&self, generations: Generations) -> Arc<Connection<ReplayBody<B>>> {
        let mut current = lock(&self.current);
        let newer = generations.identity > current.generations.identity
            || generations.roots > current.generations.roots;
        if newer {
            tracing::debug!(
                identity = generations.identity,
                roots = generations.roots,
                "TLS credentials rotated: later gRPC calls go out on a new connection"
            );
            *current = Arc::new(Connection::new(generations));
        }
        current.clone()
    }

    fn connection_now(&self) -> Arc<Connection<ReplayBody<B>>> {
        self.connection_for(self.stores.generations())
    }

    /// Puts the origin's scheme and authority on `req`'s URI.
    fn address(&self, req: &mut Request<B>) {
        let origin = &self.settings.origin;
        let uri = req.uri_mut();
        let mut parts = std::mem::take(uri).into_parts();
        parts.scheme = origin.scheme().cloned();
        parts.authority = origin.authority().cloned();
        if parts.path_and_query.is_none() {
            parts.path_and_query = Some(PathAndQuery::from_static("/"));
        }
        *uri = Uri::from_parts(parts).expect("a scheme, an authority and a path make a URI");
    }
}

impl<B> Service<Request<B>> for TlsChannel<B>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    type Response = Response<Incoming>;
    type Error = BoxError;
    // Boxed: hyper's send future has no name, and a TLS round trip dwarfs the allocation.
    type Future = Pin<Box<dyn Future<Output = Result<Response<Incoming>, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let now = self.shared.stores.generations();
        if now != self.connection.generations {
            self.connection = self.shared.connection_for(now);
            self.sender = None;
        }
        if self.sender.as_ref().is_none_or(SendRequest::is_closed) {
            self.sender = self.connection.open();
        }
        self.shared.address(&mut req);
        let req = req.map(ReplayBody::new);
        // With a token, a 401 is the retry layer's to send again.
        let token = req.headers().contains_key(http::header::AUTHORIZATION);
        let replay = clone_request(&req);
        let first = match self.sender.as_mut() {
            Some(sender) => Ok(sender.try_send_request(req)),
            None => Err(req),
        };
        Box::pin(respond(
            self.shared.clone(),
            self.connection.clone(),
            first,
            (replay, token),
        ))
    }
}

/// Why an attempt failed.
enum Failed<R> {
    /// No connection could be made; the request was never sent.
    Dial(Arc<io::Error>, R),
    /// hyper's error, and the request when hyper gave it back unsent.
    Send(hyper::Error, Option<R>),
}

/// Sends `req` on `connection`, dialled if need be; again if it closed before taking it.
async fn send<B>(
    shared: &Shared<B>,
    connection: &Connection<ReplayBody<B>>,
    mut req: Request<ReplayBody<B>>,
) -> Result<Response<Incoming>, Failed<Request<ReplayBody<B>>>>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    let mut closed = false;
    loop {
        let mut sender = match connection.sender(&shared.dial).await {
            Ok(sender) => sender,
            Err(error) => return Err(Failed::Dial(error, req)),
        };
        match sender.try_send_request(req).await {
            Ok(response) => return Ok(response),
            Err(mut error) => match error.take_message() {
                Some(back) if !closed => {
                    closed = true;
                    req = back;
                }
                back => return Err(Failed::Send(error.into_error(), back)),
            },
        }
    }
}

/// A call: its `first` attempt (or the request awaiting a connection), then any recovery.
async fn respond<B, F>(
    shared: Arc<Shared<B>>,
    connection: Arc<Connection<ReplayBody<B>>>,
    first: Result<F, Request<ReplayBody<B>>>,
    again: Again<B>,
) -> Result<Response<Incoming>, BoxError>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<BoxError>,
    F: Future<Output = Result<Response<Incoming>, TrySendError<Request<ReplayBody<B>>>>>,
{
    let outcome = match first {
        Ok(fut) => match fut.await {
            Ok(response) if response.status() != StatusCode::UNAUTHORIZED => return Ok(response),
            Ok(response) => Ok(response),
            Err(mut error) => match error.take_message() {
                // The connection closed before it took the request: on a new one.
                Some(back) => Box::pin(send(&shared, &connection, back)).await,
                None => Err(Failed::Send(error.into_error(), None)),
            },
        },
        Err(req) => Box::pin(send(&shared, &connection, req)).await,
    };
    // Boxed, as the sends above: the future of every call is as large as its largest step.
    Box::pin(recover(shared, connection.generations, outcome, again)).await
}

/// A call's copy, and whether the retry layer resends a 401 itself.
type Again<B> = (Option<Request<ReplayBody<B>>>, bool);

/// After the first attempt's `outcome` on generations `sent`: the answer, or a retry.
async fn recover<B>(
    shared: Arc<Shared<B>>,
    sent: Generations,
    outcome: Result<Response<Incoming>, Failed<Request<ReplayBody<B>>>>,
    (replay, token): Again<B>,
) -> Result<Response<Incoming>, BoxError>
where
    B: http_body::Body + Send + 'static,
    B::Error: Into<BoxError>,
{
    let (refused, answer, unsent) = match outcome {
        Ok(response) if response.status() != StatusCode::UNAUTHORIZED => return Ok(response),
        // A server that refuses a certificate on a connection already made answers so.
        Ok(response) => (Blame::Identity, Answer::Response(response), None),
        Err(Failed::Dial(error, req)) => match blame(&*error) {
            Some(blame) => (
                blame,
                Answer::Failed(shared.connect_error(error)),
                Some(req),
            ),
            None => return Err(shared.connect_error(error)),
        },
        Err(Failed::Send(error, back)) => {
            if not_processed(&error) {
                // Turned away by the server's GOAWAY or REFUSED_STREAM: once more.
                let req = back.or_else(|| replay.filter(|r| r.body().start_replay()));
                let Some(req) = req else {
                    return Err(shared.call_error(error));
                };
                let connection = shared.connection_now();
                let outcome = send(&shared, &connection, req).await;
                return outcome.map_err(|failed| shared.error(failed));
            }
            match blame(&error) {
                Some(blame) => (blame, Answer::Failed(shared.call_error(error)), back),
                None => return Err(shared.call_error(error)),
            }
        }
    };
    let Some(refusal) = Refusal::new(&shared.stores, refused, sent, Certainty::Certain) else {
        return answer.into_outcome();
    };
    let answer = match (token, answer) {
        // The retry layer sends it again: the identity reloads first.
        (true, Answer::Response(mut response)) => {
            if refusal.renew().await {
                response.extensions_mut().insert(Renewed);
            }
            return Ok(response);
        }
        (_, answer) => answer,
    };
    let fresh = unsent.is_some();
    let Some(req) = unsent.or(replay) else {
        // The reload starts for the calls that follow; this one gets its answer.
        refusal.reload_later();
        return answer.into_outcome();
    };
    let mut after = std::pin::pin!(refusal.after(answer));
    let replayable = |req: &Request<ReplayBody<B>>| fresh || req.body().start_replay();
    if let Err(answer) =
        std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || replayable(&req))).await
    {
        return answer.into_outcome();
    }
    let connection = shared.connection_now();
    refusal.resending();
    let outcome = send(&shared, &connection, req).await;
    refusal.resent(is_refusal(&outcome));
    outcome.map_err(|failed| shared.error(failed))
}

impl<B> Shared<B> {
    /// A failure as the call's error, naming the origin.
    fn error<R>(&self, failed: Failed<R>) -> BoxError {
        match failed {
            Failed::Dial(source, _) => self.connect_error(source),
            Failed::Send(source, _) => self.call_error(source),
        }
    }

    fn connect_error(&self, source: Arc<io::Error>) -> BoxError {
        let origin = self.settings.origin.clone();
        Error::Connect { origin, source }.into()
    }

    fn call_error(&self, source: hyper::Error) -> BoxError {
        let origin = self.settings.origin.clone();
        Error::Call { origin, source }.into()
    }
}

/// Whether a second attempt was refused again.
fn is_refusal<R>(outcome: &Result<Response<Incoming>, Failed<R>>) -> bool {
    match outcome {
        Ok(response) => response.status() == StatusCode::UNAUTHORIZED,
        Err(Failed::Dial(error, _)) => blame(&**error).is_some(),
        Err(Failed::Send(error, _)) => blame(error).is_some(),
    }
}

/// Whether the server said it did not process the stream: a graceful `GOAWAY` that came
/// before it (RFC 9113, section 6.8), or `REFUSED_STREAM`.
fn not_processed(error: &hyper::Error) -> bool {
    let mut next: Option<&(dyn StdError + 'static)> = Some(error);
    while let Some(e) = next {
        if let Some(h2) = e.downcast_ref::<h2::Error>() {
            let goaway = h2.is_go_away() && h2.reason() == Some(h2::Reason::NO_ERROR);
            let refused = h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
            return h2.is_remote() && (goaway || refused);
        }
        next = e.source();
    }
    false
}

/// A call's error.
#[derive(Debug, thiserror::Error)]
enum Error {
    #[error("cannot connect to {origin}")]
    Connect {
        origin: Uri,
        #[source]
        source: Arc<io::Error>,
    },
    #[error("the call to {origin} failed")]
    Call {
        origin: Uri,
        #[source]
        source: hyper::Error,
    },
}

/// What came back refused: a 401, or an error.
enum Answer {
    Response(Response<Incoming>),
    Failed(BoxError),
}

impl Answer {
    fn into_outcome(self) -> Result<Response<Incoming>, BoxError> {
        match self {
            Answer::Response(response) => Ok(response),
            Answer::Failed(error) => Err(error),
        }
    }
}

impl Refused for Answer {
    type Body = Either<Incoming, Empty<Bytes>>;

    fn into_body(self) -> Self::Body {
        match self {
            Answer::Response(response) => Either::Left(response.into_body()),
            Answer::Failed(_) => Either::Right(Empty::new()),
        }
    }
}
