//! `TokenRequestSource` against the project's HTTPS API server, which mints signed
//! audience-bound tokens (`support/token_request.rs`), and services that accept only
//! unexpired tokens for their audience.
//!
//! The day-long and outage scenarios run on simulated time: tokio's paused clock, which
//! jumps to each timer while no HTTP exchange is in flight (`support/sim.rs`), and the same
//! clock as the store's wall clock (`StoreBuilder::simulated_clock`) and the API's.

use crate::support;

use std::time::{Duration, SystemTime};

use bearer_reload::classify::Http401;
use bearer_reload::source::{TokenRequestError, TokenRequestSource};
use bearer_reload::{BearerLayer, LoadError, StoreBuilder, TokenStore};
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use kube::config::{KubeConfigOptions, Kubeconfig};
use support::chain;
use support::kube_api::{KubeApi, User};
use support::server::http1_client;
use support::sim::{GuardLayer, SimClock, guarded};
use support::token_request::{AudienceService, Mode, Outcome, TokenApi, claims_unverified};
use tower::{Layer, ServiceExt};

const NS: &str = "team-a";
const SA: &str = "payments";
/// The bearer token of the client that asks for tokens.
const REQUESTER: &str = "requester-token";
const TTL: u64 = 600;
const DEADLINE: Duration = Duration::from_secs(10);

/// A workload's HTTP client to a service, through `BearerLayer` with the 401 retry.
type Layered = bearer_reload::BearerService<
    HttpClient<HttpConnector, Empty<Bytes>>,
    Http401,
    bearer_reload::layer::RetryUnauthorized,
>;

/// The API server with TokenRequest, and a kube client for it.
struct World {
    api: KubeApi,
    tokens: TokenApi,
    client: kube::Client,
    /// The kubeconfig of the requester, for clients of other identities.
    config: kube::Config,
    clock: Option<SimClock>,
}

impl World {
    /// On the system clock.
    async fn real() -> Self {
        Self::start(None).await
    }

    /// On simulated time: call within a paused runtime.
    async fn simulated() -> Self {
        Self::start(Some(SimClock::start())).await
    }

    async fn start(clock: Option<SimClock>) -> Self {
        let api = KubeApi::start().await;
        api.accept_only(REQUESTER);
        let tokens = match clock {
            Some(clock) => TokenApi::install(&api, move || clock.now()),
            None => TokenApi::install(&api, SystemTime::now),
        };
        tokens.add_service_account(NS, SA);
        let user = User {
            token: Some(REQUESTER),
            ..User::default()
        };
        let path = api.kubeconfig_for(&user, NS);
        let kubeconfig = Kubeconfig::read_from(&path).unwrap();
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .unwrap();
        // kube's own retry of 429/503/504 runs inside each fetch, with its sleeps in the
        // middle of an exchange, where the simulated clock is held: off on simulated time,
        // where the store's own backoff is under test; kube's default on real time.
        config.default_retry = clock.is_none();
        // Each exchange with the API holds the simulated clock (a no-op on real time).
        let client = kube::client::ClientBuilder::try_from(config.clone())
            .unwrap()
            .with_layer(&GuardLayer)
            .build();
        Self {
            api,
            tokens,
            client,
            config,
            clock,
        }
    }

    /// A kube client of the same cluster that authenticates with `token`.
    fn client_as(&self, token: &str) -> kube::Client {
        let mut config = self.config.clone();
        config.auth_info.token = Some(token.to_owned().into());
        kube::Client::try_from(config).unwrap()
    }

    fn source(&self, audience: &str) -> TokenRequestSource {
        TokenRequestSource::new(self.client.clone(), SA)
            .audience(audience)
            .expiration(Duration::from_secs(TTL))
    }

    fn builder(&self, source: TokenRequestSource) -> StoreBuilder {
        let builder = TokenStore::builder(source);
        match self.clock {
            Some(clock) => builder.simulated_clock(clock.origin, clock.start),
            None => builder,
        }
    }

