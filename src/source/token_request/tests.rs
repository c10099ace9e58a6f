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

fn builder() -> TokenRequestBuilder {
    TokenRequestSource::builder(offline("team-a"), "https://10.96.0.1:443/")
        .service_account("payments")
        .audience("vault")
        .expiration(Duration::from_secs(600))
}

#[tokio::test]
async fn the_builder_refuses_what_the_api_would_refuse() {
    let err = |b: TokenRequestBuilder| b.build().unwrap_err();
    let short = err(builder().expiration(Duration::from_secs(599)));
    assert_eq!(
        short,
        InvalidTokenRequest::ExpirationTooShort {
            account: "serviceaccount team-a/payments (TokenRequest, audiences: vault)".into(),
            seconds: 599,
        }
    );
    // Whole seconds count: 599.9 s is 599.
    let almost = err(builder().expiration(Duration::from_millis(599_900)));
    assert!(matches!(
        almost,
        InvalidTokenRequest::ExpirationTooShort { seconds: 599, .. }
    ));
    assert!(
        builder()
            .expiration(Duration::from_secs(600))
            .build()
            .is_ok()
    );
    let long = err(builder().expiration(Duration::from_secs((1 << 32) + 1)));
    assert!(
        long.to_string()
            .ends_with("above the API's maximum of 2^32"),
        "{long}"
    );

    let unnamed = TokenRequestSource::builder(offline("team-a"), "https://x").build();
    assert_eq!(unnamed.unwrap_err(), InvalidTokenRequest::NoServiceAccount);
    let bad_ns = err(builder().namespace("Team_A"));
    assert_eq!(
        bad_ns.to_string(),
        "serviceaccount Team_A/payments (TokenRequest, audiences: vault): namespace \"Team_A\" \
         is not a valid name: only lowercase letters, digits and '-' are allowed"
    );
    assert!(matches!(
        err(builder().service_account("a/b")),
        InvalidTokenRequest::InvalidName {
            what: "service account",
            ..
        }
    ));
    assert!(matches!(
        err(builder().service_account("")),
        InvalidTokenRequest::InvalidName {
            problem: "empty",
            ..
        }
    ));
    assert!(matches!(
        err(builder().bound_to(BoundObject::pod("-x"))),
        InvalidTokenRequest::InvalidName {
            what: "bound object",
            ..
        }
    ));
    assert!(matches!(
        err(builder().audience("")),
        InvalidTokenRequest::EmptyAudience { .. }
    ));
    // Dotted service account names are valid subdomains.
    assert!(builder().service_account("ci.bot-1").build().is_ok());

    // Each limit is inclusive: the longest allowed passes, one more is refused.
    let max = Duration::from_secs(1 << 32);
    assert!(builder().expiration(max).build().is_ok());
    assert!(matches!(
        err(builder().expiration(max + Duration::from_secs(1))),
        InvalidTokenRequest::ExpirationTooLong { .. }
    ));
    let problem = |b: TokenRequestBuilder| match b.build() {
        Ok(_) => None,
        Err(InvalidTokenRequest::InvalidName { problem, .. }) => Some(problem),
        Err(other) => panic!("{other}"),
    };
    assert_eq!(problem(builder().namespace("n".repeat(63))), None);
    assert_eq!(
        problem(builder().namespace("n".repeat(64))),
        Some("longer than 63 characters")
    );
    // 253 characters in parts of at most 63.
    let subdomain = |len: usize| {
        let mut name = format!("{}.", "s".repeat(63)).repeat(4);
        name.truncate(len);
        name
    };
    assert_eq!(problem(builder().service_account(subdomain(253))), None);
    assert_eq!(
        problem(builder().service_account(subdomain(254))),
        Some("longer than 253 characters")
    );
    for name in ["-team", "team-"] {
        assert_eq!(
            problem(builder().namespace(name)),
            Some("must start and end with a letter or digit"),
            "{name}"
        );
    }
}

#[tokio::test]
async fn debug_of_the_builder_shows_what_it_asks_for() {
    let debug = format!("{:?}", builder().bound_to(BoundObject::pod("web-0")));
    for part in [
        "TokenRequestBuilder",
        "https://10.96.0.1:443",
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
async fn defaults_come_from_the_client_and_the_api() {
    let source = TokenRequestSource::builder(offline("apps"), "https://c")
        .service_account("web")
        .build()
        .unwrap();
    assert_eq!(source.expiration(), Duration::from_secs(3600));
    assert_eq!(
        source.describe(),
        "serviceaccount apps/web (TokenRequest, audiences: the API server's)"
    );
    let body: Value = serde_json::from_slice(&source.body).unwrap();
    assert_eq!(
        body,
        json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "metadata": {},
            "spec": {"expirationSeconds": 3600},
        })
    );
    assert_eq!(source.path, "/api/v1/namespaces/apps/serviceaccounts");
}

