//! [`RetryUnauthorized`]: on an unauthorized response, reload the token at once and send the
//! request once more with the new one.
//!
//! With [`BearerLayer::retry_unauthorized`], each request remembers the generation of the
//! token it was sent with. When the response says the token was not accepted (HTTP 401 by
//! default, see [`classify`](crate::classify)):
//!
//! - if the store already holds a newer token (the watcher was faster than the server),
//!   the request is sent again with it, without reading the source;
//! - otherwise the source is read again, by a read that starts after the 401 arrived (one
//!   read for every concurrent 401 to the same token, and at most one a second while that
//!   token keeps being refused); if that yields a new token the request is sent again with
//!   it;
//! - if the token did not change, the 401 goes back to the caller: the same token would be
//!   refused again.
//!
//! Before the second attempt, the 401's body is read and dropped, up to [`DRAIN_LIMIT`]
//! bytes and for at most [`DRAIN_TIME`] (a Kubernetes `Status` is a few hundred bytes); a
//! larger or slower body is dropped unread. Over HTTP/1 this puts the connection back in its
//! pool instead of closing it. Over HTTP/2 it ends the stream cleanly: a body dropped unread
//! resets its stream, and h2 closes the whole connection, with every request on it, once it
//! has had to reset 1024 streams whose frames came after it forgot them (`GOAWAY`
//! `ENHANCE_YOUR_CALM`), which bursts of refusals can reach over a connection's life.
//!
//! A request is sent again at most once, and only when its body can be replayed: bodies
//! that clone cheaply ([`TryCloneBody`]), any body wrapped in a
//! [`ReplayBody`](crate::body::ReplayBody), or any body the policy's clone function
//! copies ([`RetryUnauthorized::clone_body_fn`]).
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
//! [`BearerLayer::retry_unauthorized`]: crate::BearerLayer::retry_unauthorized

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::header::AUTHORIZATION;
use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::Sleep;
use tower_service::Service;

use super::BearerService;
use crate::body::TryCloneBody;
use crate::classify::{GrpcUnauthenticated, Http401, Unauthorized};
use crate::store::{RetryOutcome, TokenStore};
use crate::token::Token;

/// The most of a 401's body read (and dropped) before the retry, so that its connection
/// can be reused.
pub const DRAIN_LIMIT: usize = 8 * 1024;

/// The longest wait for a 401's body before the retry goes ahead without it.
pub const DRAIN_TIME: Duration = Duration::from_millis(50);

/// How the retry policy copies a request body for the second attempt.
pub trait CloneBody<B>: Clone {
    /// A copy of `body` as it was before anything was read from it, or `None` when it
    /// cannot be copied (its request is then not sent again).
    fn clone_body(&self, body: &B) -> Option<B>;

    /// Whether the copy can be sent now (see [`TryCloneBody::start_replay`]).
    fn start_replay(&self, copy: &B) -> bool;
}

/// Copies bodies through [`TryCloneBody`]. The default.
#[derive(Debug, Clone, Copy, Default)]
pub struct TryClone;

impl<B: TryCloneBody> CloneBody<B> for TryClone {
    fn clone_body(&self, body: &B) -> Option<B> {
        body.try_clone_body()
    }

    fn start_replay(&self, copy: &B) -> bool {
        copy.start_replay()
    }
}

/// Copies bodies with a function; see [`RetryUnauthorized::clone_body_fn`].
#[derive(Debug, Clone, Copy)]
pub struct CloneBodyFn<F>(F);

impl<B, F> CloneBody<B> for CloneBodyFn<F>
where
    F: Fn(&B) -> Option<B> + Clone,
{
    fn clone_body(&self, body: &B) -> Option<B> {
        (self.0)(body)
    }

    fn start_replay(&self, _copy: &B) -> bool {
        true
    }
}

