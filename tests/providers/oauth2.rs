//! The OAuth 2.0 sources (feature `oauth2`) against a real authorization server
//! (oidc-provider in Node.js, `tests/support/oauth2_server.rs`) and a resource server that
//! introspects every token it is shown: the grants and client authentications, refresh
//! before expiry, revocation answered by a 401 and a retry, a rotating assertion file, a
//! rotated secret, a burst of refusals, token exchange.

use crate::support::tls as test_tls;
use crate::support::{oauth2_server, proxy, serve};

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use bearer_reload::oauth2::{self, ClientAuth, ClientCredentials, TokenExchange};
use bearer_reload::source::{FileSource, FnSource, TokenSource};
use bearer_reload::tls::RootStore;
use bearer_reload::{BearerLayer, TokenStore};
use bytes::Bytes;
use http::{Request, Response, StatusCode, Uri};
use http_body_util::{Empty, Full};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use oauth2_server::{
    AuthServer, BASIC_CLIENT, CLUSTER_ISSUER, JWT_CLIENT, POST_CLIENT, PUBLIC_CLIENT, RESOURCE,
    ServerConfig, cluster_key,
};
use tokio::net::TcpListener;
use tower::{ServiceBuilder, ServiceExt};

/// How long a test waits for an event before it fails.
const DEADLINE: Duration = Duration::from_secs(10);
const MINUTE: Duration = Duration::from_secs(60);
const SA: &str = "system:serviceaccount:default:app";

async fn start(ttl: u64) -> Arc<AuthServer> {
    Arc::new(AuthServer::start(ServerConfig::standard(cluster_key()).ttl(ttl)).await)
}

fn endpoint(server: &AuthServer) -> Uri {
    server.token_endpoint().parse().unwrap()
}

/// The server's CA, as a bundle store.
async fn roots(server: &AuthServer) -> RootStore {
    let pem = server.ca_pem().to_owned();
    let source = FnSource::new("the test CA", move || {
        let pem = pem.clone();
        async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
    });
    RootStore::builder(source).load().await.unwrap()
}

async fn basic_source(server: &AuthServer) -> ClientCredentials {
    let auth = ClientAuth::client_secret_basic(BASIC_CLIENT.1);
    ClientCredentials::new(endpoint(server), BASIC_CLIENT.0, auth, roots(server).await)
        .scope("read")
}

async fn basic_store(server: &AuthServer) -> TokenStore {
    TokenStore::builder(basic_source(server).await)
        .load()
        .await
        .unwrap()
}

/// The store's current token, without `Bearer `.
fn secret(store: &TokenStore) -> String {
    let current = store.current();
    let value = current.header_value().to_str().unwrap();
    value.strip_prefix("Bearer ").unwrap().to_owned()
}

/// A resource server on 127.0.0.1 that answers 200 to a token the authorization server
/// says is active (RFC 7662 introspection, as `RESOURCE_SERVER`) and 401 to any other.
async fn resource_server(auth: Arc<AuthServer>) -> (String, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/api", listener.local_addr().unwrap());
    let task = serve::spawn(
        listener,
        None,
        move |req: Request<hyper::body::Incoming>| {
            let auth = auth.clone();
            async move {
                let status = auth.resource_status(req.headers()).await;
                Response::builder()
                    .status(status)
                    .body(Full::new(Bytes::new()))
                    .unwrap()
            }
        },
    );
    (url, task)
}

type Api = bearer_reload::BearerService<
    Client<hyper_util::client::legacy::connect::HttpConnector, Empty<Bytes>>,
    bearer_reload::classify::Http401,
    bearer_reload::layer::RetryUnauthorized,
>;

fn api_client(store: &TokenStore) -> Api {
    let http = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    ServiceBuilder::new()
        .layer(BearerLayer::new(store.clone()).retry_unauthorized())
        .service(http)
}

async fn get(client: &Api, url: &str) -> StatusCode {
    let request = Request::get(url).body(Empty::new()).unwrap();
    let response = tokio::time::timeout(DEADLINE, client.clone().oneshot(request))
        .await
        .expect("the resource server answers in time")
        .unwrap();
    response.status()
}

