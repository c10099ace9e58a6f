//! No secret in any output: a full rotation scenario (watcher, timer, 401 retry, failing
//! reads; JWT, bootstrap and opaque tokens; tokens from the TokenRequest API over HTTPS,
//! with the requesting client's own token) runs with every `tracing` event at TRACE level
//! captured, and every public type's `Debug` and `Display` is captured too. No token, no
//! fragment of one longer than 8 bytes, and no JWT signature may appear anywhere. In a
//! process of its own (`support::alone`), because it installs the global subscriber.

use crate::support;

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bearer_reload::body::ReplayBody;
use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::token::TokenError;
use bearer_reload::{BearerLayer, Token, TokenStore};
use support::writers::{rename_over, truncate_and_write};

/// The store's default cap on a token: 64 KiB.
const DEFAULT_MAX_SIZE: usize = 64 * 1024;
use bytes::Bytes;
use http::{Request, StatusCode};
use http_body_util::Full;
use support::kube_api::{KubeApi, User};
use support::server::{AuthServer, http1_client, http2_client};
use support::token_request::{AudienceService, Mode, TokenApi};
use support::{Logs, eventually, random_bytes, random_hex, reload_after_write, wait_for_token};
use tower::{Layer, ServiceExt};

/// A service-account-shaped JWT with a random 256-byte signature; returns it and its
/// signature part.
fn jwt(n: u32) -> (String, String) {
    let header = URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","kid":"secrecy"}"#);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let payload = serde_json::json!({
        "aud": ["https://kubernetes.default.svc"],
        "iss": "https://kubernetes.default.svc",
        "sub": "system:serviceaccount:payments:api",
        "iat": now, "nbf": now, "exp": now + 3607 + u64::from(n),
        "jti": random_hex(16),
        "kubernetes.io": {
            "namespace": "payments",
            "serviceaccount": {"name": "api", "uid": random_hex(8)},
            "pod": {"name": "api-0", "uid": random_hex(8)},
            "warnafter": now + 3000,
        },
    });
    let payload = URL_SAFE_NO_PAD.encode(payload.to_string());
    let signature = URL_SAFE_NO_PAD.encode(random_bytes(256));
    (format!("{header}.{payload}.{signature}"), signature)
}

fn bootstrap() -> String {
    let hex = random_hex(11);
    format!("{}.{}", &hex[..6], &hex[6..22])
}

fn opaque() -> String {
    format!("opaque-{}", random_hex(24))
}

/// Secrets, and the rule: no 9-byte window of any of them may appear in the output. A
/// bootstrap token's id (6 bytes) and the dot after it are public; its secret is checked
/// as a whole token too.
#[derive(Default)]
struct Secrets(Vec<String>);

impl Secrets {
    fn add(&mut self, s: &str) {
        self.0.push(s.to_owned());
    }

    fn check(&self, output: &str) {
        assert!(output.len() > 1000, "too little output to mean anything");
        for secret in &self.0 {
            let bytes = secret.as_bytes();
            for w in bytes.windows(9) {
                let w = std::str::from_utf8(w).unwrap();
                if let Some(at) = output.find(w) {
                    let from = output[..at].rfind('\n').map_or(0, |i| i + 1);
                    let to = output[at..].find('\n').map_or(output.len(), |i| at + i);
                    panic!(
                        "a fragment {w:?} of a secret is shown: {}",
                        &output[from..to]
                    );
                }
            }
        }
    }
}