/// Retry policy for unauthorized responses; see [`BearerLayer::retry_unauthorized`] and
/// the [module docs](self).
///
/// [`BearerLayer::retry_unauthorized`]: crate::BearerLayer::retry_unauthorized
#[derive(Debug, Clone, Copy, Default)]
pub struct RetryUnauthorized<C = Http401, F = TryClone> {
    classifier: C,
    clone_body: F,
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
            clone_body: TryClone,
        }
    }
}

impl<C, F> RetryUnauthorized<C, F> {
    /// Use `classifier` to tell unauthorized responses.
    pub fn classifier<D: Unauthorized>(self, classifier: D) -> RetryUnauthorized<D, F> {
        RetryUnauthorized {
            classifier,
            clone_body: self.clone_body,
        }
    }

    /// Copy request bodies with `f` instead of [`TryCloneBody`]: for a body type from
    /// another crate, which this crate's trait cannot be implemented for (tower-http's
    /// `follow_redirect::policy::clone_body_fn` is the model).
    ///
    /// ```
    /// use bearer_reload::RetryUnauthorized;
    ///
    /// /// A body from some other crate, with its own way to copy itself.
    /// struct TheirBody(Option<bytes::Bytes>);
    ///
    /// let policy = RetryUnauthorized::new()
    ///     .clone_body_fn(|b: &TheirBody| b.0.clone().map(|bytes| TheirBody(Some(bytes))));
    /// # let _ = policy;
    /// ```
    pub fn clone_body_fn<B, G>(self, f: G) -> RetryUnauthorized<C, CloneBodyFn<G>>
    where
        G: Fn(&B) -> Option<B> + Clone,
    {
        RetryUnauthorized {
            classifier: self.classifier,
            clone_body: CloneBodyFn(f),
        }
    }
}

/// A copy of `req` with a copy of its body, or `None` when the body cannot be copied.
fn clone_request<B, F: CloneBody<B>>(req: &Request<B>, clone_body: &F) -> Option<Request<B>> {
    let mut copy = Request::new(clone_body.clone_body(req.body())?);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

impl<S, B, ResB, C, F> Service<Request<B>> for BearerService<S, RetryUnauthorized<C, F>>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    ResB: Body,
    C: Unauthorized,
    F: CloneBody<B>,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = RetryFuture<S, B, ResB, C, F>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let sent = self.authorize(req.headers_mut());
        // Only our own token is ours to refresh: a request that kept its own header is
        // passed through as it is.
        let replay = sent.and_then(|_| clone_request(&req, &self.policy.clone_body));
        let retry_svc = replay.as_ref().map(|_| self.inner.clone());
        RetryFuture {
            state: State::First {
                fut: self.inner.call(req),
            },
            sent: sent.map(|generation| (self.store.clone(), generation)),
            policy: self.policy.clone(),
            replay,
            retry_svc,
        }
    }
}

type Reload = Pin<Box<dyn Future<Output = Option<Arc<Token>>> + Send>>;

pin_project! {
    /// Response future of [`BearerService`] with [`RetryUnauthorized`].
    ///
    /// Unboxed while the first response is awaited; the wait for the reload after a 401 is
    /// boxed.
    pub struct RetryFuture<S, B, ResB, C, F>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future, ResB>,
        sent: Option<(TokenStore, u64)>,
        policy: RetryUnauthorized<C, F>,
        replay: Option<Request<B>>,
        retry_svc: Option<S>,
    }
}

