//! What to do about an unauthorized response: reload the token at once and send the request
//! once more with the new one.
//!
//! With [`BearerLayer::retry_unauthorized`], each request remembers the generation of the
//! token it was sent with. When the response says the token was not accepted (HTTP 401 by
//! default, see [`Unauthorized`]):
//!
//! - if the store already holds a newer token (the watcher was faster than the server),
//!   the request is sent again with it, without reading the file;
//! - otherwise the source is read again, by a read that starts after the 401 arrived (one
//!   read for every concurrent 401 to the same token, and at most one a second while that
//!   token keeps being refused); if that yields a new token the request is sent again with
//!   it;
//! - if the token did not change, the 401 goes back to the caller: the same token would be
//!   refused again.
//!
//! A request is sent again at most once, and only when its body can be replayed: bodies
//! that clone cheaply ([`TryCloneBody`]), or any body wrapped in a [`ReplayBody`], which
//! keeps a copy of what it streams up to a limit.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use std::sync::{Arc, Mutex};
//! use bearer_reload::{BearerLayer, RetryUnauthorized, TokenLoader};
//! use http::{Request, Response, StatusCode, header::AUTHORIZATION};
//! use tower::{Layer, ServiceExt, service_fn};
//!
//! // The token source: "old" first, then "new" (as if the file had been rotated).
//! let file = Arc::new(Mutex::new("old"));
//! let store = TokenLoader::new("example", {
//!     let file = file.clone();
//!     move || {
//!         let token = file.lock().unwrap().as_bytes().to_vec();
//!         async move { Ok::<_, std::io::Error>(token) }
//!     }
//! })
//! .load()
//! .await?;
//! *file.lock().unwrap() = "new";
//!
//! // A server that has already revoked "old".
//! let server = service_fn(|req: Request<String>| async move {
//!     let ok = req.headers()[AUTHORIZATION] == "Bearer new";
//!     let status = if ok { StatusCode::OK } else { StatusCode::UNAUTHORIZED };
//!     let mut res = Response::new(req.into_body());
//!     *res.status_mut() = status;
//!     Ok::<_, std::convert::Infallible>(res)
//! });
//! let client = BearerLayer::new(store.clone())
//!     .retry_unauthorized(RetryUnauthorized::new())
//!     .layer(server);
//! let res = client.oneshot(Request::new("payload".to_string())).await?;
//! assert_eq!(res.status(), StatusCode::OK);
//! assert_eq!(res.body(), "payload"); // the body was replayed
//! assert_eq!(store.status().unauthorized.retries_succeeded, 1);
//! # Ok(()) }
//! ```
//!
//! # Where it goes in a stack
//!
//! - Outside tower-http's `FollowRedirect`, so that the token is set once, on the first
//!   hop, and never follows a redirect to another origin.
//! - Inside a general retry layer (such as kube's retry of 429/503/504), so that each of
//!   its attempts gets the current token; the 401 retry here is separate from it and
//!   happens at most once per attempt.
//!
//! [`BearerLayer::retry_unauthorized`]: crate::BearerLayer::retry_unauthorized

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http::header::AUTHORIZATION;
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body::{Body, Frame, SizeHint};
use pin_project_lite::pin_project;
use tower_service::Service;

use crate::layer::BearerService;
use crate::store::{TokenStore, lock};
use crate::token::Token;

/// No retry: the layer only sets the header. The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoRetry;

/// Decides whether a response means "the token was not accepted".
pub trait Unauthorized: Clone {
    /// Whether `response` is an authentication failure.
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool;
}

/// HTTP `401 Unauthorized`. The default classifier.
#[derive(Debug, Clone, Copy, Default)]
pub struct Http401;

impl Unauthorized for Http401 {
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool {
        response.status() == StatusCode::UNAUTHORIZED
    }
}

/// gRPC `UNAUTHENTICATED`: `grpc-status: 16` in the response headers (a trailers-only
/// response, which is how gRPC servers answer a call they refuse before it starts), or an
/// HTTP 401 from a proxy in front of the server.
///
/// A `grpc-status` sent in the trailers after a streamed body is not seen: it arrives
/// after the response has been handed to the caller.
#[derive(Debug, Clone, Copy, Default)]
pub struct GrpcUnauthenticated;

