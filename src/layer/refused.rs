//! After a refused request that can be sent again: the reload, the drain of the refused
//! response's body, and the go-ahead to send the request once more. One implementation for
//! the tower retry ([`RetryFuture`](super::RetryFuture)) and the reqwest middleware.
//!
//! - If the store already holds a token newer than the one refused (the watcher was faster
//!   than the server), that is the answer, without reading the source; otherwise the source
//!   is read again, by a read that starts after the refusal arrived (one read for every
//!   concurrent refusal of the same token, at most one a second while it keeps being
//!   refused). No newer token: the refusal goes back to the caller, as the same token would
//!   be refused again.
//! - Before the second attempt, the refused response's body is read and dropped, up to
//!   [`DRAIN_LIMIT`] bytes (8 KiB) and for at most [`DRAIN_TIME`] (50 ms); a Kubernetes
//!   `Status` is a few hundred bytes. A larger or slower body is dropped unread. Over HTTP/1
//!   this puts the connection back in its pool instead of closing it. Over HTTP/2 it ends
//!   the stream cleanly: a body dropped unread resets its stream, and h2 closes the whole
//!   connection, with every request on it, once it has had to reset 1024 streams whose
//!   frames came after it forgot them (`GOAWAY` `ENHANCE_YOUR_CALM`), which bursts of
//!   refusals can reach over a connection's life.
//! - Then one yield, so that the connection's own task can put it back in its pool before
//!   the retry asks for one; the caller sends the request with the store's newest token
//!   (`Store::resend`).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};
use std::time::Duration;

use http_body::Body;
use pin_project_lite::pin_project;
use tokio::time::Sleep;

use crate::store::{Certainty, Credential, Store};

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
type Reload = Pin<Box<dyn Future<Output = bool> + Send>>;

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
    /// After `response` refused (with `certainty`) a request sent with the token of
    /// generation `sent`.
    pub(crate) fn new<C: Credential>(
        store: Store<C>,
        sent: u64,
        certainty: Certainty,
        response: R,
    ) -> Self {
        let reload: Reload =
            Box::pin(async move { store.refresh_after_refusal(sent, certainty).await.is_some() });
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
                    if !newer || !replayable.take().is_some_and(|f| f()) {
                        this.step.set(Step::Done);
                        let response = this.response.take().expect("polled after completion");
                        return Poll::Ready(Err(response));
                    }
                    let response = this.response.take().expect("polled after completion");
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
mod tests {
    use super::*;
    use futures_util::StreamExt;
    use std::sync::Arc;

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

    #[tokio::test(start_paused = true)]
    async fn a_refused_body_is_drained_to_its_end_within_the_limits_and_no_further() {
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

    #[tokio::test]
    async fn no_newer_token_gives_the_response_back_untouched() {
        let store = crate::test_support::rotated_store().await;
        // The source's "new" is read by the reload: a newer token.
        let response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("x")));
        let after = AfterRefusal::new(store.0.clone(), 1, Certainty::Certain, response);
        let mut after = std::pin::pin!(after);
        let went = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || true)).await;
        assert!(went.is_ok());
        assert_eq!(store.generation(), 2);
        // The new token refused in turn: the source holds nothing newer, and the response
        // comes back as it was.
        let response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("y")));
        let after = AfterRefusal::new(store.0.clone(), 2, Certainty::Certain, response);
        let mut after = std::pin::pin!(after);
        let back = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || true)).await;
        let body = back.unwrap_err().into_body();
        use http_body_util::BodyExt;
        assert_eq!(body.collect().await.unwrap().to_bytes(), "y");
        // A newer token, but a body that can no longer be replayed: given back too.
        let response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("z")));
        let after = AfterRefusal::new(store.0.clone(), 1, Certainty::Certain, response);
        let mut after = std::pin::pin!(after);
        let back = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || false)).await;
        assert!(back.is_err());
    }
}
