use std::error::Error as _;
use std::time::Duration;

use http::StatusCode;

use super::auth::{JWT_BEARER, basic, read_token_file};
use super::request::{Form, parse, read_answer};
use super::*;
use crate::source::{FetchContext, TokenSource};

/// The room for a pair is made before it is written, for its worst case (every byte
/// `%XX`) beside what is there, and at least double the length: the buffer, which holds
/// a client secret, never grows by itself (a `String`'s growth frees the old one unwiped).
/// So its capacity after each pair is the room made for it.
#[test]
fn the_form_makes_room_for_each_pair_before_writing_it() {
    let mut form = Form::default();
    let mut capacities = Vec::new();
    for (name, value) in [("a", "\u{1}"), ("b", "c"), ("d", ""), ("e", ""), ("f", "")] {
        form.push(name, value);
        capacities.push(form.capacity());
    }
    assert_eq!(form.as_str(), "a=%01&b=c&d=&e=&f=");
    // 0 + 2 + 3 * 2 = 8; 5 + 2 + 3 * 2 = 13; 9 + 2 + 3 = 14, doubled 18; 15 + 2 + 3 = 20,
    // doubled 30 (the fourth pair fits the 18).
    assert_eq!(capacities, [8, 13, 18, 18, 30]);

    // Room that is just enough is enough: 11 + 2 + 3 = 16 fits the 16 made before.
    let mut form = Form::default();
    let mut capacities = Vec::new();
    for (name, value) in [("k", "\u{1}\u{1}"), ("d", ""), ("e", "")] {
        form.push(name, value);
        capacities.push(form.capacity());
    }
    assert_eq!(form.as_str(), "k=%01%01&d=&e=");
    assert_eq!(capacities, [11, 16, 16]);
}

#[test]
fn the_form_is_urlencoded_as_rfc_6749_appendix_b_says() {
    let mut form = Form::default();
    form.push("grant_type", "client_credentials");
    form.push("scope", "read write");
    form.push("resource", "https://api.example/a?b=c&d");
    form.push("client_secret", "ä+/%~");
    assert_eq!(
        form.as_str(),
        "grant_type=client_credentials&scope=read+write\
         &resource=https%3A%2F%2Fapi.example%2Fa%3Fb%3Dc%26d\
         &client_secret=%C3%A4%2B%2F%25%7E"
    );
    // Debug names the fields, not the values.
    let shown = format!("{form:?}");
    assert_eq!(
        shown,
        r#"["grant_type", "scope", "resource", "client_secret"]"#
    );
}

#[test]
fn basic_credentials_are_urlencoded_then_base64_and_sensitive() {
    // RFC 6749 §2.3.1: each part form-urlencoded before the Basic encoding.
    let value = basic("my client", "s:e/c");
    assert!(value.is_sensitive());
    let encoded = value.to_str().unwrap().strip_prefix("Basic ").unwrap();
    use base64::Engine as _;
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .unwrap();
    assert_eq!(decoded, b"my+client:s%3Ae%2Fc");
}

#[test]
fn a_token_response_gives_the_token_and_its_lifetime() {
    let body = br#"{"access_token":"tok","token_type":"bearer","expires_in":300,"scope":"read"}"#;
    let issued = parse(StatusCode::OK, body).unwrap();
    assert_eq!(issued.access_token.as_str(), "tok");
    assert_eq!(issued.expires_in, Some(Duration::from_secs(300)));
    // Debug shows the token's length.
    let shown = format!("{issued:?}");
    assert!(
        shown.contains("<3 bytes>") && !shown.contains("tok\""),
        "{shown}"
    );

    // No expires_in (or zero): kept until a 401. A string of seconds is read too.
    let body = br#"{"access_token":"tok","token_type":"Bearer"}"#;
    assert_eq!(parse(StatusCode::OK, body).unwrap().expires_in, None);
    let body = br#"{"access_token":"tok","token_type":"BEARER","expires_in":0}"#;
    assert_eq!(parse(StatusCode::OK, body).unwrap().expires_in, None);
    let body = br#"{"access_token":"tok","token_type":"Bearer","expires_in":"60"}"#;
    assert_eq!(
        parse(StatusCode::OK, body).unwrap().expires_in,
        Some(Duration::from_secs(60))
    );
    // A fraction of a second is dropped; a negative lifetime is no lifetime.
    let body = br#"{"access_token":"tok","token_type":"Bearer","expires_in":3600.5}"#;
    assert_eq!(
        parse(StatusCode::OK, body).unwrap().expires_in,
        Some(Duration::from_secs(3600))
    );
    let body = br#"{"access_token":"tok","token_type":"Bearer","expires_in":-1.5}"#;
    assert!(parse(StatusCode::OK, body).is_err());
}

