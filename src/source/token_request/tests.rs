use std::time::Duration;

use serde_json::{Value, json};

use super::*;
use crate::source::Trigger;

/// A client that never reaches a cluster: building a source makes no request, and a
/// fetch fails with a transport error.
fn offline(namespace: &str) -> Client {
    Client::new(
        tower::service_fn(|_: http::Request<::kube::client::Body>| async {
            Err::<http::Response<::kube::client::Body>, _>(std::io::Error::other(
                "connection refused",
            ))
        }),
        namespace,
    )
}

fn source() -> TokenRequestSource {
    TokenRequestSource::new(offline("team-a"), "payments")
        .audience("vault")
        .expiration(Duration::from_secs(600))
}

fn err(source: TokenRequestSource) -> TokenRequestError {
    match source.spec.check() {
        Ok(_) => panic!("{source:?} passed"),
        Err(e) => e,
    }
}

#[tokio::test]
async fn what_the_api_would_refuse_is_refused_before_any_request() {
    let short = err(source().expiration(Duration::from_secs(599)));
    assert!(matches!(
        short,
        TokenRequestError::ExpirationTooShort { seconds: 599 }
    ));
    assert_eq!(
        short.to_string(),
        "expirationSeconds 599 is below the API's minimum of 600 (10 minutes)"
    );
    // Whole seconds count: 599.9 s is 599.
    let almost = err(source().expiration(Duration::from_millis(599_900)));
    assert!(matches!(
        almost,
        TokenRequestError::ExpirationTooShort { seconds: 599 }
    ));
    assert!(
        source()
            .expiration(Duration::from_secs(600))
            .spec
            .check()
            .is_ok()
    );
    let long = err(source().expiration(Duration::from_secs((1 << 32) + 1)));
    assert!(
        long.to_string()
            .ends_with("above the API's maximum of 2^32"),
        "{long}"
    );
    let bad_ns = err(source().namespace("Team_A"));
    assert_eq!(
        bad_ns.to_string(),
        "namespace \"Team_A\" is not a valid name: only lowercase letters, digits and '-' \
         are allowed"
    );
    let named = |name: &str| TokenRequestSource::new(offline("team-a"), name);
    assert!(matches!(
        err(named("a/b")),
        TokenRequestError::InvalidName {
            what: "service account",
            ..
        }
    ));
    assert!(matches!(
        err(named("")),
        TokenRequestError::InvalidName {
            problem: "empty",
            ..
        }
    ));
    assert!(matches!(
        err(source().bound_to_pod("-x")),
        TokenRequestError::InvalidName {
            what: "bound object",
            ..
        }
    ));
    // A uid alone binds to nothing: refused rather than dropped.
    assert!(matches!(
        err(source().bound_uid("9e1c7b2a")),
        TokenRequestError::UidWithoutObject
    ));
    assert!(matches!(
        err(source().audience("")),
        TokenRequestError::EmptyAudience
    ));
    // Dotted service account names are valid subdomains.
    assert!(named("ci.bot-1").spec.check().is_ok());

    // Each limit is inclusive: the longest allowed passes, one more is refused.
    let max = Duration::from_secs(1 << 32);
    assert!(source().expiration(max).spec.check().is_ok());
    assert!(matches!(
        err(source().expiration(max + Duration::from_secs(1))),
        TokenRequestError::ExpirationTooLong { .. }
    ));
    let problem = |s: TokenRequestSource| match s.spec.check() {
        Ok(_) => None,
        Err(TokenRequestError::InvalidName { problem, .. }) => Some(problem),
        Err(other) => panic!("{other}"),
    };
    assert_eq!(problem(source().namespace("n".repeat(63))), None);
    assert_eq!(
        problem(source().namespace("n".repeat(64))),
        Some("longer than 63 characters")
    );
    // 253 characters in parts of at most 63.
    let subdomain = |len: usize| {
        let mut name = format!("{}.", "s".repeat(63)).repeat(4);
        name.truncate(len);
        name
    };
    assert_eq!(problem(named(&subdomain(253))), None);
    assert_eq!(
        problem(named(&subdomain(254))),
        Some("longer than 253 characters")
    );
    for name in ["-team", "team-"] {
        assert_eq!(
            problem(source().namespace(name)),
            Some("must start and end with a letter or digit"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn an_invalid_request_fails_the_load_naming_the_account() {
    let err = crate::TokenStore::builder(source().expiration(Duration::from_secs(60)))
        .load()
        .await
        .unwrap_err();
    assert_eq!(
        format!("{}", crate::store::Chain(&err)),
        "cannot fetch from serviceaccount team-a/payments (TokenRequest, audiences: \
         vault): expirationSeconds 60 is below the API's minimum of 600 (10 minutes)"
    );
}

#[tokio::test]
async fn defaults_come_from_the_client_and_the_api() {
    let source = TokenRequestSource::new(offline("apps"), "web");
    assert_eq!(
        source.describe(),
        "serviceaccount apps/web (TokenRequest, audiences: the API server's)"
    );
    let checked = source.spec.check().unwrap();
    assert_eq!(checked.expiration, Duration::from_secs(3600));
    let body: Value = serde_json::from_slice(&checked.body).unwrap();
    assert_eq!(
        body,
        json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {},
            "spec": {"expirationSeconds": 3600},
        })
    );
    assert_eq!(checked.path, "/api/v1/namespaces/apps/serviceaccounts");
}

#[tokio::test]
async fn debug_shows_what_it_asks_for() {
    let debug = format!("{:?}", source().bound_to_pod("web-0"));
    for part in [
        "TokenRequestSource",
        "team-a",
        "payments",
        "vault",
        "600s",
        "web-0",
    ] {
        assert!(debug.contains(part), "{part}: {debug}");
    }
}

#[tokio::test]
async fn the_request_carries_audiences_expiration_and_bound_object() {
    let source = source()
        .audiences(["https://billing.example", "vault"])
        // The uid may come first; a later bound_to_* replaces the object, not the uid.
        .bound_uid("9e1c7b2a")
        .bound_to_node("n1")
        .bound_to_pod("web-0");
    let body: Value = serde_json::from_slice(&source.spec.check().unwrap().body).unwrap();
    assert_eq!(
        body["spec"],
        json!({
            "audiences": ["https://billing.example", "vault"],
            "expirationSeconds": 600,
            "boundObjectRef": {"apiVersion": "v1", "kind": "Pod", "name": "web-0", "uid": "9e1c7b2a"},
        })
    );
    assert_eq!(
        source.describe(),
        "serviceaccount team-a/payments (TokenRequest, audiences: https://billing.example, vault)"
    );
    let bound = |source: TokenRequestSource| {
        let body: Value = serde_json::from_slice(&source.spec.check().unwrap().body).unwrap();
        body["spec"]["boundObjectRef"].clone()
    };
    assert_eq!(
        bound(self::source().bound_to_secret("creds")),
        json!({"apiVersion": "v1", "kind": "Secret", "name": "creds"})
    );
    assert_eq!(
        bound(self::source().bound_to_node("n1")),
        json!({"apiVersion": "v1", "kind": "Node", "name": "n1"})
    );
}

#[tokio::test]
async fn each_part_of_the_request_draws_its_own_jitter() {
    let seed = |s: TokenRequestSource| s.spec.check().unwrap().seed;
    let base = seed(source().audience("billing"));
    // Audience order and repeats do not matter.
    assert_eq!(base, seed(source().audiences(["billing", "vault"])));
    let other_order = TokenRequestSource::new(offline("team-a"), "payments")
        .audiences(["billing", "vault", "vault"])
        .expiration(Duration::from_secs(600));
    assert_eq!(base, seed(other_order));
    // Each part does.
    let differs = [
        source().audience("billing").namespace("team-b"),
        TokenRequestSource::new(offline("team-a"), "orders")
            .audiences(["billing", "vault"])
            .expiration(Duration::from_secs(600)),
        source(),
        source()
            .audience("billing")
            .expiration(Duration::from_secs(601)),
        source().audience("billing").bound_to_pod("web-0"),
        source().audience("billing").bound_to_secret("web-0"),
        source()
            .audience("billing")
            .bound_to_pod("web-0")
            .bound_uid("u"),
        source().audience("billing").bound_to_node("web-0"),
    ];
    let mut seeds: Vec<u64> = differs.into_iter().map(seed).collect();
    seeds.push(base);
    let count = seeds.len();
    seeds.sort_unstable();
    seeds.dedup();
    assert_eq!(seeds.len(), count, "every seed differs");
}

#[tokio::test]
async fn a_failed_request_says_what_failed() {
    let cx = FetchContext::new(Trigger::Unauthorized, 1 << 16);
    let err = source().fetch(cx).await.unwrap_err();
    assert!(matches!(err, TokenRequestError::Request(_)), "{err:?}");
    assert_eq!(err.to_string(), "the request failed");
    assert!(std::error::Error::source(&err).is_some());
    assert_eq!(err.code(), None);
}

#[test]
fn api_statuses_are_sorted_by_what_they_mean() {
    let status = |code: u16, reason: &str, message: &str| {
        ::kube::Error::Api(
            ::kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    };
    let forbidden = TokenRequestError::from_kube(status(
        403,
        "Forbidden",
        "serviceaccounts \"b\" is forbidden",
    ));
    assert_eq!(
        forbidden.to_string(),
        "forbidden to create tokens (403): serviceaccounts \"b\" is forbidden"
    );
    assert_eq!(forbidden.code(), Some(403));
    let missing = TokenRequestError::from_kube(status(404, "NotFound", "gone"));
    assert!(matches!(missing, TokenRequestError::NotFound { .. }));
    assert_eq!(missing.code(), Some(404));
    let unavailable = TokenRequestError::from_kube(status(503, "ServiceUnavailable", "down"));
    assert_eq!(
        unavailable.to_string(),
        "the API server answered 503 ServiceUnavailable: down"
    );
    assert_eq!(unavailable.code(), Some(503));
    let refused = TokenRequestError::from_kube(status(401, "Unauthorized", "Unauthorized"));
    assert!(matches!(refused, TokenRequestError::Unauthorized { .. }));
    assert_eq!(refused.code(), Some(401));
}

#[test]
fn answers_are_read_without_quoting_them() {
    let secret = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl";
    let ok = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "metadata": {"name": "payments", "namespace": "team-a"},
        "spec": {"audiences": ["vault"], "expirationSeconds": 900},
        "status": {"token": secret, "expirationTimestamp": "2027-01-15T08:00:00Z"},
    });
    let asked = Duration::from_secs(600);
    let issued = wire::parse_response(&ok.to_string(), asked).unwrap();
    assert_eq!(issued.token.as_str(), secret);
    // The server's TTL wins over the one asked for.
    assert_eq!(issued.ttl, Duration::from_secs(900));
    assert_eq!(
        issued.expires_at,
        UNIX_EPOCH + Duration::from_secs(1_800_000_000)
    );

    let with = |pointer: &str, value: Value| {
        let mut body = ok.clone();
        *body.pointer_mut(pointer).unwrap() = value;
        wire::parse_response(&body.to_string(), asked).map(|i| i.ttl)
    };
    assert_eq!(with("/spec/expirationSeconds", Value::Null), Ok(asked));
    assert_eq!(with("/spec/expirationSeconds", json!(0)), Ok(asked));
    assert_eq!(
        with("/status/token", json!("")).unwrap_err(),
        "has no status.token"
    );
    assert_eq!(
        with("/status/token", json!(5)).unwrap_err(),
        "has no status.token"
    );
    assert_eq!(
        with("/status/expirationTimestamp", json!(secret)).unwrap_err(),
        "has a status.expirationTimestamp that is not an RFC 3339 time"
    );
    assert_eq!(
        with("/status/expirationTimestamp", Value::Null).unwrap_err(),
        "has no status.expirationTimestamp"
    );
    assert_eq!(
        with("/kind", json!("Status")).unwrap_err(),
        "is not a TokenRequest"
    );
    let truncated = &ok.to_string()[..40];
    assert_eq!(
        wire::parse_response(truncated, asked).err(),
        Some("is not JSON")
    );
}
