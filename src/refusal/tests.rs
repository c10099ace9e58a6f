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
    let copy = clone_request(&req).unwrap();
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
    let after = AfterRefusal::new(store.0.clone(), 1, false, response);
    let mut after = std::pin::pin!(after);
    let went = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || true)).await;
    assert!(went.is_ok());
    assert_eq!(store.generation(), 2);
    // The new token refused in turn: the source holds nothing newer, and the response
    // comes back as it was.
    let response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("y")));
    let after = AfterRefusal::new(store.0.clone(), 2, false, response);
    let mut after = std::pin::pin!(after);
    let back = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || true)).await;
    let body = back.unwrap_err().into_body();
    use http_body_util::BodyExt;
    assert_eq!(body.collect().await.unwrap().to_bytes(), "y");
    // The same token, but a transport below found a newer certificate: it goes again.
    let response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("r")));
    let after = AfterRefusal::new(store.0.clone(), 2, true, response);
    let mut after = std::pin::pin!(after);
    let went = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || true)).await;
    assert!(went.is_ok());
    assert_eq!(store.generation(), 2);
    // A newer token, but a body that can no longer be replayed: given back too.
    let response = http::Response::new(http_body_util::Full::new(bytes::Bytes::from("z")));
    let after = AfterRefusal::new(store.0.clone(), 1, false, response);
    let mut after = std::pin::pin!(after);
    let back = std::future::poll_fn(|cx| after.as_mut().poll_with(cx, || false)).await;
    assert!(back.is_err());
}
