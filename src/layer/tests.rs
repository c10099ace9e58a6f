use super::*;
use crate::TokenLoader;
use http::{HeaderValue, StatusCode};
use std::convert::Infallible;
use std::sync::Mutex;
use std::time::Duration;
use tower::{ServiceExt, service_fn};

/// A loader serving what the test puts in it, counting its reads; timer off.
#[derive(Clone)]
struct Source {
    token: Arc<Mutex<&'static str>>,
    reads: Arc<Mutex<u32>>,
}

impl Source {
    async fn store(initial: &'static str) -> (Self, TokenStore) {
        let this = Self {
            token: Arc::new(Mutex::new(initial)),
            reads: Arc::default(),
        };
        let s = this.clone();
        let store = TokenLoader::new("test", move || {
            let s = s.clone();
            async move {
                *s.reads.lock().unwrap() += 1;
                Ok::<_, Infallible>(s.token.lock().unwrap().as_bytes().to_vec())
            }
        })
        .refresh_interval(None)
        .load()
        .await
        .unwrap();
        (this, store)
    }

    fn set(&self, token: &'static str) {
        *self.token.lock().unwrap() = token;
    }

    fn reads(&self) -> u32 {
        *self.reads.lock().unwrap()
    }
}

/// Answers with the request's `Authorization` as the body, and 401 unless it is `accept`.
fn server(
    accept: &'static str,
) -> impl Service<
    Request<()>,
    Response = Response<Option<HeaderValue>>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<Option<HeaderValue>>, Infallible>> + Send,
> + Clone {
    service_fn(move |req: Request<()>| async move {
        let auth = req.headers().get(AUTHORIZATION).cloned();
        let mut res = Response::new(auth.clone());
        if auth.is_none_or(|a| a != accept) {
            *res.status_mut() = StatusCode::UNAUTHORIZED;
        }
        Ok::<_, Infallible>(res)
    })
}

async fn send<S>(svc: &mut S, req: Request<()>) -> Response<Option<HeaderValue>>
where
    S: Service<Request<()>, Response = Response<Option<HeaderValue>>, Error = Infallible>,
{
    svc.ready().await.unwrap().call(req).await.unwrap()
}

#[tokio::test]
async fn sets_a_sensitive_header() {
    let (_, store) = Source::store("tok").await;
    let mut svc = BearerLayer::new(store).layer(server("Bearer tok"));
    let got = send(&mut svc, Request::new(())).await.into_body().unwrap();
    assert_eq!(got, "Bearer tok");
    assert!(got.is_sensitive());
}

fn own() -> Request<()> {
    Request::builder()
        .header(AUTHORIZATION, "Basic dXNlcg==")
        .body(())
        .unwrap()
}

#[tokio::test]
async fn keeps_or_overwrites_an_existing_header() {
    let (_, store) = Source::store("tok").await;
    let mut keep = BearerLayer::new(store.clone()).layer(server("Bearer tok"));
    let got = send(&mut keep, own()).await.into_body().unwrap();
    assert_eq!(got, "Basic dXNlcg==");
    let mut over = BearerLayer::new(store)
        .overwrite_existing(true)
        .layer(server("Bearer tok"));
    let got = send(&mut over, own()).await;
    assert_eq!(got.status(), StatusCode::OK);
    assert_eq!(got.into_body().unwrap(), "Bearer tok");
}

#[tokio::test]
async fn a_rotation_reaches_an_existing_service() {
    let (source, store) = Source::store("one").await;
    let mut svc = BearerLayer::new(store.clone()).layer(server("any"));
    let got = send(&mut svc, Request::new(())).await.into_body().unwrap();
    assert_eq!(got, "Bearer one");
    source.set("two");
    store.reload().await.unwrap();
    let got = send(&mut svc, Request::new(())).await.into_body().unwrap();
    assert_eq!(got, "Bearer two");
    // A clone made before the rotation also catches up.
    let mut clone = svc.clone();
    source.set("three");
    store.reload().await.unwrap();
    let got = send(&mut clone, Request::new(()))
        .await
        .into_body()
        .unwrap();
    assert_eq!(got, "Bearer three");
}

/// Waits, with a deadline, for the store to reach `generation`.
async fn wait_generation(store: &TokenStore, generation: u64) {
    let mut rx = store.subscribe();
    tokio::time::timeout(Duration::from_secs(5), rx.wait_for(|g| *g >= generation))
        .await
        .expect("the reload installed the new token")
        .unwrap();
}

#[tokio::test]
async fn a_401_reloads_the_token_for_the_next_request_without_a_retry() {
    // No watcher, no timer: only the 401 can bring the new token in.
    let (source, store) = Source::store("old").await;
    let mut svc = BearerLayer::new(store.clone()).layer(server("Bearer new"));
    source.set("new");
    let res = send(&mut svc, Request::new(())).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED, "no retry");
    wait_generation(&store, 2).await;
    assert_eq!(source.reads(), 2, "one read, started by the 401");
    let res = send(&mut svc, Request::new(())).await;
    assert_eq!(res.status(), StatusCode::OK);
    let status = store.status();
    assert_eq!(status.unauthorized.seen, 1);
    assert_eq!(status.unauthorized.reloads, 1);
    assert_eq!(status.unauthorized.retries, 0);
}