pin_project! {
    #[project = StateProj]
    enum State<Fut, ResB> {
        First { #[pin] fut: Fut },
        Reloading { reload: Reload, response: Option<Response<ResB>> },
        // Reading the 401's body away, so that its connection is reused.
        Draining { #[pin] body: ResB, read: usize, #[pin] deadline: Sleep },
        Ready,
        Retrying { #[pin] fut: Fut },
    }
}

impl<S, B, ResB, C, F> Future for RetryFuture<S, B, ResB, C, F>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    ResB: Body,
    C: Unauthorized,
    F: CloneBody<B>,
{
    type Output = Result<Response<ResB>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::First { fut } => {
                    let response = ready!(fut.poll(cx))?;
                    let Some((store, sent)) = this.sent.as_ref() else {
                        return Poll::Ready(Ok(response));
                    };
                    if !this.policy.classifier.is_unauthorized(&response) {
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
                    let clone_body = &this.policy.clone_body;
                    let replay = this
                        .replay
                        .take()
                        .filter(|r| clone_body.start_replay(r.body()));
                    match (newer, replay) {
                        // The retry carries the token current when it leaves (see `Ready`).
                        (Some(_newer), Some(request)) => {
                            *this.replay = Some(request);
                            let response = response.take().expect("polled after completion");
                            this.state.set(State::Draining {
                                body: response.into_body(),
                                read: 0,
                                deadline: tokio::time::sleep(DRAIN_TIME),
                            });
                        }
                        _ => {
                            let response = response.take().expect("polled after completion");
                            return Poll::Ready(Ok(response));
                        }
                    }
                }
                StateProj::Draining {
                    mut body,
                    read,
                    deadline,
                } => {
                    if drained(body.as_mut(), read, deadline, cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.state.set(State::Ready);
                    // Yield once: the connection's own task puts it back in the pool when
                    // it sees the end of the body, which it has only just been given.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                StateProj::Ready => {
                    let svc = this.retry_svc.as_mut().expect("a replay has a service");
                    ready!(svc.poll_ready(cx))?;
                    let mut request = this.replay.take().expect("a replay request");
                    if let Some((store, _)) = this.sent.as_ref() {
                        // The newest token now, not the one the reload brought: the drain
                        // and the wait for the service may outlast another rotation, and
                        // a server that revokes at rotation would refuse the older one.
                        let token = store.current();
                        request
                            .headers_mut()
                            .insert(AUTHORIZATION, token.header_value().clone());
                        store.count_retry(RetryOutcome::Sent);
                    }
                    let fut = svc.call(request);
                    this.state.set(State::Retrying { fut });
                }
                StateProj::Retrying { fut } => {
                    let response = ready!(fut.poll(cx))?;
                    if let Some((store, _)) = this.sent.as_ref() {
                        let outcome = if this.policy.classifier.is_unauthorized(&response) {
                            RetryOutcome::Refused
                        } else {
                            RetryOutcome::Succeeded
                        };
                        store.count_retry(outcome);
                    }
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}

/// Reads `body` to its end, unless it goes past [`DRAIN_LIMIT`], fails, or the deadline
/// passes first: ready when the draining is over, whichever way.
pub(crate) fn drained<B: Body>(
    mut body: Pin<&mut B>,
    read: &mut usize,
    deadline: Pin<&mut Sleep>,
    cx: &mut Context<'_>,
) -> Poll<()> {
    if deadline.poll(cx).is_ready() {
        return Poll::Ready(());
    }
    loop {
        match ready!(body.as_mut().poll_frame(cx)) {
            Some(Ok(frame)) => {
                *read += frame.data_ref().map_or(0, bytes::Buf::remaining);
                if *read > DRAIN_LIMIT {
                    return Poll::Ready(());
                }
            }
            None | Some(Err(_)) => return Poll::Ready(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_copy_keeps_everything_and_owns_its_parts() {
        let mut req = Request::builder()
            .method("POST")
            .uri("http://h/p?q")
            .header("x-a", "1")
            .extension(7u32)
            .body("body".to_string())
            .unwrap();
        let copy = clone_request(&req, &TryClone).unwrap();
        assert_eq!(copy.method(), "POST");
        assert_eq!(copy.uri(), "http://h/p?q");
        assert_eq!(copy.headers()["x-a"], "1");
        assert_eq!(copy.extensions().get::<u32>(), Some(&7));
        assert_eq!(copy.body(), "body");
        // Changing the original (as the first attempt's stack does) leaves the copy alone.
        req.headers_mut().insert("x-a", "2".parse().unwrap());
        req.extensions_mut().insert(8u32);
        req.body_mut().push_str("-sent");
        assert_eq!(copy.headers()["x-a"], "1");
        assert_eq!(copy.extensions().get::<u32>(), Some(&7));
        assert_eq!(copy.body(), "body");
    }

    /// Drains `frames` (then stays pending if `endless`), counting the frames it polled.
    async fn drain(frames: Vec<usize>, endless: bool) -> (usize, usize) {
        use http_body_util::{BodyExt, StreamBody};
        let polled = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counter = polled.clone();
        let stream = futures_util::stream::iter(frames).map(move |len| {
            counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            Ok::<_, std::convert::Infallible>(http_body::Frame::data(bytes::Bytes::from(vec![
                b'x';
                len
            ])))
        });
        let tail = futures_util::stream::pending();
        let body = if endless {
            StreamBody::new(stream.chain(tail)).boxed_unsync()
        } else {
            StreamBody::new(stream.chain(futures_util::stream::empty())).boxed_unsync()
        };
        let mut body = std::pin::pin!(body);
        let mut deadline = std::pin::pin!(tokio::time::sleep(DRAIN_TIME));
        let mut read = 0;
        std::future::poll_fn(|cx| drained(body.as_mut(), &mut read, deadline.as_mut(), cx)).await;
        (read, polled.load(std::sync::atomic::Ordering::SeqCst))
    }

    use futures_util::StreamExt;

    #[tokio::test(start_paused = true)]
    async fn a_401_body_is_drained_to_its_end_within_the_limits_and_no_further() {
        // A Kubernetes `Status`: read to the end.
        assert_eq!(drain(vec![150, 50], false).await, (200, 2));
        // Past the limit: the reading stops there, the rest is left unread.
        let (read, polled) = drain(vec![4096, 4096, 4096, 4096], false).await;
        assert_eq!((read, polled), (3 * 4096, 3));
        // A body that never ends: the deadline ends the wait.
        let started = tokio::time::Instant::now();
        assert_eq!(drain(vec![10], true).await, (10, 1));
        assert_eq!(started.elapsed(), DRAIN_TIME);
    }

    #[test]
    fn a_clone_function_copies_bodies_the_trait_does_not_know() {
        #[derive(Debug, PartialEq)]
        struct Theirs(u8);
        let policy = RetryUnauthorized::new().clone_body_fn(|b: &Theirs| Some(Theirs(b.0)));
        let req = Request::new(Theirs(3));
        let copy = clone_request(&req, &policy.clone_body).unwrap();
        assert_eq!(copy.body(), &Theirs(3));
        let refuse = RetryUnauthorized::new().clone_body_fn(|_: &Theirs| None);
        assert!(clone_request(&req, &refuse.clone_body).is_none());
    }

    #[tokio::test]
    async fn a_body_copied_by_a_function_is_sent_again_after_a_401() {
        use tower_layer::Layer;
        use tower_service::Service as _;

        /// A body type of another crate: no `TryCloneBody`, a copy method of its own.
        #[derive(Debug)]
        struct Theirs(&'static str);
        impl Theirs {
            fn duplicate(&self) -> Self {
                Theirs(self.0)
            }
        }

        let store = crate::test_support::rotated_store().await;
        let server = tower::service_fn(|req: Request<Theirs>| async move {
            let ok = req.headers()[AUTHORIZATION] == "Bearer new";
            let mut res = Response::new(req.into_body().0.to_owned());
            if !ok {
                *res.status_mut() = http::StatusCode::UNAUTHORIZED;
            }
            Ok::<_, std::convert::Infallible>(res)
        });
        let mut client = crate::BearerLayer::new(store.clone())
            .retry_unauthorized(
                RetryUnauthorized::new().clone_body_fn(|b: &Theirs| Some(b.duplicate())),
            )
            .layer(server);
        let res = client.call(Request::new(Theirs("payload"))).await.unwrap();
        assert_eq!(res.status(), http::StatusCode::OK);
        assert_eq!(res.body(), "payload", "the copy was sent");
        assert_eq!(store.status().unauthorized.retries_succeeded, 1);
    }
}
