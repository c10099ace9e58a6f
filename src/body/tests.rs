use super::*;
use http::HeaderValue;
use http_body_util::{BodyExt, Full, StreamBody};

fn chunks(parts: &[&'static str]) -> impl Body<Data = Bytes, Error = std::io::Error> + use<> {
    let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = parts
        .iter()
        .map(|p| Ok(Frame::data(Bytes::from_static(p.as_bytes()))))
        .collect();
    StreamBody::new(futures_util::stream::iter(frames))
}

/// Reads `body` to its end, within 1 MiB: a body that repeats itself (a mutant whose
/// position never moves on) fails the test instead of hanging it.
fn bounded<B: Body<Data = Bytes>>(body: B) -> http_body_util::Limited<B>
where
    B::Error: Into<BoxError>,
{
    http_body_util::Limited::new(body, 1 << 20)
}

async fn bytes_of<B: Body<Data = Bytes>>(body: B) -> Bytes
where
    B::Error: Into<BoxError>,
{
    bounded(body)
        .collect()
        .await
        .expect("the body ends")
        .to_bytes()
}

fn is_incomplete(r: Option<Result<Frame<Bytes>, BoxError>>) -> bool {
    matches!(r, Some(Err(e)) if e.is::<Incomplete>())
}

#[tokio::test]
async fn a_replay_yields_the_same_chunks() {
    let body = ReplayBody::new(chunks(&["ab", "cd", "ef"]));
    let replay = body.try_clone_body().unwrap();
    assert_eq!(bytes_of(body).await, "abcdef");
    assert!(replay.start_replay());
    assert_eq!(replay.size_hint().exact(), Some(6));
    assert_eq!(bytes_of(replay).await, "abcdef");
}

#[tokio::test]
async fn a_replay_continues_a_partly_read_body_and_the_first_copy_ends_in_an_error() {
    let mut body = ReplayBody::new(chunks(&["ab", "cd", "ef"]));
    let replay = body.try_clone_body().unwrap();
    let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
    assert_eq!(first, "ab");
    // The replay takes over: the first attempt's body does not end quietly short.
    assert_eq!(bytes_of(replay).await, "abcdef");
    assert!(is_incomplete(body.frame().await));
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
    assert!(is_incomplete(body.frame().await));
    // The replay gets everything, past the limit too: it is the one reading now.
    assert_eq!(bytes_of(replay).await, "abcdef");
}

#[tokio::test]
async fn over_the_limit_streams_on_but_cannot_replay() {
    let body = ReplayBody::with_limit(chunks(&["abcd", "efgh", "ij"]), 6);
    let mut replay = body.try_clone_body().unwrap();
    assert_eq!(bytes_of(body).await, "abcdefghij");
    assert!(!replay.start_replay());
    // Sent anyway, the copy says it is incomplete instead of ending short.
    assert!(is_incomplete(replay.frame().await));
}

#[tokio::test]
async fn a_body_announced_larger_than_the_limit_is_refused_up_front() {
    let big = || Full::new(Bytes::from(vec![b'x'; 100]));
    let body = ReplayBody::with_limit(big(), 99);
    assert!(body.try_clone_body().is_none(), "no copy is even offered");
    assert_eq!(bytes_of(body).await.len(), 100);
    let handed_back = ReplayBody::try_with_limit(big(), 99).unwrap_err();
    assert_eq!(handed_back.size_hint().exact(), Some(100));
    let fits = ReplayBody::try_with_limit(big(), 100).unwrap();
    assert!(fits.try_clone_body().is_some());
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
    let first = bounded(body).collect().await.unwrap();
    assert_eq!(first.trailers(), Some(&trailers));
    let second = bounded(replay).collect().await.unwrap();
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
    let err = bounded(body).collect().await.unwrap_err();
    // The wrapped body's own error, as it was.
    assert_eq!(err.to_string(), "reset");
    assert!(err.downcast_ref::<std::io::Error>().is_some());
    assert!(!replay.start_replay());
}

#[tokio::test]
async fn a_second_replay_supersedes_the_first() {
    // A retry of a retry: each copy made later takes the body over from the ones before.
    let mut body = ReplayBody::new(chunks(&["ab", "cd", "ef"]));
    let mut first = body.try_clone_body().unwrap();
    let second = body.try_clone_body().unwrap();
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "ab"
    );
    assert!(first.start_replay());
    assert!(is_incomplete(body.frame().await));
    assert_eq!(
        first.frame().await.unwrap().unwrap().into_data().unwrap(),
        "ab"
    );
    assert!(second.start_replay());
    assert!(is_incomplete(first.frame().await));
    assert_eq!(bytes_of(second).await, "abcdef");
}