#[tokio::test]
async fn a_callers_own_authorization_that_gets_401_triggers_nothing() {
    let (source, store) = Source::store("old").await;
    source.set("new");
    let mut svc = BearerLayer::new(store.clone()).layer(server("Bearer new"));
    let res = send(&mut svc, own()).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    // The same 401 to our own token reloads: the store's own read is what this waits on,
    // so by then any reload the first 401 had started would have been counted too.
    let res = send(&mut svc, Request::new(())).await;
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);
    wait_generation(&store, 2).await;
    assert_eq!(source.reads(), 2, "one read: the second 401's");
    assert_eq!(store.status().unauthorized.seen, 1);
}

#[tokio::test]
async fn the_grpc_classifier_reloads_on_unauthenticated() {
    let (source, store) = Source::store("old").await;
    source.set("new");
    let grpc = service_fn(|_req: Request<()>| async {
        let res = Response::builder()
            .header("grpc-status", "16")
            .body(None::<HeaderValue>)
            .unwrap();
        Ok::<_, Infallible>(res)
    });
    let mut http = BearerLayer::new(store.clone()).layer(grpc);
    send(&mut http, Request::new(())).await;
    assert_eq!(
        store.status().unauthorized.seen,
        0,
        "a 200 to the HTTP classifier"
    );
    let mut svc = BearerLayer::new(store.clone())
        .classifier(crate::classify::GrpcUnauthenticated)
        .layer(grpc);
    send(&mut svc, Request::new(())).await;
    wait_generation(&store, 2).await;
}

/// The retry carries the token current when it leaves, not the one the reload brought:
/// a rotation while the 401's body is drained is not missed by a server that revokes.
// Paused time: nothing here waits on the OS, so the drain's 50 ms limit passes only if
// the test stalls, never because a loaded machine descheduled it.
#[tokio::test(start_paused = true)]
async fn a_retry_carries_the_token_current_when_it_leaves() {
    use bytes::Bytes;
    use http_body::Frame;
    use http_body_util::{BodyExt, StreamBody, combinators::UnsyncBoxBody};

    let (source, store) = Source::store("first").await;
    source.set("second");
    let release = Arc::new(tokio::sync::Notify::new());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let svc = service_fn({
        let (release, seen) = (release.clone(), seen.clone());
        move |req: Request<()>| {
            let (release, seen) = (release.clone(), seen.clone());
            async move {
                let auth = req.headers()[AUTHORIZATION].to_str().unwrap().to_owned();
                let ok = auth == "Bearer third";
                seen.lock().unwrap().push(auth);
                // The 401's body comes when the test says so; the retry waits for it.
                let body = StreamBody::new(futures_util::stream::once(async move {
                    if !ok {
                        release.notified().await;
                    }
                    Ok::<_, Infallible>(Frame::data(Bytes::from_static(b"body")))
                }));
                let mut res = Response::new(UnsyncBoxBody::new(body));
                if !ok {
                    *res.status_mut() = StatusCode::UNAUTHORIZED;
                }
                Ok::<_, Infallible>(res)
            }
        }
    });
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized(RetryUnauthorized::new())
        .layer(svc);
    let call = tokio::spawn(client.oneshot(Request::new(())));
    // The 401 brought "second" in; the retry now waits for the 401's body. Meanwhile the
    // token rotates again.
    wait_generation(&store, 2).await;
    source.set("third");
    store.reload().await.unwrap();
    release.notify_one();

    let res = call.await.unwrap().unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.into_body().collect().await.unwrap().to_bytes(), "body");
    assert_eq!(*seen.lock().unwrap(), ["Bearer first", "Bearer third"]);
    assert_eq!(store.status().unauthorized.retries_succeeded, 1);
}

/// An inner service that refuses every request at readiness.
#[derive(Clone)]
struct Overloaded;

type Empty = http_body_util::Empty<bytes::Bytes>;

impl Service<Request<()>> for Overloaded {
    type Response = Response<Empty>;
    type Error = &'static str;
    type Future = std::future::Ready<Result<Response<Empty>, &'static str>>;
    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Err("overloaded"))
    }
    fn call(&mut self, _: Request<()>) -> Self::Future {
        std::future::ready(Err("called while not ready"))
    }
}

#[tokio::test]
async fn the_inner_services_readiness_reaches_the_caller() {
    let (_, store) = Source::store("one").await;
    let mut service = BearerLayer::new(store).layer(Overloaded);
    assert_eq!(service.ready().await.err(), Some("overloaded"));
}

#[tokio::test]
async fn with_the_retry_the_inner_services_readiness_reaches_the_caller() {
    let (_, store) = Source::store("one").await;
    let layer = BearerLayer::new(store).retry_unauthorized(crate::RetryUnauthorized::new());
    let mut service = layer.layer(Overloaded);
    assert_eq!(service.ready().await.err(), Some("overloaded"));
}