    async fn store(&self, audience: &str) -> TokenStore {
        self.builder(self.source(audience)).load().await.unwrap()
    }

    fn now(&self) -> SystemTime {
        self.clock.map_or_else(SystemTime::now, |c| c.now())
    }

    /// Seconds since the start of a simulated world.
    fn secs(&self, at: SystemTime) -> f64 {
        self.clock.expect("simulated").secs(at)
    }

    /// The TokenRequests for `audience`.
    fn calls(&self, audience: &str) -> Vec<support::token_request::Call> {
        let calls = self.tokens.calls().into_iter();
        calls.filter(|c| c.audiences == [audience]).collect()
    }
}

/// A hyper client through `BearerLayer` with the 401 retry: a workload calling a service.
fn layered(store: &TokenStore) -> Layered {
    BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client())
}

/// One GET through `client`, with the simulated clock held; its status.
async fn get<S>(client: &S, url: &str) -> StatusCode
where
    S: tower::Service<Request<Empty<Bytes>>, Response = http::Response<hyper::body::Incoming>>
        + Clone,
    S::Error: std::fmt::Debug,
{
    let request = Request::get(url).body(Empty::new()).unwrap();
    guarded(async {
        let response = client.clone().oneshot(request).await.unwrap();
        let status = response.status();
        response.into_body().collect().await.unwrap();
        status
    })
    .await
}

/// Busy-waits (yielding, so the clock stays put) until `done`, for work that needs only
/// the CPU; panics after a real-time deadline.
async fn until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + DEADLINE;
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::task::yield_now().await;
    }
}

/// Sleeps until `secs` after the start of the simulated world.
async fn at(world: &World, secs: u64) {
    let clock = world.clock.expect("simulated");
    tokio::time::sleep_until(clock.start + Duration::from_secs(secs)).await;
}

fn minted(call: &support::token_request::Call) -> (SystemTime, SystemTime) {
    match call.outcome {
        Outcome::Minted { iat, exp, .. } => (iat, exp),
        ref other => panic!("not minted: {other:?}"),
    }
}

#[tokio::test(start_paused = true)]
async fn a_simulated_day_makes_one_api_call_per_refresh_window_per_key() {
    let world = World::simulated().await;
    let vault = AudienceService::start(&world.tokens, "vault").await;
    let billing = AudienceService::start(&world.tokens, "billing").await;
    // Two parts of the workload share one store for vault, by cloning it: one load.
    let vault_a = world.store("vault").await;
    let vault_b = vault_a.clone();
    let billing_store = world.store("billing").await;
    assert_eq!(world.tokens.received(), 2);
    let layers = [
        (layered(&vault_a), vault.url("/v1/auth/kubernetes/login")),
        (layered(&vault_b), vault.url("/v1/secret/data/app")),
        (layered(&billing_store), billing.url("/invoices")),
    ];
    let stores = [&vault_a, &billing_store];

    let day = 24 * 3600;
    let mut requests = 0;
    for minute in 1..=day / 60 {
        at(&world, minute * 60).await;
        let now = world.now();
        for store in stores {
            let current = store.current();
            assert!(
                current.expires_at().is_some_and(|exp| exp > now),
                "an expired token in the store at {} s",
                world.secs(now)
            );
        }
        for (client, url) in &layers {
            assert_eq!(
                get(client, url).await,
                StatusCode::OK,
                "at {} s",
                minute * 60
            );
            requests += 1;
        }
    }

    for audience in ["vault", "billing"] {
        let calls = world.calls(audience);
        // Each call comes at the refresh point of the token before it: 20% of the TTL
        // (120 s) before its expiry, less the kubelet's jitter of 0 to 9 s.
        for pair in calls.windows(2) {
            let (iat, exp) = minted(&pair[0]);
            assert_eq!(exp.duration_since(iat).unwrap(), Duration::from_secs(TTL));
            let after = pair[1].at.duration_since(iat).unwrap().as_secs_f64();
            assert!(
                (471.0..=480.01).contains(&after),
                "{audience}: a call {after} s after the previous token was issued"
            );
        }
        minted(calls.last().unwrap());
        // 86400 s in windows of 471 to 480 s, plus the load.
        let n = calls.len() as u64;
        assert!(
            (1 + day / 480..=1 + day / 471).contains(&n),
            "{audience}: {n} calls"
        );
    }
    // Both vault layers together: one call per window, not two.
    assert_eq!(
        world.tokens.calls().len(),
        world.calls("vault").len() + world.calls("billing").len()
    );
    let tally = (vault.tally(), billing.tally());
    assert_eq!(tally.0.accepted + tally.1.accepted, requests);
    assert_eq!(tally.0.refused() + tally.1.refused(), 0, "{tally:?}");
    for store in stores {
        let status = store.status();
        assert_eq!(status.failures, 0);
        assert_eq!(status.unauthorized, 0);
        assert!(!status.expired);
    }
}

