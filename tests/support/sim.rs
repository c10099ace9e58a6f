//! Simulated time for tests and examples that talk over real sockets.
//!
//! Under tokio's paused clock (a current-thread runtime started paused) the clock jumps to
//! the next timer whenever the runtime has nothing to do. With real sockets, "nothing to do"
//! includes waiting for a server's answer: the clock would leap over the read timeout of a
//! request in flight. tokio holds the clock still while a `spawn_blocking` task runs;
//! [`IoGuard`] is such a task, held for the whole of an HTTP exchange ([`GuardLayer`] in a
//! client's stack, until its response body ends; [`guarded`] around any future). Time
//! then moves only between exchanges, straight to the next timer: a simulated day runs in
//! seconds, each timer fires at its exact simulated moment, and no exchange sees time pass.
//! An exchange that never ends (a stalled server) holds the clock until the test moves it
//! with `tokio::time::advance`.
//!
//! [`SimClock`] is the wall clock that goes with it: a fixed origin plus tokio's elapsed
//! time, the same reading `StoreBuilder::simulated_clock` gives a store.
//!
//! Self-contained, so that examples can include it with
//! `#[path = "../tests/support/sim.rs"] mod sim;`.
#![allow(dead_code, unreachable_pub)]

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime};

use http::{Request, Response};
use tokio::time::Instant;

/// 2027-01-15T08:00:00Z: where simulated wall-clock time starts.
pub const ORIGIN_SECS: u64 = 1_800_000_000;

/// A wall clock that reads `origin` at tokio's `start` and moves with tokio's time.
#[derive(Clone, Copy, Debug)]
pub struct SimClock {
    pub origin: SystemTime,
    pub start: Instant,
}

impl SimClock {
    /// A clock that reads [`ORIGIN_SECS`] now. Call it within the (paused) runtime.
    pub fn start() -> Self {
        Self {
            origin: SystemTime::UNIX_EPOCH + Duration::from_secs(ORIGIN_SECS),
            start: Instant::now(),
        }
    }

    /// The simulated wall-clock time.
    pub fn now(&self) -> SystemTime {
        self.origin + self.start.elapsed()
    }

    /// Simulated time since the start.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }

    /// Seconds since the start, for messages.
    pub fn secs(&self, at: SystemTime) -> f64 {
        at.duration_since(self.origin)
            .map_or(-1.0, |d| d.as_secs_f64())
    }
}

/// Holds tokio's paused clock still while it lives: a blocking task that waits for the
/// guard to drop.
pub struct IoGuard(#[allow(dead_code)] std::sync::mpsc::Sender<()>);

impl IoGuard {
    /// Starts holding the clock. Must be called within the runtime.
    pub fn hold() -> Self {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        drop(tokio::task::spawn_blocking(move || {
            let _ = rx.recv();
        }));
        IoGuard(tx)
    }
}

/// Runs `fut` with the clock held.
pub async fn guarded<F: Future>(fut: F) -> F::Output {
    let _guard = IoGuard::hold();
    fut.await
}

/// Holds the clock from each request until its response body ends (or is dropped).
#[derive(Clone, Copy, Debug, Default)]
pub struct GuardLayer;

impl<S> tower::Layer<S> for GuardLayer {
    type Service = Guarded<S>;

    fn layer(&self, inner: S) -> Self::Service {
        Guarded(inner)
    }
}

/// The service of [`GuardLayer`].
#[derive(Clone, Debug)]
pub struct Guarded<S>(S);

impl<S, ReqB, ResB> tower::Service<Request<ReqB>> for Guarded<S>
where
    S: tower::Service<Request<ReqB>, Response = Response<ResB>>,
    S::Future: Send + 'static,
{
    type Response = Response<GuardedBody<ResB>>;
    type Error = S::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, S::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, req: Request<ReqB>) -> Self::Future {
        let guard = IoGuard::hold();
        let response = self.0.call(req);
        Box::pin(async move {
            let response = response.await?;
            Ok(response.map(|inner| GuardedBody {
                inner,
                guard: Some(guard),
            }))
        })
    }
}

pin_project_lite::pin_project! {
    /// A response body that holds the clock until it ends.
    pub struct GuardedBody<B> {
        #[pin]
        inner: B,
        guard: Option<IoGuard>,
    }
}

impl<B: http_body::Body> http_body::Body for GuardedBody<B> {
    type Data = B::Data;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<B::Data>, B::Error>>> {
        let this = self.project();
        let frame = this.inner.poll_frame(cx);
        if matches!(frame, Poll::Ready(None | Some(Err(_)))) {
            this.guard.take();
        }
        frame
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}
