//! The OAuth 2.0 test server (`tests/support/oauth2_server.rs`, oidc-provider in Node.js)
//! works end to end, with plain HTTPS requests: the grants, the client authentications,
//! introspection, revocation and the admin endpoints the OAuth 2.0 source's tests rely on.

use crate::support::oauth2_server;

use std::time::Duration;

use oauth2_server::{
    AuthServer, BASIC_CLIENT, CLUSTER_ISSUER, Credentials, JWT_CLIENT, POST_CLIENT, PUBLIC_CLIENT,
    RESOURCE, RESOURCE_SERVER, ServerConfig, SigningKey, TOKEN_TYPE_ACCESS_TOKEN, TokenFormat,
    cluster_key,
};

const MINUTE: Duration = Duration::from_secs(60);
const SA: &str = "system:serviceaccount:default:app";

async fn standard(ttl: u64) -> AuthServer {
    AuthServer::start(ServerConfig::standard(cluster_key()).ttl(ttl)).await
}

fn basic() -> Credentials<'static> {
    Credentials::Basic(BASIC_CLIENT.0, BASIC_CLIENT.1)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_credentials_with_basic_and_post_authentication() {
    let server = standard(3).await;
    assert!(server.issuer().starts_with("https://127.0.0.1:"));
    assert_eq!(
        server.token_endpoint(),
        format!("{}/token", server.issuer())
    );

    let reply = server.client_credentials(basic(), Some("read write")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(!reply.access_token().is_empty());
    assert_eq!(reply.expires_in(), Some(3), "{reply:?}");
    assert_eq!(reply.body["token_type"], "Bearer");
    assert_eq!(reply.body["scope"], "read write");

    let post = Credentials::Post(POST_CLIENT.0, POST_CLIENT.1);
    let reply = server.client_credentials(post, Some("read")).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.expires_in(), Some(3), "{reply:?}");
    let introspection = server.introspection(reply.access_token()).await;
    assert_eq!(introspection["active"], true);
    assert_eq!(introspection["client_id"], POST_CLIENT.0);
    assert_eq!(introspection["aud"], RESOURCE);
    assert_eq!(introspection["scope"], "read");

    // A scope the client may not have, a wrong secret, the post client sent as basic.
    let reply = server.client_credentials(post, Some("write")).await;
    assert_eq!((reply.status, reply.error()), (400, Some("invalid_scope")));
    let wrong = Credentials::Basic(BASIC_CLIENT.0, "wrong");
    let reply = server.client_credentials(wrong, None).await;
    assert_eq!((reply.status, reply.error()), (401, Some("invalid_client")));
    let as_basic = Credentials::Basic(POST_CLIENT.0, POST_CLIENT.1);
    let reply = server.client_credentials(as_basic, None).await;
    assert_eq!((reply.status, reply.error()), (401, Some("invalid_client")));

    // Another resource than the server's.
    let reply = server
        .token(
            basic(),
            &[
                ("grant_type", "client_credentials"),
                ("resource", "https://elsewhere.test"),
            ],
        )
        .await;
    assert_eq!((reply.status, reply.error()), (400, Some("invalid_target")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn private_key_jwt_assertions() {
    let server = standard(60).await;
    for audience in [server.issuer(), server.token_endpoint()] {
        let assertion = cluster_key().assertion(JWT_CLIENT, audience, MINUTE);
        let reply = server
            .client_credentials(Credentials::Assertion(JWT_CLIENT, &assertion), Some("read"))
            .await;
        assert_eq!(reply.status, 200, "aud {audience}: {reply:?}");
        assert!(server.introspect(reply.access_token()).await);

        // A jti is accepted once.
        let reply = server
            .client_credentials(Credentials::Assertion(JWT_CLIENT, &assertion), Some("read"))
            .await;
        assert_eq!((reply.status, reply.error()), (401, Some("invalid_client")));
    }

    // Signed by another key with the same kid; for another audience; expired.
    let stranger = SigningKey::es256("cluster");
    let forged = stranger.assertion(JWT_CLIENT, server.token_endpoint(), MINUTE);
    let elsewhere = cluster_key().assertion(JWT_CLIENT, "https://elsewhere.test", MINUTE);
    let now = oauth2_server::now_secs();
    let expired = cluster_key().sign(&serde_json::json!({
        "iss": JWT_CLIENT, "sub": JWT_CLIENT, "aud": server.issuer(),
        "iat": now - 600, "exp": now - 300, "jti": oauth2_server::random_id(),
    }));
    for assertion in [forged, elsewhere, expired] {
        let reply = server
            .client_credentials(Credentials::Assertion(JWT_CLIENT, &assertion), None)
            .await;
        assert_eq!(
            (reply.status, reply.error()),
            (401, Some("invalid_client")),
            "{reply:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn token_exchange_of_a_cluster_token() {
    let server = standard(5).await;
    let subject = cluster_key().subject_token(CLUSTER_ISSUER, SA, "oauth2", MINUTE);

    let reply = server.token_exchange(basic(), &subject, &[]).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body["issued_token_type"], TOKEN_TYPE_ACCESS_TOKEN);
    assert_eq!(reply.body["token_type"], "Bearer");
    assert_eq!(reply.expires_in(), Some(5));
    assert_eq!(reply.body["scope"], "read write");
    let introspection = server.introspection(reply.access_token()).await;
    assert_eq!(introspection["active"], true, "{introspection}");
    assert_eq!(introspection["sub"], SA);
    assert_eq!(introspection["client_id"], BASIC_CLIENT.0);
    assert_eq!(introspection["aud"], RESOURCE);

    // With a narrower scope, the resource and the audience named, by a private_key_jwt
    // client and by a public one.
    let assertion = cluster_key().assertion(JWT_CLIENT, server.token_endpoint(), MINUTE);
    let extra = [
        ("scope", "read"),
        ("resource", RESOURCE),
        ("audience", RESOURCE),
    ];
    let reply = server
        .token_exchange(
            Credentials::Assertion(JWT_CLIENT, &assertion),
            &subject,
            &extra,
        )
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert_eq!(reply.body["scope"], "read");
    let reply = server
        .token_exchange(Credentials::Public(PUBLIC_CLIENT), &subject, &[])
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(server.introspect(reply.access_token()).await);

    // A client without the grant.
    let post = Credentials::Post(POST_CLIENT.0, POST_CLIENT.1);
    let reply = server.token_exchange(post, &subject, &[]).await;
    assert_eq!(reply.status, 400, "{reply:?}");

    // Subject tokens signed by a stranger, from another issuer, expired, not a JWT.
    let stranger = SigningKey::es256("cluster");
    let now = oauth2_server::now_secs();
    let invalid = [
        stranger.subject_token(CLUSTER_ISSUER, SA, "oauth2", MINUTE),
        cluster_key().subject_token("https://elsewhere.test", SA, "oauth2", MINUTE),
        cluster_key().sign(&serde_json::json!({
            "iss": CLUSTER_ISSUER, "sub": SA, "aud": "oauth2", "iat": now - 600, "exp": now - 300,
        })),
        "not-a-jwt".to_owned(),
    ];
    for subject in invalid {
        let reply = server.token_exchange(basic(), &subject, &[]).await;
        assert_eq!(
            (reply.status, reply.error()),
            (400, Some("invalid_grant")),
            "{reply:?}"
        );
        assert!(
            reply
                .error_description()
                .is_some_and(|d| d.starts_with("subject_token is invalid")),
            "{reply:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn introspection_revocation_and_revoke_all() {
    let server = standard(60).await;
    let first = server.client_credentials(basic(), Some("read")).await;
    let first = first.access_token();
    let second = server.client_credentials(basic(), Some("read")).await;
    let second = second.access_token();
    let subject = cluster_key().subject_token(CLUSTER_ISSUER, SA, "oauth2", MINUTE);
    let exchanged = server.token_exchange(basic(), &subject, &[]).await;
    let exchanged = exchanged.access_token();
    assert!(server.introspect(first).await);
    assert!(server.introspect(second).await);
    assert!(server.introspect(exchanged).await);
    assert!(!server.introspect("never-issued").await);

    // RFC 7009: by its client; another client may not.
    let other = Credentials::Post(POST_CLIENT.0, POST_CLIENT.1);
    let reply = server.revoke(other, first).await;
    assert_eq!(
        (reply.status, reply.error()),
        (400, Some("invalid_request"))
    );
    assert!(server.introspect(first).await);
    let reply = server.revoke(basic(), first).await;
    assert_eq!(reply.status, 200, "{reply:?}");
    assert!(!server.introspect(first).await);
    assert!(server.introspect(second).await);

    // At the server, without the client.
    assert_eq!(server.revoke_all().await, 2);
    assert!(!server.introspect(second).await);
    assert!(!server.introspect(exchanged).await);
    let fresh = server.client_credentials(basic(), None).await;
    assert!(server.introspect(fresh.access_token()).await);

    // The resource server sees other clients' tokens; another client sees only its own.
    let (rs, rs_secret) = RESOURCE_SERVER;
    let reply = server
        .post_form(
            server.introspection_endpoint(),
            Credentials::Basic(rs, rs_secret),
            &[("token", fresh.access_token())],
        )
        .await;
    assert_eq!(reply.body["active"], true, "{reply:?}");
    let reply = server
        .post_form(
            server.introspection_endpoint(),
            other,
            &[("token", fresh.access_token())],
        )
        .await;
    assert_eq!(reply.body["active"], false, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotated_secret_replaces_the_old_one() {
    let server = standard(60).await;
    let reply = server.client_credentials(basic(), None).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    server.rotate_secret(BASIC_CLIENT.0, "rotated-secret").await;
    let reply = server.client_credentials(basic(), None).await;
    assert_eq!(
        (reply.status, reply.error()),
        (401, Some("invalid_client")),
        "{reply:?}"
    );
    let rotated = Credentials::Basic(BASIC_CLIENT.0, "rotated-secret");
    let reply = server.client_credentials(rotated, Some("write")).await;
    assert_eq!(reply.status, 200, "{reply:?}");

    // And for a client_secret_post client.
    server.rotate_secret(POST_CLIENT.0, "post 2").await;
    let old = Credentials::Post(POST_CLIENT.0, POST_CLIENT.1);
    let reply = server.client_credentials(old, None).await;
    assert_eq!((reply.status, reply.error()), (401, Some("invalid_client")));
    let new = Credentials::Post(POST_CLIENT.0, "post 2");
    let reply = server.client_credentials(new, None).await;
    assert_eq!(reply.status, 200, "{reply:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stats_count_every_token_request_and_set_ttl_applies() {
    let server = standard(3).await;
    assert_eq!(server.stats().await, oauth2_server::Stats::default());

    for _ in 0..3 {
        let reply = server.client_credentials(basic(), None).await;
        assert_eq!(reply.expires_in(), Some(3));
    }
    server.set_ttl(7).await;
    let reply = server.client_credentials(basic(), None).await;
    assert_eq!(reply.expires_in(), Some(7), "{reply:?}");
    let reply = server
        .client_credentials(Credentials::Basic(BASIC_CLIENT.0, "wrong"), None)
        .await;
    assert_eq!(reply.status, 401);
    let post = Credentials::Post(POST_CLIENT.0, POST_CLIENT.1);
    server.client_credentials(post, None).await.access_token();
    let assertion = cluster_key().assertion(JWT_CLIENT, server.issuer(), MINUTE);
    let reply = server
        .client_credentials(Credentials::Assertion(JWT_CLIENT, &assertion), None)
        .await;
    assert_eq!(reply.status, 200, "{reply:?}");
    let reply = server
        .token(Credentials::None, &[("grant_type", "client_credentials")])
        .await;
    assert_eq!(reply.status, 400, "{reply:?}");

    let stats = server.stats().await;
    assert_eq!(stats.requests_of(BASIC_CLIENT.0), 5, "{stats:?}");
    assert_eq!(stats.failures_of(BASIC_CLIENT.0), 1, "{stats:?}");
    assert_eq!(stats.requests_of(POST_CLIENT.0), 1, "{stats:?}");
    assert_eq!(stats.requests_of(JWT_CLIENT), 1, "{stats:?}");
    assert_eq!(stats.requests_of(""), 1, "{stats:?}");
    assert_eq!(stats.token_requests_total, 8);
    assert_eq!(stats.failed_token_requests, 2);
    assert_eq!(stats.introspection_requests, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jwt_access_tokens_are_not_introspectable() {
    let config = ServerConfig::standard(cluster_key()).format(TokenFormat::Jwt);
    let server = AuthServer::start(config).await;
    let reply = server.client_credentials(basic(), Some("read")).await;
    let token = reply.access_token();
    assert_eq!(token.split('.').count(), 3, "a JWT");
    let reply = server
        .post_form(
            server.introspection_endpoint(),
            Credentials::Basic(RESOURCE_SERVER.0, RESOURCE_SERVER.1),
            &[("token", token)],
        )
        .await;
    assert_eq!(
        (reply.status, reply.error()),
        (400, Some("unsupported_token_type")),
        "{reply:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_server_exits_when_its_stdin_closes() {
    let server = AuthServer::start(ServerConfig::default()).await;
    assert!(
        server.stop().await,
        "the server exits by itself, successfully"
    );
}