#[tokio::test(start_paused = true)]
async fn an_api_outage_inside_the_validity_window_serves_the_old_token_without_failures() {
    let world = World::simulated().await;
    let vault = AudienceService::start(&world.tokens, "vault").await;
    let store = world.store("vault").await;
    let client = layered(&store);
    let url = vault.url("/v1/secret/data/app");
    let first = store.current();
    let refresh = first.refresh_at().unwrap();
    // Five minutes of 503s around the refresh point (471 to 480 s), inside the token's
    // 600 s.
    let (down, up) = (250, 550);
    for t in (5..=700).step_by(5) {
        at(&world, t).await;
        match t {
            250 => world
                .tokens
                .set_mode(Mode::Fail(StatusCode::SERVICE_UNAVAILABLE)),
            550 => world.tokens.set_mode(Mode::Serve),
            _ => {}
        }
        assert_eq!(get(&client, &url).await, StatusCode::OK, "at {t} s");
        let status = store.status();
        if (down..up).contains(&t) && world.now() > refresh {
            // Still the first token, and the error says who and what.
            assert_eq!(status.generation, 1, "at {t} s");
            let error = status.last_error.expect("the failed refresh is reported");
            let text = chain(&error);
            assert!(
                text.starts_with(
                    "cannot fetch from serviceaccount team-a/payments (TokenRequest, \
                     audiences: vault): "
                ) && text.contains("503 ServiceUnavailable"),
                "{text}"
            );
            assert!(matches!(
                error.downcast_ref::<TokenRequestError>(),
                Some(TokenRequestError::Status { code: 503, .. })
            ));
            assert!(!status.expired);
        }
    }

    let calls = world.calls("vault");
    let refused: Vec<f64> = calls
        .iter()
        .filter(|c| c.outcome == Outcome::Refused(StatusCode::SERVICE_UNAVAILABLE))
        .map(|c| world.secs(c.at))
        .collect();
    // Retried with a backoff from the refresh point: 1 s, 2 s, 4 s ... apart.
    assert!((5..=8).contains(&refused.len()), "{refused:?}");
    assert!(
        (world.secs(refresh) - refused[0]).abs() < 0.01,
        "{refused:?}"
    );
    for (i, pair) in refused.windows(2).enumerate() {
        let gap = pair[1] - pair[0];
        assert!((gap - f64::from(1 << i)).abs() < 0.01, "{refused:?}");
    }
    // The first call after the outage got the new token before the old one expired.
    let renewed = calls
        .iter()
        .find(|c| world.secs(c.at) > refused[0] && matches!(c.outcome, Outcome::Minted { .. }))
        .expect("a token minted after the outage");
    let renewed_at = world.secs(renewed.at);
    assert!(
        (550.0..600.0).contains(&renewed_at),
        "renewed at {renewed_at} s"
    );
    // The backoff never waits past halfway to the expiry (it would sleep 64 s here).
    let last = refused.last().unwrap();
    assert!(
        renewed_at - last <= (600.0 - last) / 2.0 + 0.01,
        "{last} -> {renewed_at}"
    );
    let tally = vault.tally();
    assert_eq!(tally.refused(), 0, "{tally:?}");
    let status = store.status();
    assert!(status.last_error.is_none());
    assert_eq!(status.unauthorized, 0);
    assert_eq!(status.failures as usize, refused.len());
}

