//! Exec credential plugins against a local HTTPS Kubernetes-like API server: a real plugin
//! (a shell script that prints the credential the test wrote and counts its runs), a
//! kubeconfig read the way kube reads it, and a server that revokes tokens when the test
//! says. `bearer_reload::kube` side by side with kube's own exec handling.

use crate::support;

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use bearer_reload::kube::Credentials;
use bearer_reload::source::ExecError;
use bearer_reload::{LoadError, StoreBuilder, TokenStore};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::ListParams;
use kube::{Api, Client, Config};
use support::chain;
use support::exec_plugin::{Plugin, process_gone};
use support::kube_api::KubeApi;

const DEADLINE: Duration = Duration::from_secs(20);
const NS: &str = "team-a";

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(DEADLINE, f).await.expect("deadline")
}

/// The config of a kubeconfig whose user runs `plugin` against `server`.
async fn config_for(plugin: &Plugin, server: &KubeApi) -> Config {
    support::kube_config(&plugin.kubeconfig(server, NS)).await
}

/// A client built by `bearer_reload::kube` on a store built with `options`, and the store.
async fn reloading(
    config: Config,
    options: impl FnOnce(StoreBuilder) -> StoreBuilder,
) -> (Api<ConfigMap>, TokenStore) {
    let builder = Credentials::token_store_builder(&config)
        .unwrap()
        .expect("an exec config has a store");
    let store = options(builder).load().await.unwrap();
    let client = Credentials::from(store.clone()).client(config).unwrap();
    (Api::default_namespaced(client), store)
}

/// The defaults.
fn defaults(builder: StoreBuilder) -> StoreBuilder {
    builder
}

async fn list(api: &Api<ConfigMap>) -> Result<(), kube::Error> {
    within(api.list(&ListParams::default())).await.map(drop)
}

