//! [`RetryFuture`]: a refused request sent once more with the new token.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use http::{Request, Response};
use http_body::Body;
use pin_project_lite::pin_project;
use tower_service::Service;

use super::{BearerService, Carried, RetryUnauthorized};
use crate::body::TryCloneBody;
use crate::classify::Unauthorized;
use crate::refusal::{AfterRefusal, Renewed, clone_request};
use crate::store::Certainty;

impl<S, B, ResB, C> Service<Request<B>> for BearerService<S, C, RetryUnauthorized>
where
    S: Service<Request<B>, Response = Response<ResB>> + Clone,
    B: TryCloneBody,
    ResB: Body,
    C: Unauthorized,
{
    type Response = Response<ResB>;
    type Error = S::Error;
    type Future = RetryFuture<S, B, ResB, C>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut req: Request<B>) -> Self::Future {
        let sent = self.auth.authorize(req.headers_mut());
        // A request that kept its own header is passed through as it is.
        let replay = sent.as_ref().and_then(|_| clone_request(&req));
        let retry_svc = replay.as_ref().map(|_| self.inner.clone());
        let fut = self.inner.call(req);
        RetryFuture {
            state: State::First { fut },
            sent,
            classifier: self.classifier.clone(),
            replay,
            retry_svc,
        }
    }
}

pin_project! {
    /// Response future of [`BearerService`] with the retry
    /// ([`BearerLayer::retry_unauthorized`](crate::BearerLayer::retry_unauthorized)).
    ///
    /// When the response says the token was not accepted, the store reloads it (one read
    /// for every concurrent refusal, none when it already holds a newer token, at most one
    /// per [`unauthorized_reload_interval`](crate::StoreBuilder::unauthorized_reload_interval)).
    /// If that yields a newer token and the body can be sent again ([`TryCloneBody`]), the
    /// refused response's body is read away (at most 8 KiB for at most 50 ms, so that its
    /// connection is reused) and the request is sent once more, with the store's newest
    /// token. Otherwise the refusal goes back to the caller.
    pub struct RetryFuture<S, B, ResB, C>
    where
        S: Service<Request<B>>,
    {
        #[pin]
        state: State<S::Future, ResB>,
        sent: Option<Carried>,
        classifier: C,
        replay: Option<Request<B>>,
        retry_svc: Option<S>,
    }
}

impl<S: Service<Request<B>>, B, ResB, C: fmt::Debug> fmt::Debug for RetryFuture<S, B, ResB, C> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RetryFuture")
            .field("sent", &self.sent.as_ref().map(|carried| carried.sent))
            .field("classifier", &self.classifier)
            .field("replayable", &self.replay.is_some())
            .finish_non_exhaustive()
    }
}

pin_project! {
    #[project = StateProj]
    enum State<Fut, ResB> {
        First { #[pin] fut: Fut },
        Refused { #[pin] after: AfterRefusal<Response<ResB>, ResB> },
        Ready,
        Retrying { #[pin] fut: Fut },
    }
}

impl<S, B, ResB, C> Future for RetryFuture<S, B, ResB, C>
where
    S: Service<Request<B>, Response = Response<ResB>>,
    B: TryCloneBody,
    ResB: Body,
    C: Unauthorized,
{
    type Output = Result<Response<ResB>, S::Error>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let mut this = self.project();
        loop {
            match this.state.as_mut().project() {
                StateProj::First { fut } => {
                    // Returned as it is where it can be: the response is not moved again.
                    let poll = fut.poll(cx);
                    let (Some(Carried { store, sent }), Poll::Ready(Ok(response))) =
                        (this.sent.as_ref(), &poll)
                    else {
                        return poll;
                    };
                    if !this.classifier.is_unauthorized(response) {
                        return poll;
                    }
                    // A refusal proves the server did not act on it: any method goes again.
                    if this.replay.is_none() {
                        // Not sent again: the reload starts for the requests that follow.
                        store.reload_after_refusal(*sent, Certainty::Certain);
                        return poll;
                    }
                    let Poll::Ready(Ok(response)) = poll else {
                        return poll;
                    };
                    let renewed = response.extensions().get::<Renewed>().is_some();
                    let after = AfterRefusal::new(store.clone(), *sent, renewed, response);
                    this.state.set(State::Refused { after });
                }
                StateProj::Refused { after } => {
                    let replay = &mut *this.replay;
                    let replayable = || replay.as_ref().is_some_and(|r| r.body().start_replay());
                    match ready!(after.poll_with(cx, replayable)) {
                        Ok(()) => this.state.set(State::Ready),
                        Err(response) => return Poll::Ready(Ok(response)),
                    }
                }
                StateProj::Ready => {
                    let svc = this.retry_svc.as_mut().expect("a replay has a service");
                    ready!(svc.poll_ready(cx))?;
                    let mut request = this.replay.take().expect("a replay request");
                    if let Some(Carried { store, .. }) = this.sent.as_ref() {
                        store.resend(request.headers_mut());
                    }
                    let fut = svc.call(request);
                    this.state.set(State::Retrying { fut });
                }
                StateProj::Retrying { fut } => {
                    let response = ready!(fut.poll(cx))?;
                    if let Some(Carried { store, .. }) = this.sent.as_ref() {
                        store.count_resent(this.classifier.is_unauthorized(&response));
                    }
                    return Poll::Ready(Ok(response));
                }
            }
        }
    }
}