#[tokio::test(start_paused = true)]
async fn an_outage_past_the_expiry_is_reported_and_the_first_request_after_it_recovers() {
    let world = World::simulated().await;
    let vault = AudienceService::start(&world.tokens, "vault").await;
    let store = world.store("vault").await;
    let client = layered(&store);
    let url = vault.url("/v1/secret/data/app");
    at(&world, 300).await;
    world
        .tokens
        .set_mode(Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR));

    at(&world, 599).await;
    assert_eq!(
        get(&client, &url).await,
        StatusCode::OK,
        "valid until 600 s"
    );
    at(&world, 610).await;
    let status = store.status();
    assert!(status.expired);
    let error = chain(&status.last_error.expect("the error is reported"));
    assert!(
        error.starts_with(
            "cannot fetch from serviceaccount team-a/payments (TokenRequest, audiences: \
             vault): "
        ) && error.contains("500 InternalServerError"),
        "{error}"
    );
    // The expired token is refused, the 401 reload fails too: the request fails.
    assert_eq!(get(&client, &url).await, StatusCode::UNAUTHORIZED);

    at(&world, 900).await;
    world.tokens.set_mode(Mode::Serve);
    // The first request after the outage: refused, reloaded at once, retried.
    assert_eq!(get(&client, &url).await, StatusCode::OK);
    let status = store.status();
    assert!(!status.expired);
    assert!(status.last_error.is_none());
    assert_eq!(status.generation, 2);
    assert_eq!(status.retries_succeeded, 1);
    // Retries during the outage backed off: a handful, not one a second.
    let refused = world.tokens.calls().len() - world.tokens.minted();
    assert!(refused < 20, "{refused} attempts in 600 s of outage");
}