fn api_code(result: &Result<(), kube::Error>) -> Option<u16> {
    match result {
        Err(kube::Error::Api(status)) => Some(status.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_plugin_runs_before_the_token_expires_without_a_single_401() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    let loaded = SystemTime::now();
    let expires = loaded + Duration::from_secs(10);
    plugin.issue("one", Some(expires));
    server.accept_only("one");
    let (api, store) = reloading(config_for(&plugin, &server).await, defaults).await;
    assert_eq!(plugin.runs(), 1, "one run per client build");
    list(&api).await.unwrap();

    // The plugin would now hand out a new token; the old one stays valid until it expires.
    plugin.issue("two", Some(loaded + Duration::from_secs(600)));
    server.accept_also("two");
    let mut generations = store.subscribe();
    within(generations.wait_for(|&g| g >= 2)).await.unwrap();
    let rotated = SystemTime::now();
    // A 10 s credential is refreshed at half its lifetime (the margin is capped there):
    // never early, and well before it expires.
    let after = rotated.duration_since(loaded).unwrap();
    assert!(after >= Duration::from_secs(4), "refreshed after {after:?}");
    assert!(
        rotated < expires,
        "refreshed {after:?} after load, past the expiry"
    );
    assert_eq!(plugin.runs(), 2);

    server.accept_only("two");
    list(&api).await.unwrap();
    assert_eq!(
        server.refused(),
        0,
        "the timer was first: no request was refused"
    );
    assert_eq!(store.status().unauthorized, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_answers_with_a_token_alone_gives_the_client_no_certificate() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    plugin.issue("one", None);
    server.accept_only("one");
    let config = config_for(&plugin, &server).await;
    // Built as most users build it: the plugin runs once, for the token; no identity store
    // asks it for a certificate it never gave.
    let client = support::kube_client(config).await.unwrap();
    assert_eq!(plugin.runs(), 1);
    list(&Api::<ConfigMap>::default_namespaced(client))
        .await
        .unwrap();
    assert_eq!(plugin.runs(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_without_expiry_is_refreshed_on_a_401_where_kubes_own_client_never_recovers() {
    let server = KubeApi::start().await;
    let (ours, theirs) = (Plugin::new(), Plugin::new());
    for plugin in [&ours, &theirs] {
        plugin.issue("one", None);
    }
    server.accept_only("one");
    let (api, store) = reloading(config_for(&ours, &server).await, defaults).await;
    let kube_client = Client::try_from(config_for(&theirs, &server).await).unwrap();
    let kube_api: Api<ConfigMap> = Api::default_namespaced(kube_client);
    let kube_build_runs = theirs.runs();
    assert_eq!(ours.runs(), 1, "one run per client build");
    list(&api).await.unwrap();
    list(&kube_api).await.unwrap();

    // A second client given the same store: no run at all.
    let again = Credentials::from(store.clone())
        .client(config_for(&ours, &server).await)
        .unwrap();
    list(&Api::default_namespaced(again)).await.unwrap();
    assert_eq!(ours.runs(), 1);

    // The plugin's token rotates and the server revokes the old one at once.
    for plugin in [&ours, &theirs] {
        plugin.issue("two", None);
    }
    server.accept_only("two");

    // Ours: the 401 runs the plugin, and the request is sent again with the new token.
    list(&api).await.unwrap();
    assert_eq!(ours.runs(), 2);
    assert_eq!(store.generation(), 2);
    let status = store.status();
    assert_eq!((status.unauthorized, status.retries_succeeded), (1, 1));
    list(&api).await.unwrap();

    // kube's own: the token without an expiry is a static header; the 401 goes back and
    // the plugin is never run again.
    for _ in 0..3 {
        assert_eq!(api_code(&list(&kube_api).await), Some(401));
    }
    assert_eq!(
        theirs.runs(),
        kube_build_runs,
        "kube never re-ran its plugin"
    );
    eprintln!("kube ran its plugin {kube_build_runs} times to build one client; ours once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_concurrent_401s_run_the_plugin_once() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    plugin.issue("one", None);
    server.accept_only("one");
    // The burst crosses TLS handshakes on a busy debug build: give "one burst" room.
    let options = |b: StoreBuilder| b.unauthorized_reload_interval(Duration::from_secs(10));
    let (api, store) = reloading(config_for(&plugin, &server).await, options).await;
    let api = Arc::new(api);
    let burst = |api: Arc<Api<ConfigMap>>| {
        (0..100)
            .map(|_| {
                let api = api.clone();
                tokio::spawn(async move { list(&api).await })
            })
            .collect::<Vec<_>>()
    };
    // Warm up: open the connections the burst will use.
    for task in burst(api.clone()) {
        task.await.unwrap().unwrap();
    }

    plugin.hold();
    plugin.issue("two", None);
    server.accept_only("two");
    let before = server.requests();
    let tasks = burst(api.clone());
    // All 100 are refused while the one run they started is held.
    server.wait_requests(before + 100, DEADLINE).await;
    plugin.wait_runs(2, DEADLINE).await;
    assert_eq!(server.refused(), 100);
    plugin.release();
    for task in tasks {
        task.await.unwrap().unwrap();
    }
    assert_eq!(plugin.runs(), 2, "load + one run for the whole burst");
    let status = store.status();
    assert_eq!(status.unauthorized, 100);
    assert_eq!(status.unauthorized_reloads, 1);
    assert_eq!(status.retries_succeeded, 100);
    assert_eq!(server.refused(), 100, "every retry carried the new token");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_plugin_never_blocks_requests_that_have_a_valid_token() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    plugin.issue("one", None);
    server.accept_only("one");
    let (api, store) = reloading(config_for(&plugin, &server).await, defaults).await;

    plugin.hold();
    let reload = tokio::spawn({
        let store = store.clone();
        async move { store.reload().await }
    });
    plugin.wait_runs(2, DEADLINE).await;
    // The run is held; requests with the current token go through meanwhile, each quickly.
    for _ in 0..20 {
        let started = Instant::now();
        list(&api).await.unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );
    }
    assert!(!reload.is_finished(), "the run is still held");
    assert_eq!(plugin.runs(), 2);

    plugin.issue("two", None);
    server.accept_also("two");
    plugin.release();
    within(reload).await.unwrap().unwrap();
    assert_eq!(store.generation(), 2);
    server.accept_only("two");
    list(&api).await.unwrap();
    assert_eq!(server.refused(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_plugin_keeps_the_last_good_token() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    plugin.issue("one", None);
    server.accept_only("one");
    let (api, store) = reloading(config_for(&plugin, &server).await, defaults).await;
    let command = plugin.command().display().to_string();

    let secret = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJib2IifQ.c2lnbmF0dXJlNDU2";
    plugin.fail(&format!("error: refresh token {secret} was revoked\n"));
    let err = store.reload().await.unwrap_err();
    assert_eq!(
        chain(&err),
        format!(
            "cannot fetch from exec plugin {command}: the plugin exited with status 1; \
             stderr: error: refresh token [redacted] was revoked"
        )
    );
    assert!(matches!(err.downcast_ref(), Some(ExecError::Exit { .. })));
    plugin.heal();

    // Output that is no credential: each is refused with its reason, and the token stays.
    let bad = [
        ("not json", "printed invalid JSON"),
        (
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1","status":{"token":""}}"#,
            "without a token",
        ),
        (
            r#"{"kind":"Secret","apiVersion":"client.authentication.k8s.io/v1","status":{"token":"x"}}"#,
            "printed kind \"Secret\"",
        ),
        (
            r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","status":{"token":"x"}}"#,
            "configured for apiVersion client.authentication.k8s.io/v1 but printed",
        ),
    ];
    for (output, reason) in bad {
        plugin.print(output);
        let msg = chain(&store.reload().await.unwrap_err());
        assert!(
            msg.starts_with(&format!("cannot fetch from exec plugin {command}: "))
                && msg.contains(reason),
            "{msg}"
        );
    }
    let status = store.status();
    assert_eq!((status.generation, status.failures), (1, 5));
    let last = chain(&status.last_error.unwrap());
    assert!(last.contains("apiVersion"), "{last}");
    assert!(!format!("{:?}", store.status()).contains(secret));
    list(&api).await.unwrap();
    assert!(server.tokens().iter().all(|t| t == "one"));

    plugin.issue("two", None);
    store.reload().await.unwrap();
    assert_eq!(store.generation(), 2);
    assert!(store.status().last_error.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_plugin_times_out_is_killed_and_holds_nothing_up() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    plugin.issue("one", None);
    server.accept_only("one");
    let options = |b: StoreBuilder| b.fetch_timeout(Duration::from_secs(1));
    let (api, store) = reloading(config_for(&plugin, &server).await, options).await;

    plugin.hang();
    let started = Instant::now();
    let err = within(store.reload()).await.unwrap_err();
    assert!(matches!(err, LoadError::Timeout { .. }), "{err:?}");
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(
        err.to_string(),
        format!(
            "fetching from exec plugin {} took longer than 1s",
            plugin.command().display()
        )
    );
    // The child was killed with the dropped run.
    let pid = plugin.hung_pid().expect("the hung run wrote its pid");
    let until = Instant::now() + DEADLINE;
    while !process_gone(pid) {
        assert!(Instant::now() < until, "plugin {pid} still runs");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(store.generation(), 1);
    list(&api).await.unwrap();

    // The next run is not held up by the one that hung.
    plugin.unhang();
    plugin.issue("two", None);
    server.accept_also("two");
    within(store.reload()).await.unwrap();
    assert_eq!(store.generation(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_built_by_hand_runs_a_plugin_too() {
    let plugin = Plugin::new();
    plugin.issue(
        "by-hand",
        Some(SystemTime::now() + Duration::from_secs(3600)),
    );
    let store = TokenStore::builder(plugin.source()).load().await.unwrap();
    assert_eq!(store.current().header_value(), "Bearer by-hand");
    let status = store.status();
    assert!(status.expires_at.is_some());
    assert_eq!(
        status.source,
        format!("exec plugin {}", plugin.command().display())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_returns_a_client_certificate_gets_kubes_own_client() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    let key = rcgen::KeyPair::generate().unwrap();
    let cert = rcgen::CertificateParams::new(vec!["alice".to_owned()])
        .unwrap()
        .self_signed(&key)
        .unwrap();
    let credential = serde_json::json!({
        "kind": "ExecCredential",
        "apiVersion": "client.authentication.k8s.io/v1",
        "status": {"clientCertificateData": cert.pem(), "clientKeyData": key.serialize_pem()},
    });
    plugin.print(&credential.to_string());
    let config = config_for(&plugin, &server).await;
    let err = Credentials::token_store_builder(&config)
        .unwrap()
        .unwrap()
        .load()
        .await
        .unwrap_err();
    assert!(matches!(
        err.downcast_ref(),
        Some(ExecError::ClientCertificate { .. })
    ));
    let runs = plugin.runs();
    let credentials = Credentials::load(&config).await.unwrap();
    let kube_client = credentials.client(config).unwrap();
    // Without `tls`, kube runs it for its own client; with `tls`, ours runs it once for the
    // token (refused) and the identity store takes that run's certificate.
    assert!(
        plugin.runs() > runs,
        "the client was built on the plugin's run"
    );
    drop(kube_client);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plugin_that_is_not_installed_fails_the_build_with_its_install_hint() {
    let server = KubeApi::start().await;
    let plugin = Plugin::new();
    let mut config = config_for(&plugin, &server).await;
    let exec = config.auth_info.exec.as_mut().unwrap();
    exec.command = Some("/nonexistent/kubectl-oidc_login".into());
    let Err(err) = Credentials::load(&config).await else {
        panic!("a missing plugin must fail");
    };
    assert_eq!(
        chain(&err),
        "cannot fetch from exec plugin /nonexistent/kubectl-oidc_login: the command \
         was not found; the test writes this plugin"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_timed_out_wrapper_is_ended_with_the_children_it_started() {
    use bearer_reload::source::ExecSource;
    // A wrapper without `exec`: it starts the real helper in the background and waits for
    // it, as `sh -c 'helper & wait'` does. Killing the wrapper alone would leave the
    // helper running, holding the plugin's output open.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let wrapper = dir.path().join("wrapper");
    support::script::write_script(
        &wrapper,
        &format!("echo $$ > '{d}/wrapper.pid'\nsleep 600 &\necho $! > '{d}/helper.pid'\nwait"),
    );
    let source = ExecSource::new(&wrapper).never_interactive();
    let err = TokenStore::builder(source)
        .fetch_timeout(Duration::from_millis(500))
        .load()
        .await
        .unwrap_err();
    assert!(matches!(err, LoadError::Timeout { .. }), "{err:?}");
    let pid = |name: &str| -> u32 {
        let text = std::fs::read_to_string(dir.path().join(name)).unwrap();
        text.trim().parse().unwrap()
    };
    for (what, pid) in [
        ("wrapper", pid("wrapper.pid")),
        ("helper", pid("helper.pid")),
    ] {
        let until = Instant::now() + DEADLINE;
        while !process_gone(pid) {
            assert!(Instant::now() < until, "the {what} ({pid}) still runs");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
}
