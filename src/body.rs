//! Request bodies that can be sent a second time: [`TryCloneBody`] and [`ReplayBody`].
//!
//! A 401 retry sends the same request again, body included. Bodies that clone cheaply
//! implement [`TryCloneBody`]; any other body is wrapped in a [`ReplayBody`], which keeps a
//! copy of what it streams as the first attempt sends it.
//!
//! # A client that takes only its own body type
//!
//! Some clients take only a body type that cannot be copied, tonic's `Channel` above all
//! (`tonic::body::Body`). Wrap each request body in a `ReplayBody` above the layer, and
//! turn it back into the client's type below it, with tower-http's `MapRequestBodyLayer`:
//!
//! ```text
//! Request<B> ─▶ map to ReplayBody<B> ─▶ BearerService (copies, retries) ─▶ map to the client's body ─▶ client
//! ```
//!
//! ```no_run
//! # async fn run(store: bearer_reload::TokenStore) -> Result<(), Box<dyn std::error::Error>> {
//! use bearer_reload::BearerLayer;
//! use bearer_reload::body::ReplayBody;
//! use bearer_reload::classify::GrpcUnauthenticated;
//! use tonic_health::pb::HealthCheckRequest;
//! use tonic_health::pb::health_client::HealthClient;
//! use tower::ServiceBuilder;
//! use tower_http::map_request_body::MapRequestBodyLayer;
//!
//! let channel = tonic::transport::Channel::from_static("https://api:443").connect().await?;
//! let service = ServiceBuilder::new()
//!     .layer(MapRequestBodyLayer::new(ReplayBody::new))
//!     .layer(
//!         BearerLayer::new(store)
//!             .classifier(GrpcUnauthenticated) // a trailers-only UNAUTHENTICATED
//!             .retry_unauthorized(),
//!     )
//!     .layer(MapRequestBodyLayer::new(tonic::body::Body::new))
//!     .service(channel);
//! let mut client = HealthClient::new(service);
//! client.check(HealthCheckRequest { service: String::new() }).await?;
//! # Ok(()) }
//! ```

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, ready};

use bytes::{Buf, Bytes};
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use http_body_util::{Empty, Full};

use crate::sync::lock;

/// A request body that can be copied for a second attempt: the bound of
/// [`BearerLayer::retry_unauthorized`](crate::BearerLayer::retry_unauthorized)'s service.
///
/// The copy is made for every request before it is sent: `Bytes`, `Full<Bytes>` and
/// `kube::client::Body` share their buffer, while `String` and `Vec<u8>` are copied whole.
pub trait TryCloneBody: Sized {
    /// A copy of the body as it was before anything was read from it, or `None`: the
    /// request gets the reload on a 401 but is not sent again.
    fn try_clone_body(&self) -> Option<Self>;

    /// Whether a copy can be sent, asked right before it is. A [`ReplayBody`] copy takes
    /// the body over here: the first attempt, which hyper may still be sending, stops.
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

clone_body!(String, Bytes, Vec<u8>, (), Full<Bytes>, Empty<Bytes>);

const DEFAULT_REPLAY_LIMIT: usize = 64 * 1024;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The error of a copy of a [`ReplayBody`] that cannot be sent whole.
#[derive(Debug, thiserror::Error)]
#[error("the request body cannot be sent whole again (replay limit {limit} bytes)")]
pub(crate) struct Incomplete {
    /// The replay limit.
    pub(crate) limit: usize,
}

/// A body wrapper that keeps a copy of the chunks it streams, up to a limit, so that the
/// request can be sent a second time (after linkerd2-proxy's `ReplayBody`). The copy is
/// made as the first attempt sends the body; a request whose body outgrows the limit is
/// not sent again.
///
/// Its error is the wrapped body's own, boxed (tonic finds its `Status` there), or, for a
/// copy that cannot be sent whole, an error that says so rather than a truncated body.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use bearer_reload::body::{ReplayBody, TryCloneBody};
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
    /// A newer handle that has started reading supersedes older ones.
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
    /// Over `limit`, or the inner body failed: the record cannot be replayed.
    incomplete: bool,
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
            .field("incomplete", &state.incomplete)
            .finish_non_exhaustive()
    }
}