#[tokio::test(start_paused = true)]
async fn a_stalled_api_times_out_while_requests_go_on_with_the_old_token() {
    let world = World::simulated().await;
    let vault = AudienceService::start(&world.tokens, "vault").await;
    let store = world.store("vault").await;
    let client = layered(&store);
    let url = vault.url("/v1/secret/data/app");
    world.tokens.set_mode(Mode::Stall);

    // The timer's refresh reaches the API and hangs there.
    world
        .tokens
        .wait_received(2, Duration::from_secs(600))
        .await;
    let stalled_at = world.secs(world.now());
    assert!((471.0..=480.0).contains(&stalled_at), "{stalled_at}");
    // Requests do not wait for it: the old token, at once (the clock cannot move while
    // the refresh hangs, so these finish in no simulated time at all).
    for _ in 0..5 {
        assert_eq!(get(&client, &url).await, StatusCode::OK);
    }
    assert_eq!(world.secs(world.now()), stalled_at);

    // After the store's read timeout (10 s) the refresh counts as failed.
    tokio::time::advance(Duration::from_secs(10)).await;
    until("the timed-out refresh to be reported", || {
        store.status().failures == 1
    })
    .await;
    let error = store.status().last_error.unwrap();
    assert!(matches!(error, LoadError::Timeout { .. }));
    assert_eq!(
        error.to_string(),
        "fetching from serviceaccount team-a/payments (TokenRequest, audiences: \
         vault) took longer than 10s"
    );
    assert_eq!(store.generation(), 1);

    // Back: the retry a second later gets a new token.
    world.tokens.set_mode(Mode::Serve);
    at(&world, stalled_at as u64 + 12).await;
    assert_eq!(store.generation(), 2);
    assert!(store.status().last_error.is_none());
    assert_eq!(get(&client, &url).await, StatusCode::OK);
    assert_eq!(vault.tally().refused(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_token_is_replaced_within_one_401_for_every_layer_of_the_key() {
    let world = World::real().await;
    let vault = AudienceService::start(&world.tokens, "vault").await;
    let store_a = world.store("vault").await;
    let store_b = store_a.clone();
    let (a, b) = (layered(&store_a), layered(&store_b));
    let url = vault.url("/v1/secret/data/app");
    assert_eq!(get(&a, &url).await, StatusCode::OK);
    assert_eq!(get(&b, &url).await, StatusCode::OK);
    let old = store_a.current();

    // The service account is deleted and created again under the same name: every token
    // of the old one is refused (the kubelet's cache would keep serving it,
    // kubernetes#132802).
    let uid = world.tokens.recreate_service_account(NS, SA);
    assert_eq!(get(&a, &url).await, StatusCode::OK);
    // The other layer shares the store: it has the new token without a 401 of its own.
    assert_eq!(get(&b, &url).await, StatusCode::OK);
    let tally = vault.tally();
    assert_eq!((tally.revoked, tally.accepted), (1, 4), "{tally:?}");
    assert_eq!(
        world.tokens.minted(),
        2,
        "one new token, requested on the 401"
    );
    let status = store_a.status();
    assert_eq!(status.unauthorized, 1);
    assert_eq!(status.unauthorized_reloads, 1);
    assert_eq!(status.retries_succeeded, 1);
    assert_ne!(store_a.current().header_value(), old.header_value());

    // The new token is the new account's; the source asked the API, not a cache.
    let token = store_a.current().header_value().to_str().unwrap()[7..].to_owned();
    let claims = claims_unverified(&token).unwrap();
    assert_eq!(
        claims["kubernetes.io"]["serviceaccount"]["uid"],
        uid.as_str()
    );

    // One token revoked alone: the same, within one 401.
    world.tokens.revoke(&token);
    assert_eq!(get(&b, &url).await, StatusCode::OK);
    assert_eq!(vault.tally().revoked, 2);
    assert_eq!(world.tokens.minted(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_token_carries_the_asked_audience_expiry_and_bound_object() {
    let world = World::real().await;
    let source = TokenRequestSource::new(world.client.clone(), SA)
        .namespace(NS)
        .audiences(["vault", "https://billing.example"])
        .expiration(Duration::from_secs(900))
        .bound_to_pod("web-0")
        .bound_uid("9e1c7b2a-5d1f");
    let store = TokenStore::builder(source).load().await.unwrap();
    let calls = world.tokens.calls();
    assert_eq!(calls.len(), 1);
    let call = &calls[0];
    assert_eq!(call.audiences, ["https://billing.example", "vault"]);
    assert_eq!(call.expiration_seconds, 900);
    let bound = call.bound.as_ref().unwrap();
    assert_eq!(
        (&bound["kind"], &bound["name"], &bound["uid"]),
        (&"Pod".into(), &"web-0".into(), &"9e1c7b2a-5d1f".into())
    );

    let token = store.current();
    assert_eq!(
        token.subject(),
        Some("system:serviceaccount:team-a:payments")
    );
    let (iat, exp) = minted(call);
    assert_eq!(token.expires_at(), Some(exp));
    // The kubelet's point: 20% of 900 s before the expiry, less 0 to 9 s.
    let refresh = token.refresh_at().unwrap();
    let before = exp.duration_since(refresh).unwrap().as_secs();
    assert!((180..190).contains(&before), "{before}");
    assert!(refresh > iat);
    let status = store.status();
    assert_eq!(
        status.source,
        "serviceaccount team-a/payments (TokenRequest, audiences: https://billing.example, vault)"
    );
    // Tokens for both audiences, from the server's verifier's point of view.
    let secret = token.header_value().to_str().unwrap()[7..].to_owned();
    assert!(world.tokens.verify(&secret, "vault").is_ok());
    assert!(
        world
            .tokens
            .verify(&secret, "https://billing.example")
            .is_ok()
    );
    assert!(world.tokens.verify(&secret, "other").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_errors_name_the_service_account_and_audience_and_never_a_token() {
    let world = World::real().await;
    let load = |name: &str| {
        let source = TokenRequestSource::new(world.client.clone(), name)
            .audience("vault")
            .expiration(Duration::from_secs(TTL));
        TokenStore::builder(source).load()
    };
    let text = |e: &LoadError| chain(e);

    let missing = load("ghost").await.unwrap_err();
    assert_eq!(
        text(&missing),
        "cannot fetch from serviceaccount team-a/ghost (TokenRequest, audiences: \
         vault): not found (404): serviceaccounts \"ghost\" not found"
    );
    assert!(matches!(
        missing.downcast_ref(),
        Some(TokenRequestError::NotFound { .. })
    ));

    world
        .tokens
        .set_mode(Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR));
    let down = load(SA).await.unwrap_err();
    assert_eq!(
        text(&down),
        "cannot fetch from serviceaccount team-a/payments (TokenRequest, audiences: \
         vault): the API server answered 500 InternalServerError: the server is currently \
         unable to handle the request"
    );
    // A 503 is retried by kube's own retry layer (on by default) inside the fetch, until
    // the store's read timeout ends it.
    world
        .tokens
        .set_mode(Mode::Fail(StatusCode::SERVICE_UNAVAILABLE));
    let source = world.source("vault");
    let slow = TokenStore::builder(source)
        .fetch_timeout(Duration::from_millis(500))
        .load()
        .await
        .unwrap_err();
    assert_eq!(
        text(&slow),
        "fetching from serviceaccount team-a/payments (TokenRequest, audiences: \
         vault) took longer than 500ms"
    );
    assert!(world.tokens.received() > 3, "kube retried the 503s");
    world.tokens.set_mode(Mode::Serve);

    world.tokens.forbid(REQUESTER);
    let forbidden = load(SA).await.unwrap_err();
    assert!(
        text(&forbidden).starts_with(
            "cannot fetch from serviceaccount team-a/payments (TokenRequest, \
             audiences: vault): forbidden to create tokens (403): serviceaccounts \
             \"payments\" is forbidden: User"
        ),
        "{forbidden}"
    );

    // The client's own credentials refused.
    world.api.accept_only("someone-else");
    let refused = load(SA).await.unwrap_err();
    assert!(
        matches!(
            refused.downcast_ref(),
            Some(TokenRequestError::Unauthorized { .. })
        ),
        "{refused}"
    );

    for error in [&missing, &down, &forbidden, &refused] {
        let shown = format!("{error} {error:?}");
        assert!(!shown.contains(REQUESTER), "{shown}");
        assert!(!shown.contains("eyJ"), "{shown}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_request_never_crosses_identities() {
    // An operator serving two tenants: two clients of one cluster, with credentials of
    // their own, each asking for a token of the same namespace, service account and
    // audience. The API server lets the first create it and forbids the second.
    let world = World::real().await;
    const TENANT_B: &str = "tenant-b-token";
    world.api.accept_also(TENANT_B);
    world.tokens.forbid(TENANT_B);
    let first = world.store("vault").await;
    assert_eq!(world.tokens.minted(), 1);

    let second = TokenStore::builder(
        TokenRequestSource::new(world.client_as(TENANT_B), SA)
            .audience("vault")
            .expiration(Duration::from_secs(TTL)),
    )
    .load()
    .await;
    let err = second.expect_err("the second identity gets no token");
    assert!(
        matches!(
            err.downcast_ref(),
            Some(TokenRequestError::Forbidden { .. })
        ),
        "{err:?}"
    );
    assert!(
        chain(&err).contains("forbidden to create tokens (403)"),
        "{err}"
    );
    // The API server saw the second identity ask, and minted nothing for it.
    let requesters: Vec<Option<String>> = world
        .tokens
        .calls()
        .iter()
        .map(|c| c.requester.clone())
        .collect();
    assert_eq!(
        requesters,
        [Some(REQUESTER.to_owned()), Some(TENANT_B.to_owned())]
    );
    assert_eq!(world.tokens.minted(), 1);
    assert_eq!(first.status().generation, 1);
}
