//! `bearer_reload::kube` for users whose credential is a client certificate (feature
//! `tls`): kubeconfig `client-certificate`/`client-key` files, and an exec plugin that
//! returns `clientCertificateData`, against an HTTPS server that requires client
//! certificates and refuses the old one at each rotation.

use crate::support;

use std::path::Path;

use bearer_reload::kube::Credentials;
use bearer_reload::testing::ProjectedTokenDir;
use http::StatusCode;
use kube::client::Body;
use serde_json::json;
use support::exec_plugin::{API_VERSION, Plugin};
use support::kube_client as client;
use support::mtls::{MtlsServer, PRESENTED};
use support::pki::{Ca, Issued};
use support::proxy::{HttpProxy, SocksProxy};
use support::rotate_identity;
use support::stalled::Stalled;

const HOUR: std::time::Duration = std::time::Duration::from_secs(3600);

/// A kubeconfig for `server` whose user is `user` (YAML), its CA in a file beside it.
fn kubeconfig(
    dir: &Path,
    ca: &Ca,
    server: &MtlsServer,
    user: serde_json::Value,
) -> std::path::PathBuf {
    let ca_path = dir.join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let cluster = json!({"server": server.url(""), "certificate-authority": ca_path});
    kubeconfig_with(dir, cluster, user)
}

/// A kubeconfig in `dir` whose only context is `cluster` and `user`.
fn kubeconfig_with(
    dir: &Path,
    cluster: serde_json::Value,
    user: serde_json::Value,
) -> std::path::PathBuf {
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "c", "cluster": cluster}],
        "users": [{"name": "u", "user": user}],
        "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
        "current-context": "x",
    });
    let path = dir.join("kubeconfig");
    std::fs::write(&path, doc.to_string()).unwrap();
    path
}

/// A user whose certificate and key are the files of `volume`.
fn identity_files(volume: &ProjectedTokenDir) -> serde_json::Value {
    json!({
        "client-certificate": volume.dir().join("tls.crt"),
        "client-key": volume.dir().join("tls.key"),
    })
}

/// A user whose credential `plugin` prints.
fn exec_user(plugin: &Plugin) -> serde_json::Value {
    json!({"exec": {
        "apiVersion": API_VERSION,
        "command": plugin.command(),
        "interactiveMode": "Never",
    }})
}

/// What [`Credentials::infer_config`] makes of the kubeconfig: kube's config and its CA
/// file as `root_cert_file`.
async fn config(path: &Path, dir: &Path) -> kube::Config {
    let mut config = support::kube_config(path).await;
    config.root_cert_file = Some(dir.join("ca.crt"));
    config
}