/// An error and its causes on one line, as `anyhow`'s `{:#}` prints them.
fn chain(error: &(dyn std::error::Error + 'static)) -> String {
    let mut line = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        line.push_str(": ");
        line.push_str(&e.to_string());
        cause = e.source();
    }
    line
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_with_basic_and_post_secrets() {
    let server = start(60).await;
    let loaded = SystemTime::now();
    let basic = basic_store(&server).await;
    let introspection = server.introspection(&secret(&basic)).await;
    assert_eq!(introspection["active"], true, "{introspection}");
    assert_eq!(introspection["client_id"], BASIC_CLIENT.0);
    assert_eq!(introspection["scope"], "read");
    assert_eq!(introspection["aud"], RESOURCE);
    let status = basic.status();
    assert_eq!(
        status.source,
        format!(
            "oauth2 client-credentials {} at {}",
            BASIC_CLIENT.0,
            server.token_endpoint()
        )
    );
    // `expires_in` (60 s) became the token's expiry, counted from the request.
    let expires_at = status.expires_at.expect("an expiry from expires_in");
    assert!(
        loaded + MINUTE <= expires_at && expires_at <= status.loaded_at + MINUTE,
        "{status:?}"
    );

    let auth = ClientAuth::client_secret_post(POST_CLIENT.1);
    let source =
        ClientCredentials::new(endpoint(&server), POST_CLIENT.0, auth, roots(&server).await)
            .scope("read")
            .resource(RESOURCE);
    let post = TokenStore::builder(source).load().await.unwrap();
    let introspection = server.introspection(&secret(&post)).await;
    assert_eq!(introspection["active"], true, "{introspection}");
    assert_eq!(introspection["client_id"], POST_CLIENT.0);

    let stats = server.stats().await;
    assert_eq!(stats.requests_of(BASIC_CLIENT.0), 1, "{stats:?}");
    assert_eq!(stats.requests_of(POST_CLIENT.0), 1, "{stats:?}");
    assert_eq!(stats.failed_token_requests, 0, "{stats:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_lived_token_is_replaced_before_it_expires() {
    let server = start(3).await;
    let store = basic_store(&server).await;
    let first = store.current();
    let expires_at = first.expires_at().expect("an expiry from expires_in");
    let mut rotations = store.subscribe();

    // The store's timer, alone: nothing asks for the token.
    tokio::time::timeout(DEADLINE, rotations.changed())
        .await
        .expect("the timer fetched a new token")
        .unwrap();
    let replaced_at = SystemTime::now();
    assert!(
        replaced_at < expires_at,
        "replaced {:?} after the old token expired",
        replaced_at.duration_since(expires_at).unwrap()
    );
    assert_ne!(store.current().header_value(), first.header_value());
    assert_eq!(server.stats().await.requests_of(BASIC_CLIENT.0), 2);

    // And again with a lifetime the server changed in between.
    server.set_ttl(4).await;
    let second = store.current();
    let expires_at = second.expires_at().unwrap();
    tokio::time::timeout(DEADLINE, rotations.changed())
        .await
        .expect("the timer fetched a third token")
        .unwrap();
    assert!(SystemTime::now() < expires_at);
    let third = store.current();
    let lifetime = third
        .expires_at()
        .unwrap()
        .duration_since(third.loaded_at())
        .unwrap();
    assert!(lifetime <= Duration::from_secs(4) && lifetime > Duration::from_secs(3));
    assert_eq!(server.stats().await.requests_of(BASIC_CLIENT.0), 3);
    assert_eq!(store.status().failures, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_revoked_at_the_server_is_replaced_and_the_request_retried() {
    let server = start(60).await;
    let store = basic_store(&server).await;
    let (url, _resource) = resource_server(server.clone()).await;
    let client = api_client(&store);
    assert_eq!(get(&client, &url).await, StatusCode::OK);

    assert_eq!(server.revoke_all().await, 1);
    let mut failed = 0;
    for _ in 0..20 {
        if get(&client, &url).await != StatusCode::OK {
            failed += 1;
        }
    }
    assert_eq!(failed, 0, "{:?}", store.status());
    assert_eq!(server.stats().await.requests_of(BASIC_CLIENT.0), 2);
    let status = store.status();
    assert_eq!(
        (status.generation, status.unauthorized_reloads),
        (2, 1),
        "{status:?}"
    );
    assert_eq!(
        (status.retries, status.retries_succeeded),
        (1, 1),
        "{status:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_callers_refused_at_once_make_one_token_request() {
    let server = start(60).await;
    let store = basic_store(&server).await;
    let (url, _resource) = resource_server(server.clone()).await;
    let client = api_client(&store);
    assert_eq!(get(&client, &url).await, StatusCode::OK);

    // The token dies under 100 callers at once, as at an expiry the store did not see
    // coming: every one is refused, and one token request serves them all.
    server.revoke_all().await;
    let calls = (0..100).map(|_| get(&client, &url));
    let statuses = futures_util::future::join_all(calls).await;
    let failed = statuses.iter().filter(|s| **s != StatusCode::OK).count();
    assert_eq!(failed, 0, "{:?}", store.status());
    assert_eq!(server.stats().await.requests_of(BASIC_CLIENT.0), 2);

    // 100 reloads asked for at once: one more.
    let reloads = (0..100).map(|_| store.reload());
    for reloaded in futures_util::future::join_all(reloads).await {
        reloaded.unwrap();
    }
    assert_eq!(server.stats().await.requests_of(BASIC_CLIENT.0), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_fetch_reads_the_assertion_file_again() {
    let server = start(60).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("assertion");
    let write_assertion = |path: &Path| {
        let assertion = cluster_key().assertion(JWT_CLIENT, server.token_endpoint(), MINUTE);
        std::fs::write(path, format!("{assertion}\n")).unwrap();
        assertion
    };
    let first_assertion = write_assertion(&path);
    let source = ClientCredentials::new(
        endpoint(&server),
        JWT_CLIENT,
        ClientAuth::client_assertion_file(&path),
        roots(&server).await,
    )
    .scope("read");
    let store = TokenStore::builder(source).load().await.unwrap();
    let first = store.current();
    let introspection = server.introspection(&secret(&store)).await;
    assert_eq!(introspection["client_id"], JWT_CLIENT, "{introspection}");

    // The same assertion again: its jti was used, the server refuses it; the token stays.
    let err = store.reload().await.unwrap_err();
    let shown = format!("{} | {err:?}", chain(&err));
    assert!(shown.contains("invalid_client"), "{shown}");
    assert!(!shown.contains(&first_assertion), "{shown}");
    assert_eq!(store.current().header_value(), first.header_value());

    // A new one in the file: the next fetch sends it.
    let second_assertion = write_assertion(&path);
    assert_ne!(first_assertion, second_assertion);
    store.reload().await.unwrap();
    assert_ne!(store.current().header_value(), first.header_value());
    assert!(server.introspect(&secret(&store)).await);
    let stats = server.stats().await;
    assert_eq!(stats.requests_of(JWT_CLIENT), 3, "{stats:?}");
    assert_eq!(stats.failures_of(JWT_CLIENT), 1, "{stats:?}");

    // A file that is gone is named.
    std::fs::remove_file(&path).unwrap();
    let err = store.reload().await.unwrap_err();
    assert!(
        chain(&err).contains(&format!(
            "cannot read the client assertion file {}",
            path.display()
        )),
        "{}",
        chain(&err)
    );
    assert_eq!(server.stats().await.requests_of(JWT_CLIENT), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_secret_rotated_at_the_server_is_named_and_the_last_token_kept() {
    let server = start(60).await;
    let source = basic_source(&server).await;
    let shown_source = format!("{source:?}");
    let store = TokenStore::builder(source).load().await.unwrap();
    let first = store.current();

    server.rotate_secret(BASIC_CLIENT.0, "rotated-secret").await;
    let err = store.reload().await.unwrap_err();
    let line = chain(&err);
    assert!(line.contains(server.token_endpoint()), "{line}");
    assert!(line.contains(BASIC_CLIENT.0), "{line}");
    assert!(
        line.contains("the token endpoint answered invalid_client (HTTP 401)"),
        "{line}"
    );
    let oauth = err
        .downcast_ref::<oauth2::Error>()
        .expect("the source's error");
    assert_eq!(oauth.oauth_error(), Some("invalid_client"));
    assert_eq!(oauth.status(), Some(StatusCode::UNAUTHORIZED));
    for shown in [
        line,
        format!("{err:?}"),
        shown_source,
        format!("{:?}", store.status()),
    ] {
        assert!(!shown.contains(BASIC_CLIENT.1), "{shown}");
        assert!(!shown.contains(&secret(&store)), "{shown}");
    }

    // The last good token is kept, and still works.
    assert_eq!(store.current().header_value(), first.header_value());
    assert!(store.status().last_error.is_some());
    assert!(server.introspect(&secret(&store)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_exchange_of_the_token_another_store_keeps() {
    let server = start(60).await;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let subject = cluster_key().subject_token(CLUSTER_ISSUER, SA, "oauth2", MINUTE);
    std::fs::write(&path, format!("{subject}\n")).unwrap();
    // The subject token's own store: here reloaded by the test alone.
    let subjects = TokenStore::builder(FileSource::new(&path))
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();

    // A confidential client.
    let source = TokenExchange::new(
        endpoint(&server),
        BASIC_CLIENT.0,
        ClientAuth::client_secret_basic(BASIC_CLIENT.1),
        roots(&server).await,
        subjects.clone(),
    )
    .resource(RESOURCE)
    .scope("read");
    let store = TokenStore::builder(source).load().await.unwrap();
    let introspection = server.introspection(&secret(&store)).await;
    assert_eq!(introspection["active"], true, "{introspection}");
    assert_eq!(introspection["sub"], SA);
    assert_eq!(introspection["client_id"], BASIC_CLIENT.0);
    assert_eq!(introspection["scope"], "read");
    assert!(
        store
            .status()
            .expires_at
            .is_some_and(|at| at > SystemTime::now())
    );

    // A subject token that is not one: the server's words, never the token.
    std::fs::write(&path, "not-a-jwt\n").unwrap();
    subjects.reload().await.unwrap();
    let err = store.reload().await.unwrap_err();
    let line = chain(&err);
    assert!(line.contains("invalid_grant"), "{line}");
    assert!(line.contains("subject_token is invalid"), "{line}");
    assert!(!line.contains("not-a-jwt") && !format!("{err:?}").contains("not-a-jwt"));

    // A public client, on the same store once it holds a good token again.
    std::fs::write(&path, format!("{subject}\n")).unwrap();
    subjects.reload().await.unwrap();
    let source = TokenExchange::new(
        endpoint(&server),
        PUBLIC_CLIENT,
        ClientAuth::none(),
        roots(&server).await,
        subjects,
    );
    assert!(format!("{source:?}").contains("file "), "{source:?}");
    let public = TokenStore::builder(source).load().await.unwrap();
    let introspection = server.introspection(&secret(&public)).await;
    assert_eq!(introspection["sub"], SA, "{introspection}");
    assert_eq!(introspection["client_id"], PUBLIC_CLIENT);

    let stats = server.stats().await;
    assert_eq!(stats.requests_of(BASIC_CLIENT.0), 2, "{stats:?}");
    assert_eq!(stats.requests_of(PUBLIC_CLIENT), 1, "{stats:?}");
}

/// A source that is not `https://` fails `load` before any request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn misconfigured_sources_fail_the_load() {
    let server = start(60).await;
    let plain: Uri = server
        .token_endpoint()
        .replacen("https://", "http://", 1)
        .parse()
        .unwrap();
    let auth = ClientAuth::client_secret_basic(BASIC_CLIENT.1);
    let source = ClientCredentials::new(plain, BASIC_CLIENT.0, auth, roots(&server).await);
    let described = source.describe();
    let err = TokenStore::builder(source).load().await.unwrap_err();
    assert_eq!(err.origin(), described);
    assert!(
        chain(&err).contains("is not an https:// URI"),
        "{}",
        chain(&err)
    );
    assert_eq!(server.stats().await.token_requests_total, 0);

    // A CA that is not the server's: a TLS error, as the request's cause.
    let other = rcgen::generate_simple_self_signed(vec!["127.0.0.1".to_owned()]).unwrap();
    let pem = other.cert.pem();
    let stranger = RootStore::builder(FnSource::new("another CA", move || {
        let pem = pem.clone();
        async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
    }))
    .load()
    .await
    .unwrap();
    let auth = ClientAuth::client_secret_basic(BASIC_CLIENT.1);
    let source = ClientCredentials::new(endpoint(&server), BASIC_CLIENT.0, auth, stranger);
    let err = TokenStore::builder(source).load().await.unwrap_err();
    let line = chain(&err);
    assert!(line.contains("the token request failed"), "{line}");
    assert!(line.to_lowercase().contains("certificate"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_callers_across_the_refresh_make_one_token_request() {
    // Renewed at half its lifetime: 2 s left for the requests in flight then.
    let server = start(4).await;
    let store = basic_store(&server).await;
    let (url, _resource) = resource_server(server.clone()).await;
    let client = api_client(&store);
    let mut rotations = store.subscribe();

    // 100 callers send requests until the store's timer has replaced the token, before
    // it expired: one token request for all of them, and none refused.
    let done = Arc::new(tokio::sync::Notify::new());
    let callers = (0..100).map(|_| {
        let (client, url, done) = (client.clone(), url.clone(), done.clone());
        tokio::spawn(async move {
            let mut failed = 0;
            let stop = done.notified();
            tokio::pin!(stop);
            loop {
                tokio::select! {
                    () = &mut stop => return failed,
                    status = get(&client, &url) => failed += u32::from(status != StatusCode::OK),
                }
            }
        })
    });
    let callers: Vec<_> = callers.collect();
    tokio::time::timeout(DEADLINE, rotations.changed())
        .await
        .expect("the timer replaced the token")
        .unwrap();
    done.notify_waiters();
    let mut failed = 0;
    for caller in callers {
        failed += caller.await.unwrap();
    }
    let status = store.status();
    assert_eq!(failed, 0, "{status:?}");
    assert_eq!(status.unauthorized, 0, "{status:?}");
    assert_eq!(
        server.stats().await.requests_of(BASIC_CLIENT.0),
        2,
        "{status:?}"
    );
}

/// A token endpoint on 127.0.0.1 over TLS that answers each request with the next of
/// `answers` (the last one again once they run out), and its CA's bundle.
async fn scripted_endpoint(answers: Vec<&'static str>) -> (Uri, RootStore) {
    let ca = test_tls::TestCa::new();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let uri: Uri = format!("https://{}/token", listener.local_addr().unwrap())
        .parse()
        .unwrap();
    let next = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let _server = serve::spawn(listener, Some(ca.acceptor()), move |_req| {
        let n = next.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        let body = answers[n.min(answers.len() - 1)];
        async move {
            Response::builder()
                .header(http::header::CONTENT_TYPE, "application/json")
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap()
        }
    });
    let pem = ca.ca_pem().to_owned();
    let source = FnSource::new("the test CA", move || {
        let pem = pem.clone();
        async move { Ok::<_, std::io::Error>(pem.into_bytes()) }
    });
    (uri, RootStore::builder(source).load().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lifetime_past_what_the_clock_holds_is_named_and_the_last_token_kept() {
    let good =
        r#"{"access_token":"first-token-0123456789","token_type":"Bearer","expires_in":3600}"#;
    let absurd =
        r#"{"access_token":"second-token-0123456789","token_type":"Bearer","expires_in":1e30}"#;
    let (uri, roots) = scripted_endpoint(vec![good, absurd]).await;
    let auth = ClientAuth::client_secret_post("s3cr3t-value");
    let source = ClientCredentials::new(uri.clone(), "scripted", auth, roots);
    let store = TokenStore::builder(source)
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let first = store.current();
    assert_eq!(secret(&store), "first-token-0123456789");

    // 1e30 seconds added to the time of sending panicked in the fetch.
    let err = tokio::time::timeout(DEADLINE, store.reload())
        .await
        .expect("the reload ends")
        .unwrap_err();
    let line = chain(&err);
    assert!(line.contains(&uri.to_string()), "{line}");
    assert!(
        line.contains("has an expires_in over 2^32 seconds"),
        "{line}"
    );
    assert!(!line.contains("second-token"), "{line}");
    assert!(matches!(
        err.downcast_ref::<oauth2::Error>(),
        Some(oauth2::Error::Response { .. })
    ));
    // The last good token stays, and the store says why nothing newer came.
    assert_eq!(store.current().header_value(), first.header_value());
    let status = store.status();
    assert!(status.last_error.is_some(), "{status:?}");
    assert!(!status.expired, "{status:?}");
    // A load whose first answer is absurd fails with the same error.
    let (uri, roots) = scripted_endpoint(vec![absurd]).await;
    let auth = ClientAuth::client_secret_post("s3cr3t-value");
    let source = ClientCredentials::new(uri.clone(), "scripted", auth, roots);
    let err = TokenStore::builder(source).load().await.unwrap_err();
    let line = chain(&err);
    assert!(line.contains(&uri.to_string()), "{line}");
    assert!(line.contains("expires_in"), "{line}");
}

/// The client-credentials grant through the proxy `HTTPS_PROXY` names, with a password
/// (the environment of a child process: [`https_proxy_child`]): a token and three more
/// come through it; with the server in `NO_PROXY`, none does.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_grant_goes_through_the_proxy_https_proxy_names_unless_no_proxy_says_otherwise() {
    let Some(proxy) = proxy::HttpProxy::start_with_auth("jane", "s3cret").await else {
        return;
    };
    let server = start(60).await;
    let dir = tempfile::tempdir().unwrap();
    let ca = dir.path().join("ca.crt");
    std::fs::write(&ca, server.ca_pem()).unwrap();
    let authority = server.issuer().trim_start_matches("https://").to_owned();
    let proxy_url = proxy.url();
    let env = [
        ("HTTPS_PROXY", proxy_url.as_str()),
        ("BEARER_RELOAD_TEST_URL", server.token_endpoint()),
        ("BEARER_RELOAD_TEST_CA", ca.to_str().unwrap()),
    ];
    let child_test = crate::support::alone::test_name(module_path!(), "https_proxy_child");
    let status = proxy::child(&child_test, &env).status().await.unwrap();
    assert!(status.success(), "the child failed");
    let through = proxy.connects_to(&authority);
    assert!(through >= 1, "{}", proxy.log());

    let no_proxy = [env.as_slice(), &[("NO_PROXY", "127.0.0.1")]].concat();
    let status = proxy::child(&child_test, &no_proxy).status().await.unwrap();
    assert!(status.success(), "the child failed");
    assert_eq!(proxy.connects_to(&authority), through);
}

/// The grant of [`the_grant_goes_through_the_proxy_https_proxy_names_unless_no_proxy_says_otherwise`],
/// in a process whose environment it sets: a token, and three new ones.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by its parent test, in a child process"]
async fn https_proxy_child() {
    let endpoint = proxy::from_parent("BEARER_RELOAD_TEST_URL")
        .parse()
        .unwrap();
    let ca = proxy::from_parent("BEARER_RELOAD_TEST_CA");
    let roots = RootStore::builder(FileSource::new(ca))
        .load()
        .await
        .unwrap();
    let auth = ClientAuth::client_secret_basic(BASIC_CLIENT.1);
    let source = ClientCredentials::new(endpoint, BASIC_CLIENT.0, auth, roots).scope("read");
    let store = TokenStore::builder(source).load().await.unwrap();
    let mut seen = vec![secret(&store)];
    for _ in 0..3 {
        store.reload().await.unwrap();
        seen.push(secret(&store));
    }
    seen.dedup();
    assert_eq!(seen.len(), 4, "a new token each time");
}