#[test]
fn debug_shows_the_record_not_the_bytes() {
    let body = ReplayBody::with_limit(Full::new(Bytes::from_static(b"secret")), 100);
    let shown = format!("{body:?}");
    assert!(shown.starts_with("ReplayBody"), "{shown}");
    assert!(shown.contains("limit: 100"), "{shown}");
    assert!(!shown.contains("secret"), "{shown}");
}

#[tokio::test]
async fn a_body_exactly_at_the_limit_replays() {
    let body = ReplayBody::with_limit(chunks(&["abcd", "ef"]), 6);
    let replay = body.try_clone_body().unwrap();
    assert_eq!(bytes_of(body).await, "abcdef");
    assert!(replay.start_replay());
    assert_eq!(bytes_of(replay).await, "abcdef");
}

/// Chunks that say exactly how many bytes remain, as a body of known length does.
struct Sized(std::collections::VecDeque<Bytes>);

impl Body for Sized {
    type Data = Bytes;
    type Error = std::io::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, std::io::Error>>> {
        Poll::Ready(self.0.pop_front().map(|c| Ok(Frame::data(c))))
    }
    fn size_hint(&self) -> SizeHint {
        SizeHint::with_exact(self.0.iter().map(|c| c.len() as u64).sum())
    }
}

#[tokio::test]
async fn size_hints_count_the_record_and_the_rest() {
    let parts = ["abc", "de"].map(|p| Bytes::from_static(p.as_bytes()));
    let mut body = ReplayBody::new(Sized(parts.into_iter().collect()));
    let replay = body.try_clone_body().unwrap();
    assert_eq!(body.size_hint().exact(), Some(5));
    assert_eq!(
        body.frame().await.unwrap().unwrap().into_data().unwrap(),
        "abc"
    );
    // The first copy has two bytes to go; a replay has the three recorded as well.
    assert_eq!(body.size_hint().exact(), Some(2));
    assert_eq!(replay.size_hint().exact(), Some(5));
}

#[tokio::test]
async fn end_of_stream_waits_for_the_trailers() {
    assert!(ReplayBody::new(http_body_util::Empty::<Bytes>::new()).is_end_stream());
    assert!(!ReplayBody::new(Full::new(Bytes::from_static(b"ab"))).is_end_stream());

    let mut trailers = HeaderMap::new();
    trailers.insert("x-sum", HeaderValue::from_static("1"));
    let frames: Vec<Result<Frame<Bytes>, std::io::Error>> = vec![
        Ok(Frame::data(Bytes::from_static(b"x"))),
        Ok(Frame::trailers(trailers)),
    ];
    let body = ReplayBody::new(StreamBody::new(futures_util::stream::iter(frames)));
    let mut replay = body.try_clone_body().unwrap();
    bounded(body).collect().await.unwrap();
    assert!(replay.start_replay());
    assert!(!replay.is_end_stream(), "the data is still to come");
    assert!(replay.frame().await.unwrap().unwrap().is_data());
    assert!(!replay.is_end_stream(), "the trailers are still to come");
    assert!(replay.frame().await.unwrap().unwrap().is_trailers());
    assert!(replay.is_end_stream());
}

