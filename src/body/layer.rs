//! [`ReplayLayer`]: the 401 retry for clients whose body type cannot be copied.

use std::fmt;
use std::task::{Context, Poll};

use http::Request;
use http_body::Body;
use tower_layer::Layer;
use tower_service::Service;

use super::{DEFAULT_REPLAY_LIMIT, ReplayBody};

/// Wraps a layer `L` so that request bodies of any type can be replayed by its retry: for
/// clients whose body type cannot be copied and that take only their own body type
/// (tonic's `Channel`, a client of type-erased or streamed bodies).
///
/// The retry of [`BearerLayer`](crate::BearerLayer) needs a copy of each request's body.
/// This layer wraps every request body in a [`ReplayBody`] on the way in, runs the wrapped
/// layer (the `BearerLayer` with its retry) on those, and converts them back into the
/// client's body type on the way to the client:
///
/// ```text
/// Request<B> ─▶ RecordBody ─▶ BearerService<_, RetryUnauthorized> ─▶ IntoBody ─▶ client
///               B → ReplayBody<B>      (copies, retries)    ReplayBody<B> → client's body
/// ```
///
/// For tonic ([`RetryUnauthorized::grpc()`](crate::RetryUnauthorized::grpc) recognises a
/// trailers-only `UNAUTHENTICATED`):
///
/// ```no_run
/// # async fn run(store: bearer_reload::TokenStore) -> Result<(), Box<dyn std::error::Error>> {
/// use bearer_reload::body::ReplayLayer;
/// use bearer_reload::{BearerLayer, RetryUnauthorized};
/// use tonic_health::pb::HealthCheckRequest;
/// use tonic_health::pb::health_client::HealthClient;
/// use tower::Layer;
///
/// let channel = tonic::transport::Channel::from_static("https://api:443").connect().await?;
/// let layer = ReplayLayer::new(
///     BearerLayer::new(store).retry_unauthorized(RetryUnauthorized::grpc()),
///     tonic::body::Body::new,
/// );
/// let mut client = HealthClient::new(layer.layer(channel));
/// client.check(HealthCheckRequest { service: String::new() }).await?;
/// # Ok(()) }
/// ```
///
/// Each request's body is wrapped in a [`ReplayBody`] (a shared buffer and a lock, one
/// allocation each per request) that keeps up to `limit` bytes of it as it is sent. A
/// request whose body outgrows the limit is not sent again: it gets its 401 back, and the
/// token is reloaded for the requests that follow.
#[derive(Clone)]
pub struct ReplayLayer<L, F> {
    layer: L,
    into_body: F,
    limit: usize,
}

// By hand: the conversion is usually a closure or a function item, neither of them `Debug`.
impl<L: fmt::Debug, F> fmt::Debug for ReplayLayer<L, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ReplayLayer")
            .field("layer", &self.layer)
            .field("limit", &self.limit)
            .finish_non_exhaustive()
    }
}

impl<L, F> ReplayLayer<L, F> {
    /// Wraps `layer`; `into_body` turns a [`ReplayBody`] into the body type of the service
    /// below (`tonic::body::Body::new` for a tonic `Channel`; `std::convert::identity` for
    /// a client that takes `ReplayBody<B>` itself). Keeps up to [`DEFAULT_REPLAY_LIMIT`]
    /// bytes of each body.
    pub fn new(layer: L, into_body: F) -> Self {
        Self {
            layer,
            into_body,
            limit: DEFAULT_REPLAY_LIMIT,
        }
    }

    /// Keep up to `limit` bytes of each request body for a replay.
    pub fn limit(mut self, limit: usize) -> Self {
        self.limit = limit;
        self
    }
}

impl<S, L, F> Layer<S> for ReplayLayer<L, F>
where
    L: Layer<IntoBody<S, F>>,
    F: Clone,
{
    type Service = RecordBody<L::Service>;

    fn layer(&self, inner: S) -> Self::Service {
        RecordBody {
            inner: self.layer.layer(IntoBody {
                inner,
                into_body: self.into_body.clone(),
            }),
            limit: self.limit,
        }
    }
}

/// Wraps each request body in a [`ReplayBody`]; the outer service of a [`ReplayLayer`].
#[derive(Debug, Clone)]
pub struct RecordBody<S> {
    inner: S,
    limit: usize,
}

impl<S> RecordBody<S> {
    /// The wrapped service.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, B> Service<Request<B>> for RecordBody<S>
where
    S: Service<Request<ReplayBody<B>>>,
    B: Body,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let limit = self.limit;
        self.inner
            .call(req.map(|body| ReplayBody::with_limit(body, limit)))
    }
}

/// Turns request bodies into the body type of the service below; the inner service of a
/// [`ReplayLayer`].
#[derive(Clone)]
pub struct IntoBody<S, F> {
    inner: S,
    into_body: F,
}

impl<S: fmt::Debug, F> fmt::Debug for IntoBody<S, F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IntoBody")
            .field("inner", &self.inner)
            .finish_non_exhaustive()
    }
}

