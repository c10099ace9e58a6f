use super::*;
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
        let store = crate::test_support::loader("test", move || {
            let s = s.clone();
            async move {
                *s.reads.lock().unwrap() += 1;
                Ok::<_, Infallible>(s.token.lock().unwrap().as_bytes().to_vec())
            }
        })
        .no_periodic_refresh()
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
        .overwrite_existing()
        .layer(server("Bearer tok"));
    let got = send(&mut over, own()).await;
    assert_eq!(got.status(), StatusCode::OK);
    assert_eq!(got.into_body().unwrap(), "Bearer tok");
}

/// Every `Authorization` value a request reaches the inner service with: one, whatever the
/// request came with.
#[tokio::test]
async fn a_request_carries_one_authorization_whatever_it_came_with() {
    let (_, store) = Source::store("tok").await;
    let all = |req: Request<()>| async move {
        let values: Vec<String> = req
            .headers()
            .get_all(AUTHORIZATION)
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        Ok::<_, Infallible>(Response::new(values))
    };
    let two = || {
        Request::builder()
            .header(AUTHORIZATION, "Basic first")
            .header(AUTHORIZATION, "Basic second")
            .body(())
            .unwrap()
    };
    for (layer, request, want) in [
        (
            BearerLayer::new(store.clone()),
            Request::new(()),
            ["Bearer tok"],
        ),
        (BearerLayer::new(store.clone()), own(), ["Basic dXNlcg=="]),
        (BearerLayer::new(store.clone()), two(), ["Basic first"]),
        (
            BearerLayer::new(store.clone()).overwrite_existing(),
            own(),
            ["Bearer tok"],
        ),
        (
            BearerLayer::new(store.clone()).overwrite_existing(),
            two(),
            ["Bearer tok"],
        ),
    ] {
        let got = layer.layer(service_fn(all)).oneshot(request).await.unwrap();
        assert_eq!(got.into_body(), want);
    }
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
    assert_eq!(status.unauthorized, 1);
    assert_eq!(status.unauthorized_reloads, 1);
    assert_eq!(status.retries, 0);
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
    assert_eq!(store.status().unauthorized, 1);
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
        store.status().unauthorized,
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
        .retry_unauthorized()
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
    assert_eq!(store.status().retries_succeeded, 1);
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
    let layer = BearerLayer::new(store).retry_unauthorized();
    let mut service = layer.layer(Overloaded);
    assert_eq!(service.ready().await.err(), Some("overloaded"));
}

/// A gRPC server that refuses every token but `accept` with a trailers-only
/// `UNAUTHENTICATED` (HTTP 200); records the tokens it saw.
fn grpc_server(
    accept: &'static str,
    seen: Arc<Mutex<Vec<String>>>,
) -> impl Service<
    Request<()>,
    Response = Response<String>,
    Error = Infallible,
    Future = impl Future<Output = Result<Response<String>, Infallible>> + Send,
> + Clone {
    service_fn(move |req: Request<()>| {
        let seen = seen.clone();
        async move {
            let auth = req.headers()[AUTHORIZATION].to_str().unwrap().to_owned();
            let ok = auth == accept;
            seen.lock().unwrap().push(auth);
            let mut res = Response::new(String::new());
            if !ok {
                res.headers_mut()
                    .insert("grpc-status", HeaderValue::from_static("16"));
            }
            Ok::<_, Infallible>(res)
        }
    })
}

#[tokio::test]
async fn the_classifier_and_the_retry_combine_in_either_order() {
    use crate::classify::GrpcUnauthenticated;
    for classifier_first in [true, false] {
        let (source, store) = Source::store("old").await;
        source.set("new");
        let seen = Arc::new(Mutex::new(Vec::new()));
        let layer = if classifier_first {
            BearerLayer::new(store.clone())
                .classifier(GrpcUnauthenticated)
                .retry_unauthorized()
        } else {
            BearerLayer::new(store.clone())
                .retry_unauthorized()
                .classifier(GrpcUnauthenticated)
        };
        let res = layer
            .layer(grpc_server("Bearer new", seen.clone()))
            .oneshot(Request::new(()))
            .await
            .unwrap();
        assert!(
            res.headers().get("grpc-status").is_none(),
            "classifier first: {classifier_first}"
        );
        assert_eq!(*seen.lock().unwrap(), ["Bearer old", "Bearer new"]);
        let status = store.status();
        assert_eq!((status.unauthorized, status.retries_succeeded), (1, 1));
    }
}