/// The stack for a client whose body type cannot be copied: bodies wrapped in a
/// `ReplayBody` above the layer, and turned back into the client's type below it.
mod around_a_client_of_its_own_body_type {
    use std::sync::{Arc, Mutex};

    use bytes::Bytes;
    use http::{Request, Response, StatusCode, header::AUTHORIZATION};
    use http_body::Frame;
    use http_body_util::combinators::UnsyncBoxBody;
    use http_body_util::{BodyExt, Full, StreamBody};
    use tower::{Service, ServiceBuilder, ServiceExt, service_fn};
    use tower_http::map_request_body::MapRequestBodyLayer;

    use crate::BearerLayer;
    use crate::body::ReplayBody;

    type BoxError = Box<dyn std::error::Error + Send + Sync>;
    /// A body type that cannot be copied, like tonic's.
    type Opaque = UnsyncBoxBody<Bytes, BoxError>;

    fn opaque<B>(body: B) -> Opaque
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
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
                let body = super::bounded(req.into_body()).collect().await?.to_bytes();
                let mut res = Response::new(Full::new(body));
                if !ok {
                    *res.status_mut() = StatusCode::UNAUTHORIZED;
                }
                Ok::<_, BoxError>(res)
            }
        })
    }

    type ToReplay = fn(Opaque) -> ReplayBody<Opaque>;

    #[tokio::test]
    async fn a_body_that_cannot_be_copied_is_replayed() {
        let store = crate::test_support::rotated_store().await;
        let requests = Arc::new(Mutex::new(0));
        let client = ServiceBuilder::new()
            .layer(MapRequestBodyLayer::new(ReplayBody::new as ToReplay))
            .layer(BearerLayer::new(store.clone()).retry_unauthorized())
            .layer(MapRequestBodyLayer::new(opaque::<ReplayBody<Opaque>>))
            .service(server(requests.clone()));
        let res = client.oneshot(Request::new(streamed(3))).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = res.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "chunk0;chunk1;chunk2;");
        assert_eq!(*requests.lock().unwrap(), 2);
        assert_eq!(store.status().retries_succeeded, 1);
    }

    #[tokio::test]
    async fn a_body_over_the_limit_gets_its_401_and_the_token_is_reloaded() {
        let store = crate::test_support::rotated_store().await;
        let requests = Arc::new(Mutex::new(0));
        let client = ServiceBuilder::new()
            .layer(MapRequestBodyLayer::new(|body| {
                ReplayBody::with_limit(body, 10)
            }))
            .layer(BearerLayer::new(store.clone()).retry_unauthorized())
            .layer(MapRequestBodyLayer::new(opaque::<ReplayBody<Opaque>>))
            .service(server(requests.clone()));
        let res = client.oneshot(Request::new(streamed(3))).await.unwrap();
        assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(*requests.lock().unwrap(), 1, "sent once");
        let status = store.status();
        assert_eq!(status.retries, 0);
        crate::test_support::wait_for_token(&store, "new").await;
    }
}

#[tokio::test]
async fn the_default_limit_is_64_kib() {
    let exactly = ReplayBody::new(Full::new(Bytes::from(vec![b'x'; 64 * 1024])));
    let replay = exactly.try_clone_body().expect("within the default limit");
    assert_eq!(bytes_of(exactly).await.len(), 64 * 1024);
    assert!(replay.start_replay());
    assert_eq!(bytes_of(replay).await.len(), 64 * 1024);
    let over = ReplayBody::new(Full::new(Bytes::from(vec![b'x'; 64 * 1024 + 1])));
    assert!(over.try_clone_body().is_none());
}

#[cfg(feature = "kube")]
#[tokio::test]
async fn a_buffered_kube_body_is_copied() {
    let body = kube::client::Body::from(b"{\"kind\":\"ConfigMap\"}".to_vec());
    let copy = body.try_clone_body().expect("a buffered body is copied");
    assert_eq!(bytes_of(copy).await, "{\"kind\":\"ConfigMap\"}");
    assert_eq!(bytes_of(body).await, "{\"kind\":\"ConfigMap\"}");
}