impl Unauthorized for GrpcUnauthenticated {
    fn is_unauthorized<B>(&self, response: &Response<B>) -> bool {
        response.status() == StatusCode::UNAUTHORIZED
            || response
                .headers()
                .get("grpc-status")
                .is_some_and(|v| v.as_bytes() == b"16")
    }
}

/// Retry policy for unauthorized responses; see [`BearerLayer::retry_unauthorized`] and
/// the [module docs](crate::retry).
///
/// [`BearerLayer::retry_unauthorized`]: crate::BearerLayer::retry_unauthorized
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryUnauthorized<C = Http401> {
    classifier: C,
}

impl RetryUnauthorized {
    /// Retry on HTTP 401.
    pub fn new() -> Self {
        Self::default()
    }

    /// Retry on gRPC `UNAUTHENTICATED` (see [`GrpcUnauthenticated`]).
    pub fn grpc() -> RetryUnauthorized<GrpcUnauthenticated> {
        RetryUnauthorized {
            classifier: GrpcUnauthenticated,
        }
    }
}

impl<C> RetryUnauthorized<C> {
    /// Use `classifier` to tell unauthorized responses.
    pub fn classifier<D: Unauthorized>(self, classifier: D) -> RetryUnauthorized<D> {
        RetryUnauthorized { classifier }
    }
}

/// A request body that can be copied for a second attempt.
///
/// Implemented for bodies that clone cheaply and for [`ReplayBody`]. A body type that is
/// not replayable at all can implement it by returning `None`: its requests get the reload
/// on 401 but are not sent again. The copy is made for every request before it is sent:
/// `Bytes`, `Full<Bytes>` and `kube::client::Body` share their buffer, while `String` and
/// `Vec<u8>` are copied whole.
pub trait TryCloneBody: Sized {
    /// A copy of the body as it was before anything was read from it, or `None`.
    fn try_clone_body(&self) -> Option<Self>;

    /// Called on a copy made by `try_clone_body` right before it is sent: whether it can
    /// be. [`ReplayBody`] says no once its body outgrew the limit or failed; otherwise the
    /// copy takes the body over, and the first attempt's body reads no further (hyper may
    /// still be sending it after the response arrived), so the record stays complete.
    fn start_replay(&self) -> bool {
        true
    }
}

macro_rules! clone_body {
    ($($ty:ty),* $(,)?) => {$(
        impl TryCloneBody for $ty {
            fn try_clone_body(&self) -> Option<Self> {
                Some(self.clone())
            }
        }
    )*};
}

clone_body!(
    String,
    Bytes,
    Vec<u8>,
    (),
    http_body_util::Full<Bytes>,
    http_body_util::Empty<Bytes>,
);

#[cfg(feature = "kube")]
impl TryCloneBody for kube::client::Body {
    fn try_clone_body(&self) -> Option<Self> {
        self.try_clone()
    }
}

/// The default limit of a [`ReplayBody`]: 64 KiB.
pub const DEFAULT_REPLAY_LIMIT: usize = 64 * 1024;

/// A body wrapper that keeps a copy of the chunks it streams, up to a limit, so that the
/// request can be sent a second time.
///
/// Nothing is read ahead: the copy is made as the first attempt sends the body. A body that
/// streams more than the limit is sent normally, and its request is not retried.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use bearer_reload::retry::{ReplayBody, TryCloneBody};
/// use http_body_util::{BodyExt, Full};
///
/// let body = ReplayBody::new(Full::new(bytes::Bytes::from_static(b"hello")));
/// let replay = body.try_clone_body().unwrap();
/// assert_eq!(body.collect().await.unwrap().to_bytes(), "hello");
/// assert!(replay.start_replay());
/// assert_eq!(replay.collect().await.unwrap().to_bytes(), "hello");
/// # }
/// ```
pub struct ReplayBody<B> {
    shared: Arc<Mutex<ReplayState<B>>>,
    /// Which handle this is: a newer handle that has started reading supersedes older ones.
    id: u64,
    /// The next recorded chunk this handle yields.
    pos: usize,
    trailers_sent: bool,
}