fn all_shown(out: &mut String, store: &TokenStore) {
    use std::fmt::Write as _;
    let t = store.current();
    let s = store.status();
    let _ = writeln!(
        out,
        "{t:?} {t:#?} {t} {:?} {:?} {:?} {}",
        t.subject(),
        t.fingerprint(),
        t.header_value(),
        t.fingerprint()
    );
    let _ = writeln!(out, "{store:?} {store:#?} {s:?} {s:#?}");
    if let Some(e) = &s.last_error {
        let _ = writeln!(out, "{e} {e:?} {}", support::chain(e));
    }
    let layer = BearerLayer::new(store.clone());
    let retrying = layer.clone().retry_unauthorized();
    let svc = retrying.layer(tower::service_fn(|_: Request<String>| async {
        Ok::<_, std::convert::Infallible>(http::Response::new(()))
    }));
    let _ = writeln!(out, "{layer:?} {retrying:?} {svc:?} {svc:#?}");
    let middleware = bearer_reload::reqwest::BearerMiddleware::new(store.clone())
        .retry_unauthorized()
        .overwrite_existing();
    let _ = writeln!(out, "{middleware:?} {middleware:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_secret_is_ever_logged_or_shown() {
    if !support::alone::in_own_process(module_path!(), "no_secret_is_ever_logged_or_shown") {
        return;
    }
    let capture = Logs::capture_globally();

    let mut secrets = Secrets::default();
    let mut shown = String::new();
    let tmp = tempfile::tempdir().unwrap();

    // 1. A projected volume with JWTs, rotated by the kubelet's swap; a 401 retry.
    let (jwt1, sig1) = jwt(1);
    let (jwt2, sig2) = jwt(2);
    for s in [&jwt1, &sig1, &jwt2, &sig2] {
        secrets.add(s);
    }
    let volume = ProjectedTokenDir::create(tmp.path().join("sa"), &jwt1).unwrap();
    let jwt_store = support::file(volume.token_path())
        .refresh_interval(Duration::from_secs(1))
        .load()
        .await
        .unwrap();
    all_shown(&mut shown, &jwt_store);

    // 2. A plain file: opaque, then bootstrap, then opaque; bad contents in between.
    let plain_dir = tmp.path().join("plain");
    std::fs::create_dir(&plain_dir).unwrap();
    let plain = plain_dir.join("token");
    let (op1, boot, op2) = (opaque(), bootstrap(), opaque());
    for s in [&op1, &op2] {
        secrets.add(s);
    }
    // A bootstrap token's id is public; its secret part, and the token, are not.
    secrets.add(&boot);
    secrets.add(&boot[7..]);
    std::fs::write(&plain, format!("{op1}\n")).unwrap();
    let plain_store = support::file(&plain)
        .refresh_interval(Duration::from_secs(1))
        .unauthorized_reload_interval(Duration::from_millis(1))
        .load()
        .await
        .unwrap();

    let server = AuthServer::start(&jwt1).await;
    server.accept_also(&op1);
    let jwt_client = BearerLayer::new(jwt_store.clone())
        .retry_unauthorized()
        .layer(http2_client::<Full<Bytes>>());
    let plain_client = BearerLayer::new(plain_store.clone())
        .retry_unauthorized()
        .layer(http1_client::<ReplayBody<Full<Bytes>>>());
    let get = || Request::get(server.url("/")).body(Full::default()).unwrap();
    let post = || {
        Request::post(server.url("/"))
            .body(ReplayBody::new(Full::new(Bytes::from_static(b"body"))))
            .unwrap()
    };
    assert_eq!(
        jwt_client.clone().oneshot(get()).await.unwrap().status(),
        StatusCode::OK
    );
    assert_eq!(
        plain_client.clone().oneshot(post()).await.unwrap().status(),
        StatusCode::OK
    );

    // The kubelet rotates; the server revokes the old JWT at once.
    server.accept_also(&jwt2);
    volume.rotate(&jwt2).unwrap();
    server.revoke(&jwt1);
    assert_eq!(
        jwt_client.clone().oneshot(get()).await.unwrap().status(),
        StatusCode::OK
    );
    wait_for_token(&jwt_store, &jwt2).await;
    all_shown(&mut shown, &jwt_store);

    // Failing reads: an empty file, a control byte between secret halves, an oversize
    // file, a missing file, a directory. The last good token stays.
    for bad in [
        String::new(),
        format!("{}\x07{}", &op2[..20], &op2[20..]),
        format!("{op2}{}", "x".repeat(DEFAULT_MAX_SIZE)),
    ] {
        truncate_and_write(&plain, &bad).unwrap();
        assert!(reload_after_write(|| plain_store.reload()).await.is_err());
        all_shown(&mut shown, &plain_store);
    }
    std::fs::remove_file(&plain).unwrap();
    assert!(reload_after_write(|| plain_store.reload()).await.is_err());
    std::fs::create_dir(&plain).unwrap();
    assert!(reload_after_write(|| plain_store.reload()).await.is_err());
    all_shown(&mut shown, &plain_store);
    std::fs::remove_dir(&plain).unwrap();

    // A bootstrap token written over it, revoked-then-rotated for a 401 retry.
    server.accept_also(&boot);
    rename_over(&plain, format!("{boot}\n")).unwrap();
    wait_for_token(&plain_store, &boot).await;
    all_shown(&mut shown, &plain_store);
    server.accept_also(&op2);
    server.revoke(&boot);
    // Written on disk without waiting for the watcher: the 401 may read it first.
    rename_over(&plain, &op2).unwrap();
    let res = plain_client.clone().oneshot(post()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    wait_for_token(&plain_store, &op2).await;
    // The timer fires a few times.
    let reads = plain_store.status().reads;
    eventually("three timer reads", || {
        plain_store.status().reads >= reads + 3
    })
    .await;
    all_shown(&mut shown, &plain_store);

    // A 401 for a token that is simply wrong: no retry.
    server.revoke(&op2);
    let res = plain_client.clone().oneshot(post()).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    // A custom loader, and errors from parsing directly.
    let loader_secret = opaque();
    secrets.add(&loader_secret);
    let bytes = loader_secret.clone().into_bytes();
    let loader = support::loader("vault-agent", move || {
        let bytes = bytes.clone();
        async move { Ok::<_, std::io::Error>(bytes) }
    });
    shown.push_str(&format!("{loader:?}\n"));
    let loaded = loader.load().await.unwrap();
    all_shown(&mut shown, &loaded);
    for input in [jwt2.as_bytes(), op1.as_bytes(), boot.as_bytes()] {
        let t = Token::parse(input).unwrap();
        shown.push_str(&format!("{t:?} {t:#?} {t} {:?}\n", t.subject()));
        let mut bad = input.to_vec();
        bad.insert(12, 0);
        let e: TokenError = Token::parse(&bad).unwrap_err();
        shown.push_str(&format!("{e} {e:?}\n"));
    }
    let body = ReplayBody::new(Full::new(Bytes::from(op1.clone())));
    shown.push_str(&format!("{body:?} {body:#?}\n"));
    let tf = support::file(&plain);
    shown.push_str(&format!("{tf:?}\n"));

    token_request_scenario(&mut secrets, &mut shown).await;

    drop((jwt_client, plain_client, jwt_store, plain_store, loaded));
    // Everything the stores started has ended (and logged its end) before the logs are read.
    eventually("every watch released", || {
        support::procfs::inotify_watches() == 0
    })
    .await;

    let logs = capture.text();
    // The scenario really ran: rotations, failures and retries were logged.
    for needle in [
        "token rotated",
        "token reload failed",
        "TRACE",
        "DEBUG",
        "TokenRequest answered",
    ] {
        assert!(logs.contains(needle), "no {needle:?} in the logs:\n{logs}");
    }
    println!(
        "secrecy: {} bytes of logs ({} lines), {} bytes of Debug/Display output, {} secrets",
        logs.len(),
        logs.lines().count(),
        shown.len(),
        secrets.0.len()
    );
    secrets.check(&logs);
    secrets.check(&shown);
}

/// Tokens from the TokenRequest API over HTTPS (kube's client at TRACE too): minted,
/// revoked and minted again on a 401, and the API's errors. The requester's own token is a
/// secret as well.
async fn token_request_scenario(secrets: &mut Secrets, shown: &mut String) {
    use bearer_reload::source::TokenRequestSource;
    use kube::config::{KubeConfigOptions, Kubeconfig};

    let api = KubeApi::start().await;
    let requester = opaque();
    secrets.add(&requester);
    api.accept_only(&requester);
    let tokens = TokenApi::install(&api, std::time::SystemTime::now);
    tokens.add_service_account("team-a", "payments");
    let user = User {
        token: Some(&requester),
        ..User::default()
    };
    let kubeconfig = Kubeconfig::read_from(api.kubeconfig_for(&user, "team-a")).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let source = |name: &str| {
        TokenRequestSource::new(client.clone(), name)
            .audience("vault")
            .expiration(Duration::from_secs(600))
    };
    let built = source("payments");
    shown.push_str(&format!("{built:?} {built:#?}\n"));
    let builder = TokenStore::builder(built);
    shown.push_str(&format!("{builder:?}\n"));
    let store = builder.load().await.unwrap();
    let minted = |store: &TokenStore, secrets: &mut Secrets| {
        let value = store.current().header_value().to_str().unwrap()[7..].to_owned();
        secrets.add(value.rsplit('.').next().unwrap());
        secrets.add(&value);
    };
    minted(&store, secrets);
    all_shown(shown, &store);

    // Revoked on the service: one 401, a new TokenRequest, the request retried.
    let vault = AudienceService::start(&tokens, "vault").await;
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client::<http_body_util::Empty<Bytes>>());
    tokens.recreate_service_account("team-a", "payments");
    let get = || {
        Request::get(vault.url("/v1/secret/data/app"))
            .body(http_body_util::Empty::new())
            .unwrap()
    };
    let res = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    minted(&store, secrets);
    all_shown(shown, &store);

    // The API's errors: an outage, a missing service account.
    tokens.set_mode(Mode::Fail(StatusCode::INTERNAL_SERVER_ERROR));
    let error = store.reload().await.unwrap_err();
    shown.push_str(&format!("{error} {error:?}\n"));
    all_shown(shown, &store);
    tokens.set_mode(Mode::Serve);
    let missing = TokenStore::builder(source("ghost"))
        .load()
        .await
        .unwrap_err();
    shown.push_str(&format!(
        "{missing} {missing:?} {}\n",
        support::chain(&missing)
    ));
    let invalid = TokenStore::builder(source("payments").expiration(Duration::from_secs(60)))
        .load()
        .await
        .unwrap_err();
    shown.push_str(&format!(
        "{invalid} {invalid:?} {}\n",
        support::chain(&invalid)
    ));
}
