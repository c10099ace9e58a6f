//! The refusal engine: when a request is sent again after a failure, which credentials
//! reload, and what happens between the refusal and the second sending. One rule for every
//! part of the crate that resends.
//!
//! A request is sent again, once and with a replayable body, only when the server cannot
//! have acted on it (RFC 9110 §9.2.2): it was never written; or the failure is a certain
//! refusal of a credential, which the server gives before it acts (a 401 or gRPC
//! `UNAUTHENTICATED`, a certificate alert, our refusal of the server's certificate); or its
//! method is idempotent. Anything else goes back to the caller, and the credential still
//! reloads for the requests that follow.
//!
//! After a refusal ([`AfterRefusal`]): the store's newer credential if it has one, else a
//! read that starts after the refusal ([`Store::refresh_after_refusal`]); none newer, the
//! refusal goes back. Then the refused body is read away ([`DRAIN_LIMIT`], [`DRAIN_TIME`]:
//! over HTTP/1 the connection goes back to its pool; over HTTP/2 no stream is reset, and h2
//! closes a connection that resets too many), one yield lets the connection's task pool
//! it, and the caller sends again with the newest token.
//!
//! Who sends again, whatever sits between the parts (a `Buffer`, a task of its own): a
//! 401 to a request with an `Authorization` header is the retry layer's
//! ([`BearerLayer`](crate::BearerLayer)'s, `BearerMiddleware`'s); an HTTPS transport below
//! only reloads its client certificate and marks the answer [`Renewed`] if it found a
//! newer one. A 401 to a request without that header can refuse only the certificate: the
//! transport sends it again itself. Transports also send again what they alone see: a
//! request never written, a handshake refused with an alert, an idempotent request on a
//! connection that closed unanswered.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http::Request;
use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use crate::body::TryCloneBody;
use crate::store::{Certainty, Credential, Store};
use crate::token::Token;

/// A copy of `req` with a copy of its body, or `None` when the body cannot be copied.
pub(crate) fn clone_request<B: TryCloneBody>(req: &Request<B>) -> Option<Request<B>> {
    let mut copy = Request::new(req.body().try_clone_body()?);
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    *copy.extensions_mut() = req.extensions().clone();
    Some(copy)
}

/// The most of a refused response's body read (and dropped) before the retry.
const DRAIN_LIMIT: usize = 8 * 1024;

/// The longest wait for a refused response's body before the retry goes ahead without it.
const DRAIN_TIME: Duration = Duration::from_millis(50);

/// A refused response whose body can be read away.
pub(crate) trait Refused {
    type Body: Body;

    fn into_body(self) -> Self::Body;
}

impl<B: Body> Refused for http::Response<B> {
    type Body = B;

    fn into_body(self) -> B {
        http::Response::into_body(self)
    }
}

/// The reload after a refusal: whether it brought a newer credential.
pub(crate) type Reload = Pin<Box<dyn Future<Output = bool> + Send>>;

/// A response extension: the transport below reloaded its client certificate after this
/// 401 and found a newer one, so the request may go again even with the same token.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Renewed;

/// The reload of `store`'s credential after a refusal of generation `sent`: whether it
/// brought a newer one.
pub(crate) async fn reload<C: Credential>(
    store: Store<C>,
    sent: u64,
    certainty: Certainty,
) -> bool {
    store.refresh_after_refusal(sent, certainty).await.is_some()
}

pin_project! {
    /// What follows a refusal: `Ok(())` when the request should be sent again now,
    /// `Err(response)` when the refused response goes back to the caller. `B` is the
    /// response's body type.
    pub(crate) struct AfterRefusal<R, B> {
        #[pin]
        step: Step<B>,
        response: Option<R>,
    }
}

pin_project! {
    #[project = StepProj]
    enum Step<B> {
        Reloading { reload: Reload },
        // Reading the refused response's body away, so that its connection is reused.
        Draining { #[pin] body: B, read: usize, #[pin] deadline: Sleep },
        Settling,
        Done,
    }
}

impl<R: Refused<Body = B>, B: Body> AfterRefusal<R, B> {
    /// After `response` refused a request sent with the token of generation `sent`:
    /// `renewed` when a transport below found a newer certificate for it ([`Renewed`]).
    pub(crate) fn new(store: Store<Token>, sent: u64, renewed: bool, response: R) -> Self {
        let reload = reload(store, sent, Certainty::Certain);
        Self::reloading(Box::pin(async move { reload.await || renewed }), response)
    }

    /// What follows a refusal whose credentials `reload` reloads.
    pub(crate) fn reloading(reload: Reload, response: R) -> Self {
        Self {
            step: Step::Reloading { reload },
            response: Some(response),
        }
    }

    /// Polls the steps. `replayable` is asked once, when a newer token has come: whether
    /// the request can still be sent again (a replayed body that outgrew its limit cannot).
    pub(crate) fn poll_with(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        replayable: impl FnOnce() -> bool,
    ) -> Poll<Result<(), R>> {
        let mut this = self.project();
        let mut replayable = Some(replayable);
        loop {
            match this.step.as_mut().project() {
                StepProj::Reloading { reload } => {
                    let newer = ready!(reload.as_mut().poll(cx));
                    let response = this.response.take().expect("polled after completion");
                    if !newer || !replayable.take().is_some_and(|f| f()) {
                        this.step.set(Step::Done);
                        return Poll::Ready(Err(response));
                    }
                    this.step.set(Step::Draining {
                        body: response.into_body(),
                        read: 0,
                        deadline: tokio::time::sleep(DRAIN_TIME),
                    });
                }
                StepProj::Draining {
                    body,
                    read,
                    deadline,
                } => {
                    ready!(drained(body, read, deadline, cx));
                    this.step.set(Step::Settling);
                    // Yield once: the connection's own task puts it back in the pool when
                    // it sees the end of the body, which it has only just been given.
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                StepProj::Settling => {
                    this.step.set(Step::Done);
                    return Poll::Ready(Ok(()));
                }
                StepProj::Done => panic!("AfterRefusal polled after completion"),
            }
        }
    }
}

/// Reads `body` to its end, unless it goes past [`DRAIN_LIMIT`], fails, or the deadline
/// passes first: ready when the draining is over, whichever way.
fn drained<B: Body>(
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
mod tests;