struct ReplayState<B> {
    body: Pin<Box<B>>,
    chunks: Vec<Bytes>,
    recorded: usize,
    limit: usize,
    /// More than `limit` bytes went by: the record is incomplete.
    overflowed: bool,
    /// The inner body failed: it cannot be replayed.
    failed: bool,
    ended: bool,
    trailers: Option<HeaderMap>,
    handles: u64,
    reader: u64,
}

impl<B> std::fmt::Debug for ReplayBody<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let state = lock(&self.shared);
        f.debug_struct("ReplayBody")
            .field("recorded", &state.recorded)
            .field("limit", &state.limit)
            .field("overflowed", &state.overflowed)
            .finish_non_exhaustive()
    }
}

impl<B> ReplayBody<B> {
    /// Wraps `body`, keeping up to [`DEFAULT_REPLAY_LIMIT`] bytes for a replay.
    pub fn new(body: B) -> Self {
        Self::with_limit(body, DEFAULT_REPLAY_LIMIT)
    }

    /// Wraps `body`, keeping up to `limit` bytes for a replay.
    pub fn with_limit(body: B, limit: usize) -> Self {
        Self {
            shared: Arc::new(Mutex::new(ReplayState {
                body: Box::pin(body),
                chunks: Vec::new(),
                recorded: 0,
                limit,
                overflowed: false,
                failed: false,
                ended: false,
                trailers: None,
                handles: 1,
                reader: 0,
            })),
            id: 0,
            pos: 0,
            trailers_sent: false,
        }
    }
}

impl<B> TryCloneBody for ReplayBody<B> {
    fn try_clone_body(&self) -> Option<Self> {
        let mut state = lock(&self.shared);
        if state.overflowed || state.failed {
            return None;
        }
        let id = state.handles;
        state.handles += 1;
        Some(Self {
            shared: self.shared.clone(),
            id,
            pos: 0,
            trailers_sent: false,
        })
    }

    fn start_replay(&self) -> bool {
        let mut state = lock(&self.shared);
        if state.overflowed || state.failed {
            return false;
        }
        state.reader = state.reader.max(self.id);
        true
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.get_mut();
        let mut state = lock(&this.shared);
        if this.id < state.reader || (this.id > state.reader && state.overflowed) {
            // A replay has taken over the body and this attempt is over; or this is a
            // replay of a record that is incomplete.
            return Poll::Ready(None);
        }
        state.reader = this.id;
        if let Some(chunk) = state.chunks.get(this.pos) {
            this.pos += 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk.clone()))));
        }
        if state.ended {
            if !this.trailers_sent {
                this.trailers_sent = true;
                if let Some(trailers) = state.trailers.clone() {
                    return Poll::Ready(Some(Ok(Frame::trailers(trailers))));
                }
            }
            return Poll::Ready(None);
        }
        let frame = ready!(state.body.as_mut().poll_frame(cx));
        let frame = match frame {
            None => {
                state.ended = true;
                return Poll::Ready(None);
            }
            Some(Err(e)) => {
                state.failed = true;
                return Poll::Ready(Some(Err(e)));
            }
            Some(Ok(frame)) => frame,
        };
        match frame.into_data() {
            Ok(mut data) => {
                let chunk = data.copy_to_bytes(data.remaining());
                if !state.overflowed && state.recorded + chunk.len() <= state.limit {
                    state.recorded += chunk.len();
                    state.chunks.push(chunk.clone());
                    this.pos += 1;
                } else {
                    // Past the limit: stream on, but no copy is kept.
                    state.overflowed = true;
                    state.chunks = Vec::new();
                }
                Poll::Ready(Some(Ok(Frame::data(chunk))))
            }
            Err(frame) => match frame.into_trailers() {
                Ok(trailers) => {
                    state.ended = true;
                    state.trailers = Some(trailers.clone());
                    this.trailers_sent = true;
                    Poll::Ready(Some(Ok(Frame::trailers(trailers))))
                }
                // A frame kind http-body does not know yet: pass nothing on.
                Err(_) => Poll::Ready(None),
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        let state = lock(&self.shared);
        self.pos >= state.chunks.len()
            && (state.ended && (self.trailers_sent || state.trailers.is_none())
                || state.body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let state = lock(&self.shared);
        let buffered: u64 = state.chunks[self.pos.min(state.chunks.len())..]
            .iter()
            .map(|c| c.len() as u64)
            .sum();
        if state.ended {
            return SizeHint::with_exact(buffered);
        }
        let inner = state.body.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower() + buffered);
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper + buffered);
        }
        hint
    }
}