#[test]
fn a_lifetime_past_what_the_clock_holds_is_a_bad_answer() {
    use super::request::MAX_EXPIRES_IN;
    let body = |expires_in: &str| {
        format!(
            r#"{{"access_token":"secret-tok","token_type":"Bearer","expires_in":{expires_in}}}"#
        )
    };
    let now = std::time::SystemTime::now();
    // 1e30 seconds was added to the time of sending with `+`: a panic.
    for expires_in in [
        "1e30",
        "18446744073709551615",
        "4294967297",
        "\"1e30\"",
        "\"4294967297\"",
    ] {
        let err = match parse(StatusCode::OK, body(expires_in).as_bytes()) {
            Ok(issued) => issued.fetched(now).unwrap_err(),
            Err(e) => e,
        };
        assert!(
            matches!(err, super::Error::Response { .. }),
            "{expires_in}: {err:?}"
        );
        assert!(err.to_string().contains("expires_in"), "{err}");
        assert!(!format!("{err} {err:?}").contains("secret-tok"));
    }
    // 2^32 seconds is taken, counted from the time of sending.
    let issued = parse(StatusCode::OK, body("4294967296").as_bytes()).unwrap();
    assert_eq!(issued.expires_in, Some(MAX_EXPIRES_IN));
    let fetched = issued.fetched(now).unwrap();
    assert_eq!(fetched.expires_at(), Some(now + MAX_EXPIRES_IN));
    // Sent at the end of what the clock holds, even a minute is too far.
    let mut far = std::time::UNIX_EPOCH;
    let mut step = Duration::from_secs(1 << 62);
    while !step.is_zero() {
        far = far.checked_add(step).unwrap_or(far);
        step /= 2;
    }
    let issued = parse(StatusCode::OK, body("60").as_bytes()).unwrap();
    let err = issued.fetched(far).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the token endpoint's answer has an expires_in past what the system clock holds"
    );
}

#[tokio::test]
async fn an_answer_is_read_whole_up_to_a_mebibyte() {
    let body = |len: usize| http_body_util::Full::new(bytes::Bytes::from(vec![b' '; len]));
    assert_eq!(read_answer(body(1 << 20)).await.unwrap().len(), 1 << 20);
    let err = read_answer(body((1 << 20) + 1)).await.unwrap_err();
    assert!(matches!(err, super::Error::Transport { .. }), "{err:?}");
}