impl<B: Body> ReplayBody<B> {
    /// Wraps `body`, keeping up to 64 KiB of it for a replay.
    pub fn new(body: B) -> Self {
        Self::with_limit(body, DEFAULT_REPLAY_LIMIT)
    }

    /// Wraps `body`, keeping up to `limit` bytes for a replay; one whose size hint says it
    /// is larger streams on without a copy ([`try_with_limit`](Self::try_with_limit)).
    pub fn with_limit(body: B, limit: usize) -> Self {
        let incomplete = body.size_hint().lower() > limit as u64;
        Self {
            shared: Arc::new(Mutex::new(ReplayState {
                body: Box::pin(body),
                chunks: Vec::new(),
                recorded: 0,
                limit,
                incomplete,
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

    /// Wraps `body` unless its size hint says it cannot fit in `limit` bytes.
    ///
    /// # Errors
    ///
    /// `body` itself, untouched, when its size hint's lower bound is over `limit`.
    pub fn try_with_limit(body: B, limit: usize) -> Result<Self, B> {
        if body.size_hint().lower() > limit as u64 {
            Err(body)
        } else {
            Ok(Self::with_limit(body, limit))
        }
    }
}

impl<B> TryCloneBody for ReplayBody<B> {
    fn try_clone_body(&self) -> Option<Self> {
        let mut state = lock(&self.shared);
        if state.incomplete {
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
        if state.incomplete {
            return false;
        }
        state.reader = state.reader.max(self.id);
        true
    }
}

impl<B> Body for ReplayBody<B>
where
    B: Body,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let mut state = lock(&this.shared);
        if this.id < state.reader || (this.id > state.reader && state.incomplete) {
            // A replay took the body over, or this replays an incomplete record: not whole.
            return Poll::Ready(Some(Err(Incomplete { limit: state.limit }.into())));
        }
        state.reader = this.id;
        if let Some(chunk) = state.chunks.get(this.pos) {
            this.pos += 1;
            return Poll::Ready(Some(Ok(Frame::data(chunk.clone()))));
        }
        if state.ended {
            let trailers = state.trailers.clone().filter(|_| !this.trailers_sent);
            this.trailers_sent = true;
            return Poll::Ready(trailers.map(|t| Ok(Frame::trailers(t))));
        }
        let frame = match ready!(state.body.as_mut().poll_frame(cx)) {
            None => {
                state.ended = true;
                return Poll::Ready(None);
            }
            Some(Err(e)) => {
                state.incomplete = true;
                return Poll::Ready(Some(Err(e.into())));
            }
            Some(Ok(frame)) => frame.map_data(|mut data| data.copy_to_bytes(data.remaining())),
        };
        if let Some(chunk) = frame.data_ref() {
            if !state.incomplete && state.recorded + chunk.len() <= state.limit {
                state.recorded += chunk.len();
                state.chunks.push(chunk.clone());
                this.pos += 1;
            } else {
                // Past the limit: stream on, but no copy is kept.
                state.incomplete = true;
                state.chunks = Vec::new();
            }
        } else if let Some(trailers) = frame.trailers_ref() {
            state.ended = true;
            state.trailers = Some(trailers.clone());
            this.trailers_sent = true;
        } else {
            // A frame kind http-body does not know yet: pass nothing on.
            return Poll::Ready(None);
        }
        Poll::Ready(Some(Ok(frame)))
    }

    fn is_end_stream(&self) -> bool {
        let state = lock(&self.shared);
        self.pos >= state.chunks.len()
            && (state.ended && (self.trailers_sent || state.trailers.is_none())
                || state.body.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let state = lock(&self.shared);
        let rest = state.chunks.get(self.pos..).unwrap_or_default();
        let buffered: u64 = rest.iter().map(|c| c.len() as u64).sum();
        if state.ended {
            return SizeHint::with_exact(buffered);
        }
        let inner = state.body.size_hint();
        let mut hint = SizeHint::new();
        hint.set_lower(inner.lower().saturating_add(buffered));
        if let Some(upper) = inner.upper() {
            hint.set_upper(upper.saturating_add(buffered));
        }
        hint
    }
}

#[cfg(test)]
mod tests;