fn clone_request<B: TryCloneBody>(req: &Request<B>) -> Option<Request<B>> {
    let mut copy = Request::new(req.body().try_clone_body()?);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

impl<S, B, ResB, C> Service<Request<B>> for BearerService<S, RetryUnauthorized<C>>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    B: TryCloneBody,
    C: Unauthorized,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = RetryFuture<S, B, ResB, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.parts_mut().0.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let sent = self.authorize(req.headers_mut());
        // Only our own token is ours to refresh: a request that kept its own header is
        // passed through as it is.
        let replay = sent.and_then(|_| clone_request(&req));
        let classifier = self.retry.classifier.clone();
        let (inner, store) = self.parts_mut();
        let retry_svc = replay.as_ref().map(|_| inner.clone());
        RetryFuture {
            state: State::First {
                fut: inner.call(req),
            },
            store: sent.map(|generation| (store.clone(), generation)),
            classifier,
            replay,
            retry_svc,
        }
    }
}

type Reload = Pin<Box<dyn Future<Output = Option<Arc<Token>>> + Send>>;

pin_project! {
    /// Response future of [`BearerService`] with [`RetryUnauthorized`].
    ///
    /// Unboxed while the first response is awaited; the reload after a 401 is boxed.
    pub struct RetryFuture<S, B, ResB, C>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future, ResB>,
        store: Option<(TokenStore, u64)>,
        classifier: C,
        replay: Option<Request<B>>,
        retry_svc: Option<S>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<F, ResB> {
        First { #[pin] fut: F },
        Reloading { reload: Reload, response: Option<Response<ResB>> },
        Ready,
        Retrying { #[pin] fut: F },
    }
}

impl<S, B, ResB, C> Future for RetryFuture<S, B, ResB, C>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: TryCloneBody,
    C: Unauthorized,
{
    type Output = Result<Response<ResB>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::First { fut } => {
                    let response = ready!(fut.poll(cx))?;
                    let Some((store, sent)) = this.store.as_ref() else {
                        return Poll::Ready(Ok(response));
                    };
                    if !this.classifier.is_unauthorized(&response) {
                        return Poll::Ready(Ok(response));
                    }
                    let (store, sent) = (store.clone(), *sent);
                    let reload: Reload =
                        Box::pin(async move { store.refresh_after_unauthorized(sent).await });
                    this.state.set(State::Reloading {
                        reload,
                        response: Some(response),
                    });
                }
                StateProj::Reloading { reload, response } => {
                    let newer = ready!(reload.as_mut().poll(cx));
                    let replay = this.replay.take().filter(|r| r.body().start_replay());
                    match (newer, replay) {
                        (Some(token), Some(mut request)) => {
                            set_token(request.headers_mut(), token.header_value());
                            *this.replay = Some(request);
                            this.state.set(State::Ready);
                        }
                        _ => {
                            let response = response.take().expect("polled after completion");
                            return Poll::Ready(Ok(response));
                        }
                    }
                }
                StateProj::Ready => {
                    let svc = this.retry_svc.as_mut().expect("a replay has a service");
                    ready!(svc.poll_ready(cx))?;
                    let request = this.replay.take().expect("a replay request");
                    if let Some((store, _)) = this.store.as_ref() {
                        store.count_retry(None);
                    }
                    let fut = svc.call(request);
                    this.state.set(State::Retrying { fut });
                }
                StateProj::Retrying { fut } => {
                    let response = ready!(fut.poll(cx))?;
                    if let Some((store, _)) = this.store.as_ref() {
                        store.count_retry(Some(!this.classifier.is_unauthorized(&response)));
                    }
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}

fn set_token(headers: &mut HeaderMap, value: &HeaderValue) {
    headers.insert(AUTHORIZATION, value.clone());
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::{BodyExt, StreamBody};

    fn chunks(parts: &[&'static str]) -> impl Body<Data = Bytes, Error = std::io::Error> + use<> {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = parts
            .iter()
            .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
            .collect();
        StreamBody::new(futures_util::stream::iter(frames))
    }

    #[tokio::test]
    async fn a_replay_yields_the_same_chunks() {
        let body = ReplayBody::new(chunks(&["ab", "cd", "ef"]));
        let replay = body.try_clone_body().unwrap();
        assert_eq!(body.collect().await.unwrap().to_bytes(), "abcdef");
        assert!(replay.start_replay());
        assert_eq!(replay.size_hint().exact(), Some(6));
        assert_eq!(replay.collect().await.unwrap().to_bytes(), "abcdef");
    }

    #[tokio::test]
    async fn a_replay_continues_a_partly_read_body() {
        let mut body = ReplayBody::new(chunks(&["ab", "cd", "ef"]));
        let replay = body.try_clone_body().unwrap();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "ab");
        // The replay takes over: the first attempt's body ends.
        assert_eq!(replay.collect().await.unwrap().to_bytes(), "abcdef");
        assert!(body.frame().await.is_none());
    }

    #[tokio::test]
    async fn starting_a_replay_stops_the_first_attempt_at_once() {
        // The first attempt is still being sent when the replay is decided on: from then on
        // it reads nothing more, so it cannot push the record past the limit behind the
        // replay's back.
        let mut body = ReplayBody::with_limit(chunks(&["ab", "cd", "ef"]), 4);
        let replay = body.try_clone_body().unwrap();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, "ab");
        assert!(replay.start_replay());
        assert!(body.frame().await.is_none());
        // The replay gets everything, past the limit too: it is the one reading now.
        assert_eq!(replay.collect().await.unwrap().to_bytes(), "abcdef");
    }

    #[tokio::test]
    async fn over_the_limit_streams_on_but_cannot_replay() {
        let body = ReplayBody::with_limit(chunks(&["abcd", "efgh", "ij"]), 6);
        let replay = body.try_clone_body().unwrap();
        assert_eq!(body.collect().await.unwrap().to_bytes(), "abcdefghij");
        assert!(!replay.start_replay());
    }

    #[tokio::test]
    async fn trailers_are_replayed() {
        let mut trailers = HeaderMap::new();
        trailers.insert("x-sum", HeaderValue::from_static("1"));
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b"x"))),
            Ok(Frame::trailers(trailers.clone())),
        ];
        let body = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)));
        let replay = body.try_clone_body().unwrap();
        let first = body.collect().await.unwrap();
        assert_eq!(first.trailers(), Some(&trailers));
        let second = replay.collect().await.unwrap();
        assert_eq!(second.trailers(), Some(&trailers));
        assert_eq!(second.to_bytes(), "x");
    }

    #[tokio::test]
    async fn a_failed_body_cannot_replay() {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
            Ok(Frame::data(Bytes::from_static(b"x"))),
            Err(std::io::Error::other("reset")),
        ];
        let body = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)));
        let replay = body.try_clone_body().unwrap();
        assert!(body.collect().await.is_err());
        assert!(!replay.start_replay());
    }

    #[test]
    fn classifiers() {
        let res = |status: u16, grpc: Option<&'static str>| {
            let mut r = Response::builder().status(status);
            if let Some(g) = grpc {
                r = r.header("grpc-status", g);
            }
            r.body(()).unwrap()
        };
        assert!(Http401.is_unauthorized(&res(401, None)));
        assert!(!Http401.is_unauthorized(&res(403, None)));
        assert!(!Http401.is_unauthorized(&res(200, Some("16"))));
        assert!(GrpcUnauthenticated.is_unauthorized(&res(200, Some("16"))));
        assert!(GrpcUnauthenticated.is_unauthorized(&res(401, None)));
        assert!(!GrpcUnauthenticated.is_unauthorized(&res(200, Some("7"))));
        assert!(!GrpcUnauthenticated.is_unauthorized(&res(200, Some("0"))));
    }

    #[test]
    fn a_request_copy_keeps_everything_but_is_independent() {
        let req = Request::builder()
            .method("POST")
            .uri("http://h/p?q")
            .header("x-a", "1")
            .extension(7u32)
            .body("body".to_string())
            .unwrap();
        let copy = clone_request(&req).unwrap();
        assert_eq!(copy.method(), "POST");
        assert_eq!(copy.uri(), "http://h/p?q");
        assert_eq!(copy.headers()["x-a"], "1");
        assert_eq!(copy.extensions().get::<u32>(), Some(&7));
        assert_eq!(copy.body(), "body");
    }
}