#[test]
fn bad_token_responses_are_named_without_quoting_them() {
    let cases: [(&[u8], &str); 6] = [
        (b"<html>secret-looking</html>", "is not a JSON object"),
        (br#"{"token_type":"Bearer"}"#, "has no access_token"),
        (
            br#"{"access_token":"","token_type":"Bearer"}"#,
            "has no access_token",
        ),
        (br#"{"access_token":"secret-tok"}"#, "has no token_type"),
        (
            br#"{"access_token":"secret-tok","token_type":"Bearer","expires_in":"soon"}"#,
            "has an expires_in that is not a number of seconds",
        ),
        (
            br#"{"access_token":"secret-tok","token_type":"Bearer","expires_in":[1]}"#,
            "has an expires_in that is not a number of seconds",
        ),
    ];
    for (body, problem) in cases {
        let err = parse(StatusCode::OK, body).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("the token endpoint's answer {problem}")
        );
        assert!(!format!("{err:?}").contains("secret"), "{err:?}");
    }
    let body = br#"{"access_token":"secret-tok","token_type":"DPoP"}"#;
    let err = parse(StatusCode::OK, body).unwrap_err();
    assert_eq!(
        err.to_string(),
        r#"the token endpoint issued a token of type "DPoP", not Bearer"#
    );
    assert!(!format!("{err:?}").contains("secret-tok"));
}

#[test]
fn error_responses_map_to_their_code_and_description() {
    let body = br#"{"error":"invalid_client","error_description":"client authentication failed"}"#;
    let err = parse(StatusCode::UNAUTHORIZED, body).unwrap_err();
    assert_eq!(
        err.to_string(),
        "the token endpoint answered invalid_client (HTTP 401): client authentication failed"
    );
    assert_eq!(err.oauth_error(), Some("invalid_client"));
    assert_eq!(err.status(), Some(StatusCode::UNAUTHORIZED));

    for code in [
        "invalid_scope",
        "unauthorized_client",
        "invalid_grant",
        "invalid_target",
    ] {
        let body = format!(r#"{{"error":"{code}"}}"#);
        let err = parse(StatusCode::BAD_REQUEST, body.as_bytes()).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!("the token endpoint answered {code} (HTTP 400)")
        );
        assert_eq!(err.oauth_error(), Some(code));
    }

    // Not an OAuth 2.0 error: the status alone, never the body.
    let err = parse(StatusCode::BAD_GATEWAY, b"<html>upstream secret</html>").unwrap_err();
    assert_eq!(err.to_string(), "the token endpoint answered HTTP 502");
    assert_eq!(err.status(), Some(StatusCode::BAD_GATEWAY));
    assert_eq!(err.oauth_error(), None);
    assert!(!format!("{err:?}").contains("secret"));

    // A description with control characters, and a long one, is cleaned and cut.
    let long = "x".repeat(2000);
    let body =
        format!(r#"{{"error":"invalid_request\n","error_description":"a\u001b[31m{long}"}}"#);
    let err = parse(StatusCode::BAD_REQUEST, body.as_bytes()).unwrap_err();
    let Error::OAuth {
        code, description, ..
    } = &err
    else {
        panic!("{err:?}");
    };
    assert_eq!(code, "invalid_request");
    let description = description.as_deref().unwrap();
    assert_eq!(description.chars().count(), 512);
    assert!(description.starts_with("a[31mxxx"), "{description}");
}

/// A CA bundle store of one generated CA.
async fn roots() -> crate::tls::RootStore {
    let pem = crate::test_support::pki::Ca::new("idp").pem();
    crate::tls::RootStore::builder(crate::test_support::pem("ca", pem))
        .load()
        .await
        .unwrap()
}

#[tokio::test]
async fn debug_shows_neither_secrets_nor_assertions() {
    let endpoint: http::Uri = "https://idp.test/token".parse().unwrap();
    for auth in [
        ClientAuth::client_secret_basic("hunter2-secret"),
        ClientAuth::client_secret_post("hunter2-secret"),
    ] {
        let source =
            ClientCredentials::new(endpoint.clone(), "svc", auth, roots().await).scope("read");
        let shown = format!("{source:?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("<14 bytes>"), "{shown}");
        assert!(
            shown.contains("svc") && shown.contains("https://idp.test/token"),
            "{shown}"
        );
        assert_eq!(
            source.describe(),
            "oauth2 client-credentials svc at https://idp.test/token"
        );
        // Its documented time limit: a remote server, a handshake, a cold start.
        assert_eq!(source.default_fetch_timeout().as_secs(), 30);
    }
    let auth = ClientAuth::client_assertion_file("/run/assertion");
    assert_eq!(format!("{auth:?}"), "client_assertion_file(/run/assertion)");
    assert_eq!(format!("{:?}", ClientAuth::none()), "none");
}

#[tokio::test]
async fn an_exchange_shows_its_subjects_source_never_its_token() {
    let endpoint: http::Uri = "https://idp.test/token".parse().unwrap();
    let subject = crate::test_support::loader("subject", || async {
        Ok::<_, std::io::Error>(b"subject-token-secret".to_vec())
    })
    .load()
    .await
    .unwrap();
    let auth = ClientAuth::client_secret_post("hunter2-secret");
    let exchange = TokenExchange::new(endpoint, "app", auth, roots().await, subject);
    let shown = format!("{exchange:?}");
    assert!(!shown.contains("hunter2"), "{shown}");
    assert!(!shown.contains("subject-token-secret"), "{shown}");
    assert!(
        shown.contains("loader subject") && shown.contains(super::exchange::TOKEN_TYPE_JWT),
        "{shown}"
    );
    assert_eq!(
        exchange.describe(),
        "oauth2 token-exchange app at https://idp.test/token"
    );
    assert_eq!(exchange.default_fetch_timeout().as_secs(), 30);
}

#[tokio::test]
async fn an_http_endpoint_fails_before_any_request() {
    let plain = ClientCredentials::new(
        "http://idp.test/token".parse().unwrap(),
        "svc",
        ClientAuth::client_secret_post("s"),
        roots().await,
    );
    let err = plain.fetch(FetchContext::default()).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the token endpoint http://idp.test/token is not an https:// URI"
    );
}

#[tokio::test]
async fn token_files_are_read_whole_trimmed_and_checked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("assertion");

    let err = read_token_file("client assertion", &path)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("cannot read the client assertion file {}", path.display())
    );
    assert!(err.source().is_some());

    std::fs::write(&path, " \n").unwrap();
    let err = read_token_file("client assertion", &path)
        .await
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        format!("the client assertion file {} is empty", path.display())
    );

    std::fs::write(&path, "aaa.bbb.ccc\nddd.eee.fff\n").unwrap();
    let err = read_token_file("client assertion", &path)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("more than one token"), "{err}");
    assert!(!format!("{err:?}").contains("aaa"), "{err:?}");

    std::fs::write(&path, "aaa.bbb.ccc\n").unwrap();
    assert_eq!(
        read_token_file("client assertion", &path)
            .await
            .unwrap()
            .as_str(),
        "aaa.bbb.ccc"
    );
    // Up to 64 KiB, as a projected token file may be; a byte more is refused.
    let long = "a".repeat(64 * 1024);
    std::fs::write(&path, &long).unwrap();
    assert_eq!(
        *read_token_file("client assertion", &path).await.unwrap(),
        long
    );
    std::fs::write(&path, format!("{long}a")).unwrap();
    let err = read_token_file("client assertion", &path)
        .await
        .unwrap_err();
    assert!(err.to_string().contains("larger than 64 KiB"), "{err}");
    assert_eq!(
        JWT_BEARER,
        "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"
    );
}