#[tokio::test]
async fn debug_names_the_account_and_lifetime() {
    let source = builder().build().unwrap();
    let debug = format!("{source:?}");
    assert!(
        debug.starts_with("TokenRequestSource")
            && debug.contains("payments")
            && debug.contains("600s"),
        "{debug}"
    );
}

#[tokio::test]
async fn the_request_carries_audiences_expiration_and_bound_object() {
    let source = builder()
        .audiences(["https://billing.example", "vault"])
        .bound_to(BoundObject::pod("web-0").uid("9e1c7b2a"))
        .build()
        .unwrap();
    let body: Value = serde_json::from_slice(&source.body).unwrap();
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
}

#[tokio::test]
async fn the_share_key_is_the_kubelets_cache_key_with_the_cluster() {
    let key = |b: TokenRequestBuilder| b.build().unwrap().share_key().unwrap();
    let base = key(builder().audience("billing"));
    // Audience order and repeats, and a trailing slash on the URL, do not matter.
    assert_eq!(base, key(builder().audiences(["billing", "vault"])));
    let other_order = TokenRequestSource::builder(offline("team-a"), "https://10.96.0.1:443")
        .service_account("payments")
        .audiences(["billing", "vault", "vault"])
        .expiration(Duration::from_secs(600));
    assert_eq!(base, key(other_order));
    // Each part does.
    let differs = [
        TokenRequestSource::builder(offline("team-a"), "https://10.96.0.2:443")
            .service_account("payments")
            .audiences(["billing", "vault"])
            .expiration(Duration::from_secs(600)),
        builder().audience("billing").namespace("team-b"),
        builder().audience("billing").service_account("orders"),
        builder(),
        builder()
            .audience("billing")
            .expiration(Duration::from_secs(601)),
        builder()
            .audience("billing")
            .bound_to(BoundObject::pod("web-0")),
        builder()
            .audience("billing")
            .bound_to(BoundObject::secret("web-0")),
        builder()
            .audience("billing")
            .bound_to(BoundObject::pod("web-0").uid("u")),
    ];
    let mut keys: Vec<String> = differs.into_iter().map(key).collect();
    keys.push(base);
    let count = keys.len();
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), count, "every key differs");
}

#[tokio::test]
async fn a_failed_request_names_the_account_and_audience() {
    let source = builder().build().unwrap();
    let cx = FetchContext::new(Trigger::Unauthorized, 1 << 16);
    let err = source.fetch(cx).await.unwrap_err();
    assert!(matches!(err, TokenRequestError::Request { .. }), "{err:?}");
    assert!(
        err.to_string().starts_with(
            "serviceaccount team-a/payments (TokenRequest, audiences: vault): request failed:"
        ),
        "{err}"
    );
    assert_eq!(err.code(), None);
}

#[test]
fn api_statuses_are_sorted_by_what_they_mean() {
    let account: Arc<str> = "serviceaccount a/b (TokenRequest, audiences: v)".into();
    let status = |code: u16, reason: &str, message: &str| {
        ::kube::Error::Api(
            ::kube::core::Status::failure(message, reason)
                .with_code(code)
                .boxed(),
        )
    };
    let forbidden = TokenRequestError::from_kube(
        &account,
        status(403, "Forbidden", "serviceaccounts \"b\" is forbidden"),
    );
    assert_eq!(
        forbidden.to_string(),
        "serviceaccount a/b (TokenRequest, audiences: v): forbidden to create tokens (403): \
         serviceaccounts \"b\" is forbidden"
    );
    let missing = TokenRequestError::from_kube(&account, status(404, "NotFound", "gone"));
    assert!(matches!(missing, TokenRequestError::NotFound { .. }));
    let unavailable =
        TokenRequestError::from_kube(&account, status(503, "ServiceUnavailable", "down"));
    assert_eq!(
        unavailable.to_string(),
        "serviceaccount a/b (TokenRequest, audiences: v): the API server answered 503 \
         ServiceUnavailable: down"
    );
    assert_eq!(unavailable.code(), Some(503));
    let refused =
        TokenRequestError::from_kube(&account, status(401, "Unauthorized", "Unauthorized"));
    assert!(matches!(refused, TokenRequestError::Unauthorized { .. }));
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
    assert_eq!(issued.token, secret);
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