impl<S, F> IntoBody<S, F> {
    /// The service below.
    pub fn get_ref(&self) -> &S {
        &self.inner
    }
}

impl<S, F, A, B> Service<Request<A>> for IntoBody<S, F>
where
    F: Fn(A) -> B,
    S: Service<Request<B>>,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = S::Future;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<A>) -> Self::Future {
        self.inner.call(req.map(&self.into_body))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http::{Response, StatusCode, header::AUTHORIZATION};
    use http_body::Frame;
    use http_body_util::combinators::UnsyncBoxBody;
    use http_body_util::{BodyExt, Full, StreamBody};
    use tower::{ServiceExt, service_fn};

    use super::*;
    use crate::{BearerLayer, RetryUnauthorized};

    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    /// A body type that cannot be copied, like tonic's.
    type Opaque = UnsyncBoxBody<Bytes, BoxError>;

    fn opaque<B>(body: B) -> Opaque
    where
        B: Body<Data = Bytes> + Send + 'static,
        B::Error: Into<BoxError>,
    {
        body.map_err(Into::into).boxed_unsync()
    }

    fn streamed(chunks: usize) -> Opaque {
        let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = (0..chunks)
            .map(|i| Ok(Frame::data(Bytes::from(format!("chunk{i};")))))
            .collect();
        opaque(StreamBody::new(futures_util::stream::iter(frames)))
    }

    /// Reads the whole body, then accepts only "new", echoing the body; counts requests.
    fn server(
        requests: Arc<Mutex<u32>>,
    ) -> impl Service<Request<Opaque>, Response = Response<Full<Bytes>>, Error = BoxError> + Clone
    {
        service_fn(move |req: Request<Opaque>| {
            let requests = requests.clone();
            async move {
                *requests.lock().unwrap() += 1;
                let ok = req.headers()[AUTHORIZATION] == "Bearer new";
                let body = req.into_body().collect().await?.to_bytes();
                let mut res = Response::new(Full::new(body));
                if !ok {
                    *res.status_mut() = StatusCode::UNAUTHORIZED;
                }
                Ok::<_, BoxError>(res)
            }
        })
    }

    #[tokio::test]
    async fn a_body_that_cannot_be_copied_is_replayed() {
        let store = crate::test_support::rotated_store().await;
        let requests = Arc::new(Mutex::new(0));
        let layer = ReplayLayer::new(
            BearerLayer::new(store.clone()).retry_unauthorized(RetryUnauthorized::new()),
            opaque,
        );
        let client = layer.layer(server(requests.clone()));
        let res = client.oneshot(Request::new(streamed(3))).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "chunk0;chunk1;chunk2;");
        assert_eq!(*requests.lock().unwrap(), 2);
        assert_eq!(store.status().unauthorized.retries_succeeded, 1);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_gets_its_401_and_the_token_is_reloaded() {
        let store = crate::test_support::rotated_store().await;
        let requests = Arc::new(Mutex::new(0));
        let layer = ReplayLayer::new(
            BearerLayer::new(store.clone()).retry_unauthorized(RetryUnauthorized::new()),
            opaque,
        )
        .limit(10);
        let client = layer.layer(server(requests.clone()));
        let res = client.oneshot(Request::new(streamed(3))).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(*requests.lock().unwrap(), 1, "sent once");
        let status = store.status();
        assert_eq!(status.unauthorized.retries, 0);
        assert_eq!(status.generation, 2, "the 401 reloaded the token");
    }

    /// A service that refuses every request at readiness.
    #[derive(Debug)]
    struct Overloaded;

    impl<B> Service<Request<B>> for Overloaded {
        type Response = Response<()>;
        type Error = &'static str;
        type Future = std::future::Ready<Result<Response<()>, &'static str>>;
        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Err("overloaded"))
        }
        fn call(&mut self, _: Request<B>) -> Self::Future {
            std::future::ready(Err("called while not ready"))
        }
    }

    fn identity(body: ReplayBody<Opaque>) -> ReplayBody<Opaque> {
        body
    }

    #[tokio::test]
    async fn the_inner_services_readiness_reaches_the_caller() {
        let layer = ReplayLayer::new(tower::layer::util::Identity::new(), identity);
        let mut service = layer.layer(Overloaded);
        let ready = ServiceExt::<Request<Opaque>>::ready(&mut service).await;
        assert_eq!(ready.err(), Some("overloaded"));
    }

    #[test]
    fn debug_shows_the_layers_and_the_limit_not_the_conversion() {
        let layer = ReplayLayer::new(tower::layer::util::Identity::new(), identity).limit(7);
        let shown = format!("{layer:?}");
        assert!(shown.starts_with("ReplayLayer"), "{shown}");
        assert!(shown.contains("limit: 7"), "{shown}");
        let service = format!("{:?}", layer.layer(Overloaded));
        assert!(
            service.contains("IntoBody { inner: Overloaded"),
            "{service}"
        );
    }
}