/// A loader whose reads wait at a gate the test opens, serving what the test set.
async fn gated_store(
    token: &'static str,
) -> (
    TokenStore,
    Arc<Mutex<&'static str>>,
    Arc<tokio::sync::Semaphore>,
) {
    let current = Arc::new(Mutex::new(token));
    // The load goes through; later reads wait for a permit each.
    let gate = Arc::new(tokio::sync::Semaphore::new(1));
    let store = crate::test_support::loader("gated", {
        let (current, gate) = (current.clone(), gate.clone());
        move || {
            let (current, gate) = (current.clone(), gate.clone());
            async move {
                gate.acquire().await.unwrap().forget();
                Ok::<_, Infallible>(current.lock().unwrap().as_bytes().to_vec())
            }
        }
    })
    .no_periodic_refresh()
    .load()
    .await
    .unwrap();
    (store, current, gate)
}

#[tokio::test]
async fn a_refusal_goes_back_at_once_and_one_read_answers_every_refusal_meanwhile() {
    let (store, current, gate) = gated_store("old").await;
    *current.lock().unwrap() = "new";
    let mut svc = BearerLayer::new(store.clone()).layer(server("Bearer new"));
    // Refused: the 401 goes back while the reload it started waits at the gate.
    assert_eq!(
        send(&mut svc, Request::new(())).await.status(),
        StatusCode::UNAUTHORIZED
    );
    // Sent meanwhile: the refused token, a 401 of its own, and no second read.
    let meanwhile = send(&mut svc, Request::new(())).await;
    assert_eq!(meanwhile.status(), StatusCode::UNAUTHORIZED);
    assert_eq!(meanwhile.into_body().unwrap(), "Bearer old");
    let status = store.status();
    assert_eq!((status.unauthorized, status.unauthorized_reloads), (2, 1));
    // The read goes through: the next request carries the new token.
    gate.add_permits(1);
    wait_generation(&store, 2).await;
    let res = send(&mut svc, Request::new(())).await;
    assert_eq!(res.status(), StatusCode::OK);
    assert_eq!(res.into_body().unwrap(), "Bearer new");
    assert_eq!(store.status().reads, 2, "the load and the one read");
}

#[tokio::test]
async fn a_response_future_shows_the_generation_it_sent_and_no_token() {
    let (_source, store) = Source::store("secret-token-value").await;
    let mut svc = BearerLayer::new(store).layer(server("Bearer secret-token-value"));
    let ours = svc.call(Request::new(()));
    let shown = format!("{ours:?}");
    assert!(shown.contains("sent: Some(1)"), "{shown}");
    assert!(!shown.contains("secret"), "{shown}");
    let own = Request::builder()
        .header(AUTHORIZATION, "Basic dXNlcg==")
        .body(())
        .unwrap();
    let kept = svc.call(own);
    assert!(format!("{kept:?}").contains("sent: None"), "{kept:?}");

    let (_source, store) = Source::store("secret-token-value").await;
    let mut svc = BearerLayer::new(store)
        .retry_unauthorized()
        .layer(service_fn(|_: Request<String>| async {
            Ok::<_, Infallible>(Response::new(String::new()))
        }));
    let ours = svc.call(Request::new(String::new()));
    let shown = format!("{ours:?}");
    for part in ["RetryFuture", "sent: Some(1)", "replayable: true"] {
        assert!(shown.contains(part), "{part}: {shown}");
    }
    assert!(!shown.contains("secret"), "{shown}");
}

#[tokio::test]
async fn a_service_shows_its_inner_service_store_and_retry_and_no_token() {
    #[derive(Debug, Clone)]
    struct Inner;
    let (_source, store) = Source::store("secret-token-value").await;
    let plain = BearerLayer::new(store.clone()).layer(Inner);
    let shown = format!("{plain:?}");
    for part in [
        "BearerService",
        "Inner",
        "TokenStore",
        "Http401",
        "retry: ()",
    ] {
        assert!(shown.contains(part), "{part}: {shown}");
    }
    let retrying = BearerLayer::new(store).retry_unauthorized().layer(Inner);
    assert!(
        format!("{retrying:?}").contains("retry: RetryUnauthorized"),
        "{retrying:?}"
    );
    assert!(!shown.contains("secret"), "{shown}");
}