/// A GET through `client`: the status and the fingerprint of the certificate it arrived
/// with.
async fn get(client: &kube::Client) -> (StatusCode, String) {
    let request = http::Request::get("/").body(Body::empty()).unwrap();
    let response = client.send(request).await.unwrap();
    let presented = response.headers()[PRESENTED].to_str().unwrap().to_owned();
    (response.status(), presented)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_users_certificate_files_rotate_under_the_same_client() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let first = ca.client("jane", HOUR);
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &first);
    let path = kubeconfig(tmp.path(), &ca, &server, identity_files(&volume));
    let client = client(config(&path, tmp.path()).await).await.unwrap();
    assert_eq!(get(&client).await, (StatusCode::OK, first.fingerprint()));

    // The server refuses the old certificate the moment the new one is written: the next
    // request on the client already built arrives with the new one.
    for _ in 0..3 {
        let next = ca.client("jane", HOUR);
        rotate_identity(&volume, &next);
        server.refuse(&server.arrivals().last().unwrap().fingerprint);
        assert_eq!(get(&client).await, (StatusCode::OK, next.fingerprint()));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_plugins_certificate_is_presented_and_reloaded_on_a_refusal() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let plugin = Plugin::new();
    let issue = |issued: &Issued| {
        let status = json!({
            "clientCertificateData": issued.cert_pem,
            "clientKeyData": issued.key_pem,
        });
        let doc = json!({"kind": "ExecCredential", "apiVersion": API_VERSION, "status": status});
        plugin.print(&doc.to_string());
    };
    let first = ca.client("jane", HOUR);
    issue(&first);
    let path = kubeconfig(tmp.path(), &ca, &server, exec_user(&plugin));
    let config = config(&path, tmp.path()).await;
    let credentials = Credentials::load(&config).await.unwrap();
    let client = credentials.client(config).unwrap();
    assert_eq!(get(&client).await, (StatusCode::OK, first.fingerprint()));
    // Once while loading: kube never ran it (it would, while building its client).
    assert_eq!(plugin.runs(), 1);

    let next = ca.client("jane", HOUR);
    issue(&next);
    server.refuse(&first.fingerprint());
    assert_eq!(get(&client).await, (StatusCode::OK, next.fingerprint()));
    assert_eq!(plugin.runs(), 2, "one run for the refusal");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_exec_plugins_token_and_certificate_come_from_one_run() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let plugin = Plugin::new();
    let issue = |token: &str, issued: &Issued| {
        let status = json!({
            "token": token,
            "clientCertificateData": issued.cert_pem,
            "clientKeyData": issued.key_pem,
        });
        let doc = json!({"kind": "ExecCredential", "apiVersion": API_VERSION, "status": status});
        plugin.print(&doc.to_string());
    };
    let first = ca.client("jane", HOUR);
    issue("token-1", &first);
    let path = kubeconfig(tmp.path(), &ca, &server, exec_user(&plugin));
    let config = config(&path, tmp.path()).await;
    let credentials = Credentials::load(&config).await.unwrap();
    // Both stores loaded from the one run, as kube uses both.
    assert_eq!(plugin.runs(), 1);
    let client = credentials.client(config).unwrap();
    assert_eq!(get(&client).await, (StatusCode::OK, first.fingerprint()));
    let arrival = server.arrivals().pop().unwrap();
    assert_eq!(arrival.authorization.as_deref(), Some("Bearer token-1"));

    // A 401 refuses the request's credentials, which cannot be told apart: both stores
    // read the plugin again (one run each), and the request goes again once, with both
    // new ones.
    let next = ca.client("jane", HOUR);
    issue("token-2", &next);
    server.refuse(&first.fingerprint());
    assert_eq!(get(&client).await, (StatusCode::OK, next.fingerprint()));
    assert_eq!(plugin.runs(), 3, "one run for each store after the refusal");
    let arrival = server.arrivals().pop().unwrap();
    assert_eq!(arrival.authorization.as_deref(), Some("Bearer token-2"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_identity_without_a_bundle_is_an_error_that_says_so() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let pem = tmp.path().join("client.pem");
    std::fs::write(&pem, ca.client("jane", HOUR).combined()).unwrap();
    let identity =
        bearer_reload::tls::IdentityStore::builder(bearer_reload::source::FileSource::new(&pem))
            .load()
            .await
            .unwrap();
    let config = kube::Config::new("https://localhost:1".parse().unwrap());
    let Err(err) = Credentials::default().identity(identity).client(config) else {
        panic!("a client without a bundle");
    };
    assert!(err.to_string().contains("needs a CA bundle"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_users_certificate_data_is_presented() {
    use base64::Engine as _;
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let issued = ca.client("jane", HOUR);
    let data = |pem: &str| base64::engine::general_purpose::STANDARD.encode(pem);
    let path = kubeconfig(
        tmp.path(),
        &ca,
        &server,
        json!({
            "client-certificate-data": data(&issued.cert_pem),
            "client-key-data": data(&issued.key_pem),
        }),
    );
    let client = client(config(&path, tmp.path()).await).await.unwrap();
    assert_eq!(get(&client).await, (StatusCode::OK, issued.fingerprint()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificate_files_rotate_when_the_ca_is_inline() {
    use base64::Engine as _;
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let first = ca.client("jane", HOUR);
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &first);
    // No CA file to watch, no token: the certificate files alone make the stores.
    let cluster = json!({
        "server": server.url(""),
        "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca.pem()),
    });
    let path = kubeconfig_with(tmp.path(), cluster, identity_files(&volume));
    let config = support::kube_config(&path).await;
    assert!(config.root_cert_file.is_none());
    let client = client(config).await.unwrap();
    assert_eq!(get(&client).await, (StatusCode::OK, first.fingerprint()));

    let next = ca.client("jane", HOUR);
    rotate_identity(&volume, &next);
    server.refuse(&first.fingerprint());
    assert_eq!(get(&client).await, (StatusCode::OK, next.fingerprint()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_that_skips_server_verification_keeps_it_skipped() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    // A server certificate no CA of the kubeconfig signed.
    let server = MtlsServer::start(&ca, &Ca::new("elsewhere").server()).await;
    let issued = ca.client("jane", HOUR);
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &issued);
    let cluster = json!({"server": server.url(""), "insecure-skip-tls-verify": true});
    let path = kubeconfig_with(tmp.path(), cluster, identity_files(&volume));
    let config = support::kube_config(&path).await;
    assert!(config.accept_invalid_certs);
    // kube's own TLS, as the kubeconfig asks: no verification of the server.
    let client = client(config).await.unwrap();
    assert_eq!(get(&client).await, (StatusCode::OK, issued.fingerprint()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_built_identity_and_bundle_stores_are_the_clients_tls() {
    use bearer_reload::source::FileSource;
    use bearer_reload::tls::{IdentityStore, RootStore};
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let issued = ca.client("jane", HOUR);
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &issued);
    let bundle = tmp.path().join("ca.crt");
    std::fs::write(&bundle, ca.pem()).unwrap();
    let identity = IdentityStore::files(volume.dir().join("tls.crt"), volume.dir().join("tls.key"))
        .load()
        .await
        .unwrap();
    let roots = RootStore::builder(FileSource::new(&bundle))
        .load()
        .await
        .unwrap();
    // The config names no certificate at all: the stores are the only ones.
    let config = kube::Config::new(server.url("").parse().unwrap());
    let client = Credentials::default()
        .identity(identity)
        .roots(roots)
        .client(config)
        .unwrap();
    assert_eq!(get(&client).await, (StatusCode::OK, issued.fingerprint()));

    // The certificate rotates and the server refuses the old one: the same client
    // presents the new one.
    let next = ca.client("jane", HOUR);
    rotate_identity(&volume, &next);
    server.refuse(&issued.fingerprint());
    assert_eq!(get(&client).await, (StatusCode::OK, next.fingerprint()));
}

/// A kubeconfig user's certificate files and an exec plugin's certificate go through the
/// identity parser of `IdentityStore`: an ECDSA P-521 key (a pod certificate's `ECDSAP521`)
/// that the provider in use (ring, installed here for kube) cannot sign with fails
/// `Credentials::load`, naming the file or the plugin, the key type and aws-lc-rs; never a
/// client that fails at its first handshake.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_p521_certificate_a_ring_build_cannot_sign_with_fails_at_load_naming_aws_lc_rs() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let jane = ca.client_with_key("jane", HOUR, support::key_types::generate("ECDSAP521"));
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &jane);
    let plugin = Plugin::new();
    let status = json!({"clientCertificateData": jane.cert_pem, "clientKeyData": jane.key_pem});
    let doc = json!({"kind": "ExecCredential", "apiVersion": API_VERSION, "status": status});
    plugin.print(&doc.to_string());

    let files = identity_files(&volume);
    for (user, names) in [
        (files, volume.dir().join("tls.key")),
        (exec_user(&plugin), plugin.command().to_owned()),
    ] {
        let path = kubeconfig(tmp.path(), &ca, &server, user);
        let config = config(&path, tmp.path()).await;
        let err = Credentials::load(&config).await.unwrap_err();
        let shown = support::chain(&err);
        assert!(shown.contains(&names.display().to_string()), "{shown}");
        assert!(
            shown.contains("the private key (ECDSA P-521) is of a type")
                && shown.contains("cannot sign with: aws-lc-rs can (enable feature `aws-lc-rs`"),
            "{shown}"
        );
    }
}

/// Whether `error` or one of its causes is an `io::Error` of kind `TimedOut`.
fn timed_out(error: &(dyn std::error::Error + 'static)) -> bool {
    let mut next = Some(error);
    while let Some(e) = next {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|e| e.kind() == std::io::ErrorKind::TimedOut)
        {
            return true;
        }
        next = e.source();
    }
    false
}

/// A GET through `client` to a server that stalls: how long until it failed, which it
/// must do within the deadline, with a timeout.
async fn stalled_get(client: &kube::Client) -> std::time::Duration {
    let start = std::time::Instant::now();
    let request = http::Request::get("/version").body(Body::empty()).unwrap();
    let sent = tokio::time::timeout(support::DEADLINE, client.send(request)).await;
    let error = match sent {
        Err(_) => panic!("no answer within {:?}", support::DEADLINE),
        Ok(Ok(response)) => panic!("a stalled server answered {}", response.status()),
        Ok(Err(error)) => error,
    };
    assert!(timed_out(&error), "{}", support::chain(&error));
    start.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_server_fails_a_request_within_the_configs_timeouts_as_kubes_own_client_does() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &ca.client("jane", HOUR));
    let ca_path = tmp.path().join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let limit = std::time::Duration::from_secs(1);
    // TCP taken and TLS never spoken: `connect_timeout`; a request read and never
    // answered: `read_timeout`.
    for (stalled, what) in [
        (Stalled::before_tls().await, "connect"),
        (Stalled::after_request(&ca.server()).await, "read"),
    ] {
        let cluster = json!({"server": stalled.url(), "certificate-authority": ca_path});
        let path = kubeconfig_with(tmp.path(), cluster, identity_files(&volume));
        let mut config = config(&path, tmp.path()).await;
        config.connect_timeout = Some(limit);
        config.read_timeout = Some(limit);
        config.write_timeout = Some(limit);
        let ours = client(config.clone()).await.unwrap();
        let kubes = kube::Client::try_from(config).unwrap();
        let (ours, kubes) = (stalled_get(&ours).await, stalled_get(&kubes).await);
        println!("{what} timeout of {limit:?}: ours failed in {ours:?}, kube's own in {kubes:?}");
        assert!(
            ours >= limit,
            "{what}: failed in {ours:?}, before the timeout"
        );
    }
}

/// A kubeconfig whose cluster is reached through `proxy_url` (a password in it) and whose
/// user's certificate files rotate 3 times under 4 callers: no request fails, each
/// rotation's certificate is in use after it, and every connection the server took came
/// through the proxy (`tunnels` counts them, `host:port` given).
async fn certificate_rotation_under_load_through(proxy_url: &str, tunnels: impl Fn(&str) -> usize) {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let first = ca.client("jane", HOUR);
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &first);
    let ca_path = tmp.path().join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let cluster =
        json!({"server": server.url(""), "certificate-authority": ca_path, "proxy-url": proxy_url});
    let path = kubeconfig_with(tmp.path(), cluster, identity_files(&volume));
    let client = client(config(&path, tmp.path()).await).await.unwrap();

    let load = support::Load::start(4, move || {
        let client = client.clone();
        async move {
            let request = http::Request::get("/").body(Body::empty()).unwrap();
            match client.send(request).await {
                Ok(response) if response.status() == StatusCode::OK => Ok(()),
                Ok(response) => Err(response.status().to_string()),
                Err(error) => Err(support::chain(&error)),
            }
        }
    });
    support::rotate_under_load(&server, &ca, &volume, first).await;
    let (sent, failed) = load.stop().await;
    assert!(
        failed.is_empty(),
        "{} of {sent} failed: {failed:?}",
        failed.len()
    );
    let authority = server.url("").trim_start_matches("https://").to_owned();
    // The proxy logs a tunnel, and the server takes its connection, a moment apart.
    let through = || tunnels(&authority) as u64 == server.accepted();
    support::eventually("every connection through the proxy", through).await;
    println!(
        "{sent} requests, {} connections, through {proxy_url}",
        server.connections()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_through_an_http_proxy_with_a_password() {
    let Some(proxy) = HttpProxy::start_with_auth("jane", "s3cret").await else {
        return;
    };
    certificate_rotation_under_load_through(&proxy.url(), |to| proxy.connects_to(to)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn certificates_rotate_under_load_through_a_socks5_proxy_with_a_password() {
    let Some(proxy) = SocksProxy::start_with_auth("jane", "s3cret").await else {
        return;
    };
    certificate_rotation_under_load_through(&proxy.url(), |to| proxy.connects_to(to)).await;
}

/// Installs the process's subscriber (a callsite's interest is the process's too): in a
/// process of its own (`support::alone`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_has_kubes_trace_span_and_asks_for_gzip() {
    if !support::alone::in_own_process(
        module_path!(),
        "the_client_has_kubes_trace_span_and_asks_for_gzip",
    ) {
        return;
    }
    let logs = support::Logs::capture_globally();
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &ca.client("jane", HOUR));
    let path = kubeconfig(tmp.path(), &ca, &server, identity_files(&volume));
    let client = client(config(&path, tmp.path()).await).await.unwrap();
    let request = http::Request::get("/").body(Vec::new()).unwrap();
    client.request_text(request).await.unwrap();

    let text = logs.text();
    let span = format!(
        "HTTP{{http.method=GET http.url={} otel.name=\"HTTP\" otel.kind=\"client\"",
        server.url("/")
    );
    assert!(
        text.contains(&format!("{span}}}: bearer_reload::kube::https: requesting")),
        "{text}"
    );
    assert!(
        text.contains(&format!(
            "{span} http.status_code=200}}: bearer_reload::kube::https: stream closed"
        )),
        "{text}"
    );
    let asked = server.arrivals()[0]
        .headers
        .get(http::header::ACCEPT_ENCODING)
        .cloned();
    assert_eq!(
        asked.as_ref().map(|v| v.to_str().unwrap()),
        cfg!(feature = "gzip").then_some("gzip")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_of_a_scheme_kube_does_not_take_is_an_error_without_its_password() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let volume = ProjectedTokenDir::create(tmp.path().join("tls"), "unused").unwrap();
    rotate_identity(&volume, &ca.client("jane", HOUR));
    let ca_path = tmp.path().join("ca.crt");
    std::fs::write(&ca_path, ca.pem()).unwrap();
    let cluster = json!({
        "server": "https://127.0.0.1:1",
        "certificate-authority": ca_path,
        "proxy-url": "socks4://jane:s3cret@127.0.0.1:1080",
    });
    let path = kubeconfig_with(tmp.path(), cluster, identity_files(&volume));
    let Err(err) = client(config(&path, tmp.path()).await).await else {
        panic!("a client through a socks4 proxy");
    };
    assert_eq!(
        err.to_string(),
        "proxy socks4://127.0.0.1:1080/: only http://, https://, socks5:// and socks5h:// \
         proxies are supported"
    );
}
