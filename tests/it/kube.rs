//! `bearer_reload::kube` against a local HTTPS Kubernetes-like API server: a kubeconfig
//! written by the test (`certificate-authority-data` + `tokenFile`), read the way kube reads
//! it, and a token file rotated the way the kubelet rotates it.

use crate::support;

use std::future::Future;
use std::time::Duration;

use bearer_reload::kube::{Credentials, Error};
use bearer_reload::testing::ProjectedTokenDir;
use bearer_reload::{StoreBuilder, TokenStore, WatchState};
use http::{Method, StatusCode};
use k8s_openapi::api::core::v1::{ConfigMap, Pod};
use kube::api::{ListParams, ObjectMeta, PostParams};
use kube::{Api, Config};
use support::kube_api::{KubeApi, User};
use support::kube_client as client;

const DEADLINE: Duration = Duration::from_secs(10);
const NS: &str = "team-a";

async fn within<F: Future>(f: F) -> F::Output {
    tokio::time::timeout(DEADLINE, f).await.expect("deadline")
}

/// A server accepting `token`, a kubelet-style token volume holding it, and the config of
/// a kubeconfig pointing at both.
async fn setup(tmp: &tempfile::TempDir, token: &str) -> (KubeApi, ProjectedTokenDir, Config) {
    let server = KubeApi::start().await;
    server.accept_only(token);
    let volume = ProjectedTokenDir::create(tmp.path().join("serviceaccount"), token).unwrap();
    let config = support::kube_config(&server.kubeconfig(&volume.token_path(), NS)).await;
    (server, volume, config)
}

/// Only a 401 (or the test) reloads the token: the 401 path is deterministic.
fn quiet(builder: StoreBuilder) -> StoreBuilder {
    builder.no_watch().no_periodic_refresh()
}

/// The store `config` calls for, built with `options`, and a client on it.
async fn built(
    config: Config,
    options: impl FnOnce(StoreBuilder) -> StoreBuilder,
) -> (kube::Client, TokenStore) {
    let builder = Credentials::token_store_builder(&config)
        .unwrap()
        .expect("a token file or a plugin");
    let store = options(builder).load().await.unwrap();
    (
        Credentials::from(store.clone()).client(config).unwrap(),
        store,
    )
}

fn configmap(name: &str, value: &str) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        data: Some([("value".to_owned(), value.to_owned())].into()),
        ..ConfigMap::default()
    }
}

fn names(list: &[ConfigMap]) -> Vec<String> {
    list.iter()
        .map(|cm| cm.metadata.name.clone().unwrap_or_default())
        .collect()
}

fn api_code(err: &kube::Error) -> Option<u16> {
    match err {
        kube::Error::Api(status) => Some(status.code),
        _ => None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lists_creates_and_gets_through_a_kubeconfig_token_file() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, _volume, config) = setup(&tmp, "one").await;
    server.add_pod(NS, "web-0");
    let client = client(config).await.unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(client.clone());

    let empty = within(cms.list(&ListParams::default())).await.unwrap();
    assert!(empty.items.is_empty());
    assert!(empty.metadata.resource_version.is_some());

    let created = within(cms.create(&PostParams::default(), &configmap("settings", "a")))
        .await
        .unwrap();
    assert_eq!(created.metadata.namespace.as_deref(), Some(NS));
    assert!(created.metadata.uid.is_some());
    assert!(created.metadata.resource_version.is_some());
    assert!(created.metadata.creation_timestamp.is_some());
    assert_eq!(created.data.unwrap()["value"], "a");

    let listed = within(cms.list(&ListParams::default())).await.unwrap();
    assert_eq!(names(&listed.items), ["settings"]);
    let got = within(cms.get("settings")).await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);

    let again = within(cms.create(&PostParams::default(), &configmap("settings", "b"))).await;
    let err = again.unwrap_err();
    assert_eq!(api_code(&err), Some(409), "{err:?}");
    assert!(matches!(&err, kube::Error::Api(s) if s.reason == "AlreadyExists"));

    let pods: Api<Pod> = Api::namespaced(client, NS);
    let pod = within(pods.get("web-0")).await.unwrap();
    assert_eq!(pod.status.unwrap().phase.as_deref(), Some("Running"));
    let err = within(pods.get("web-1")).await.unwrap_err();
    assert_eq!(api_code(&err), Some(404), "{err:?}");

    assert_eq!(server.refused(), 0);
    assert!(server.tokens().iter().all(|t| t == "one"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_is_built_with_the_options_given_and_its_debug_shows_no_token() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, volume, config) = setup(&tmp, "kube-debug-token").await;
    let (_, defaults) = built(config.clone(), |b| b).await;
    assert_eq!(defaults.status().watch, WatchState::Active);
    let (_, store) = built(config.clone(), quiet).await;
    assert_eq!(store.status().watch, WatchState::Off);
    let debug = format!("{store:?}");
    assert!(
        debug.starts_with("TokenStore") && debug.contains(&*volume.token_path().to_string_lossy()),
        "{debug}"
    );
    assert!(!debug.contains("kube-debug-token"), "{debug}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn clients_given_one_store_share_its_token_and_its_reads() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, volume, config) = setup(&tmp, "one").await;
    let (first, store) = built(config.clone(), quiet).await;
    let second = Credentials::from(store.clone()).client(config).unwrap();
    let (a, b): (Api<ConfigMap>, Api<ConfigMap>) = (
        Api::default_namespaced(first),
        Api::default_namespaced(second),
    );
    within(a.list(&ListParams::default())).await.unwrap();
    volume.rotate("two").unwrap();
    server.accept_only("two");
    // The first client's 401 reloads the store; the second client's next request carries
    // the new token without a refusal or a read of its own.
    within(a.list(&ListParams::default())).await.unwrap();
    within(b.list(&ListParams::default())).await.unwrap();
    assert_eq!(server.tokens(), ["one", "one", "two", "two"]);
    let status = store.status();
    assert_eq!((status.reads, status.unauthorized), (2, 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_post_refused_after_a_rotation_is_replayed_with_the_new_token() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, volume, config) = setup(&tmp, "one").await;
    let (client, store) = built(config, quiet).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    within(cms.list(&ListParams::default())).await.unwrap();

    // Kubelet-style rotation, and the server revokes the old token at once.
    volume.rotate("two").unwrap();
    server.accept_only("two");
    let created = within(cms.create(&PostParams::default(), &configmap("after", "payload")))
        .await
        .unwrap();
    assert_eq!(created.data.unwrap()["value"], "payload");
    let stored = server.configmap(NS, "after").expect("stored");
    assert_eq!(stored["data"]["value"], "payload", "the body was replayed");
    within(cms.list(&ListParams::default())).await.unwrap();

    let status = store.status();
    assert_eq!(status.generation, 2);
    assert_eq!(status.unauthorized, 1);
    assert_eq!(status.unauthorized_reloads, 1);
    assert_eq!(status.retries, 1);
    assert_eq!(status.retries_succeeded, 1);
    let seen = server.seen();
    let calls: Vec<_> = seen
        .iter()
        .map(|s| {
            (
                s.method.clone(),
                s.token.clone().unwrap_or_default(),
                s.accepted,
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            (Method::GET, "one".to_owned(), true),
            (Method::POST, "one".to_owned(), false),
            (Method::POST, "two".to_owned(), true),
            (Method::GET, "two".to_owned(), true),
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_defaults_every_call_after_a_rotation_succeeds() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, volume, config) = setup(&tmp, "one").await;
    let (client, store) = built(config, |b| b).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    within(cms.list(&ListParams::default())).await.unwrap();

    // No waiting: the watcher or the 401, whichever comes first, brings the new token.
    volume.rotate("two").unwrap();
    server.accept_only("two");
    within(cms.create(&PostParams::default(), &configmap("a", "two")))
        .await
        .unwrap();
    within(cms.list(&ListParams::default())).await.unwrap();

    // Once the watcher has seen a rotation, no request is refused at all.
    let mut generations = store.subscribe();
    volume.rotate("three").unwrap();
    within(generations.wait_for(|&g| g >= 3)).await.unwrap();
    server.accept_only("three");
    let refused = server.refused();
    within(cms.create(&PostParams::default(), &configmap("b", "three")))
        .await
        .unwrap();
    assert_eq!(server.refused(), refused);
    assert_eq!(server.tokens().last().map(String::as_str), Some("three"));
    assert_eq!(store.status().watch, bearer_reload::WatchState::Active);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubes_own_client_fails_after_the_same_rotation() {
    // If this test fails, kube handles rotations itself now: update the README.
    let tmp = tempfile::tempdir().unwrap();
    let (server, volume, config) = setup(&tmp, "one").await;
    let own = kube::Client::try_from(config).unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(own);
    within(cms.list(&ListParams::default())).await.unwrap();

    volume.rotate("two").unwrap();
    server.accept_only("two");
    let err = within(cms.list(&ListParams::default())).await.unwrap_err();
    assert_eq!(api_code(&err), Some(401), "{err:?}");
    let post = within(cms.create(&PostParams::default(), &configmap("after", "x"))).await;
    assert_eq!(api_code(&post.unwrap_err()), Some(401));
    assert!(server.configmap(NS, "after").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_file_ending_in_a_newline_works_where_kubes_own_fails() {
    let tmp = tempfile::tempdir().unwrap();
    let server = KubeApi::start().await;
    server.accept_only("plain");
    let path = tmp.path().join("token");
    std::fs::write(&path, "plain\n").unwrap();
    let kubeconfig = server.kubeconfig(&path, NS);

    let ours = client(support::kube_config(&kubeconfig).await)
        .await
        .unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(ours);
    within(cms.list(&ListParams::default())).await.unwrap();
    assert_eq!(server.tokens(), ["plain"]);

    // If this fails, kube trims token files now: update the README.
    let own = kube::Client::try_from(support::kube_config(&kubeconfig).await).unwrap();
    let cms: Api<ConfigMap> = Api::default_namespaced(own);
    let err = within(cms.list(&ListParams::default())).await.unwrap_err();
    assert!(matches!(err, kube::Error::Service(_)), "{err:?}");
    let mut chain = err.to_string();
    let mut source = std::error::Error::source(&err);
    while let Some(e) = source {
        chain += &format!(": {e}");
        source = e.source();
    }
    assert!(chain.contains("invalid bearer token"), "{chain}");
    assert_eq!(server.requests(), 1, "kube's request never left the client");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn impersonation_and_the_default_namespace_reach_the_server() {
    let tmp = tempfile::tempdir().unwrap();
    let server = KubeApi::start().await;
    server.accept_only("one");
    let volume = ProjectedTokenDir::create(tmp.path().join("sa"), "one").unwrap();
    let token_path = volume.token_path();
    let user = User {
        token_file: Some(&token_path),
        impersonate: Some("jane"),
        impersonate_groups: &["devs", "ops"],
        ..User::default()
    };
    let config = support::kube_config(&server.kubeconfig_for(&user, "team-b")).await;
    assert_eq!(config.default_namespace, "team-b");
    let (client, _store) = built(config, quiet).await;
    let cms: Api<ConfigMap> = Api::default_namespaced(client);
    within(cms.list(&ListParams::default())).await.unwrap();
    // The retried request keeps them too.
    volume.rotate("two").unwrap();
    server.accept_only("two");
    within(cms.create(&PostParams::default(), &configmap("x", "y")))
        .await
        .unwrap();

    let seen = server.seen();
    assert_eq!(seen.len(), 3);
    for s in &seen {
        assert_eq!(s.namespace.as_deref(), Some("team-b"), "{}", s.path);
        assert_eq!(s.impersonate_user.as_deref(), Some("jane"));
        assert_eq!(s.impersonate_groups, ["devs", "ops"]);
    }
    assert_eq!(server.tokens(), ["one", "one", "two"]);
    assert!(server.configmap("team-b", "x").is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubes_retry_of_503_still_applies_and_each_attempt_has_the_token() {
    let tmp = tempfile::tempdir().unwrap();
    let (server, _volume, config) = setup(&tmp, "one").await;
    assert!(config.default_retry);
    let cms: Api<ConfigMap> = Api::default_namespaced(client(config).await.unwrap());
    server.fail_next(2, StatusCode::SERVICE_UNAVAILABLE);
    within(cms.list(&ListParams::default())).await.unwrap();
    assert_eq!(server.tokens(), ["one", "one", "one"]);
    assert_eq!(server.refused(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_config_without_a_token_file_gets_kubes_own_client() {
    let tmp = tempfile::tempdir().unwrap();
    let server = KubeApi::start().await;
    server.accept_only("inline");

    let inline = User {
        token: Some("inline"),
        ..User::default()
    };
    let config = support::kube_config(&server.kubeconfig_for(&inline, NS)).await;
    assert!(Credentials::token_store_builder(&config).unwrap().is_none());
    let cms: Api<ConfigMap> = Api::default_namespaced(client(config).await.unwrap());
    within(cms.list(&ListParams::default())).await.unwrap();

    // Both: kube uses the inline token first, and so do we.
    let path = tmp.path().join("token");
    std::fs::write(&path, "from-file").unwrap();
    let both = User {
        token: Some("inline"),
        token_file: Some(&path),
        ..User::default()
    };
    let config = support::kube_config(&server.kubeconfig_for(&both, NS)).await;
    assert!(Credentials::token_store_builder(&config).unwrap().is_none());
    let cms: Api<ConfigMap> = Api::default_namespaced(client(config).await.unwrap());
    within(cms.list(&ListParams::default())).await.unwrap();

    assert_eq!(server.tokens(), ["inline", "inline"]);
}

#[tokio::test]
async fn a_missing_token_file_is_an_error_naming_the_path() {
    let tmp = tempfile::tempdir().unwrap();
    let server = KubeApi::start().await;
    let path = tmp.path().join("no-such-token");
    let config = support::kube_config(&server.kubeconfig(&path, NS)).await;
    let Err(err) = client(config).await else {
        panic!("a missing token file must fail");
    };
    assert!(matches!(err, Error::Load(_)), "{err:?}");
    assert_eq!(
        err.to_string(),
        format!("cannot fetch from file {}", path.display())
    );
}

#[test]
fn the_test_server_writes_kubernetes_timestamps() {
    use std::time::UNIX_EPOCH;
    use support::kube_api::rfc3339;
    assert_eq!(rfc3339(UNIX_EPOCH), "1970-01-01T00:00:00Z");
    let t = UNIX_EPOCH + Duration::from_secs(1_772_323_199);
    assert_eq!(rfc3339(t), "2026-02-28T23:59:59Z");
    let t = UNIX_EPOCH + Duration::from_secs(951_782_400);
    assert_eq!(rfc3339(t), "2000-02-29T00:00:00Z");
}

const INFER_CHILD: &str = "BEARER_RELOAD_INFER_CHILD";

/// `client(Config::infer())`, the one line of an app, reads `KUBECONFIG`. The variable is
/// set for a child process (this test binary again), not with `set_var` in this
/// multi-threaded one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn infer_reads_the_kubeconfig_from_the_environment() {
    if std::env::var_os(INFER_CHILD).is_some() {
        let client = client(Config::infer().await.unwrap()).await.unwrap();
        let cms: Api<ConfigMap> = Api::default_namespaced(client);
        let list = within(cms.list(&ListParams::default())).await.unwrap();
        println!("infer listed {} configmaps", list.items.len());
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let server = KubeApi::start().await;
    server.accept_only("one");
    let volume = ProjectedTokenDir::create(tmp.path().join("serviceaccount"), "one").unwrap();
    let kubeconfig = server.kubeconfig(&volume.token_path(), NS);
    let out = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &support::alone::test_name(
                module_path!(),
                "infer_reads_the_kubeconfig_from_the_environment",
            ),
            "--nocapture",
        ])
        .env("KUBECONFIG", &kubeconfig)
        .env(INFER_CHILD, "1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("infer listed 0 configmaps"), "{stdout}");
    let seen = server.seen();
    assert_eq!(seen.len(), 1, "{seen:?}");
    assert_eq!(seen[0].token.as_deref(), Some("one"));
    assert_eq!(seen[0].namespace.as_deref(), Some(NS));
}

const FIFO_CHILD: &str = "BEARER_RELOAD_FIFO_CHILD";

/// `Credentials::infer_config` on a current-thread runtime whose kubeconfig cannot be read
/// yet (`KUBECONFIG` a FIFO nobody writes to, as a mount that hangs): the runtime's one
/// thread stays free, and a task of its own runs while the kubeconfig is read. kube's
/// loader and the crate read it with `std::fs` inside async fns, which held the thread.
/// In a child process (this binary again), which `KUBECONFIG` is set for.
#[cfg(unix)]
#[test]
fn infer_config_reads_the_kubeconfig_off_the_runtime_thread() {
    use std::io::Write as _;
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, Ordering};

    if std::env::var_os(FIFO_CHILD).is_some() {
        let fifo = std::path::PathBuf::from(std::env::var_os("KUBECONFIG").unwrap());
        let file = fifo.with_extension("yaml");
        let (go, wait) = std::sync::mpsc::channel::<()>();
        let held = Arc::new(AtomicBool::new(false));
        let writer = {
            let (fifo, file, held) = (fifo.clone(), file.clone(), held.clone());
            std::thread::spawn(move || {
                // Written when the runtime says so; at the deadline only if the runtime's
                // thread is stuck reading.
                if wait.recv_timeout(DEADLINE).is_err() {
                    held.store(true, Ordering::SeqCst);
                }
                let content = std::fs::read(&file).unwrap();
                // Opened once the reader has opened it: the file takes the FIFO's place
                // for later reads, then the reader gets its content.
                let mut pipe = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
                std::fs::rename(&file, &fifo).unwrap();
                pipe.write_all(&content).unwrap();
            })
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let config = runtime.block_on(async {
            let infer = tokio::spawn(Credentials::infer_config());
            // The infer task's turn: it starts reading the kubeconfig.
            tokio::task::yield_now().await;
            // Nobody hears it if the writer gave up waiting: the check below says so.
            let _ = go.send(());
            infer.await.unwrap().unwrap()
        });
        writer.join().unwrap();
        assert!(
            !held.load(Ordering::SeqCst),
            "the runtime's only thread waited for the kubeconfig"
        );
        println!(
            "inferred {} with CA file {:?}",
            config.cluster_url,
            config.root_cert_file.unwrap()
        );
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let ca = support::pki::Ca::new("kubernetes");
    let ca_file = tmp.path().join("ca.crt");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n\
         clusters:\n- name: k\n  cluster:\n    server: https://127.0.0.1:6443\n    certificate-authority: {}\n\
         users:\n- name: u\n  user:\n    token: abc\n\
         contexts:\n- name: c\n  context:\n    cluster: k\n    user: u\n",
        ca_file.display()
    );
    let fifo = tmp.path().join("config");
    std::fs::write(fifo.with_extension("yaml"), kubeconfig).unwrap();
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            &support::alone::test_name(
                module_path!(),
                "infer_config_reads_the_kubeconfig_off_the_runtime_thread",
            ),
            "--nocapture",
        ])
        .env("KUBECONFIG", &fifo)
        .env(FIFO_CHILD, "1")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("inferred https://127.0.0.1:6443"),
        "{stdout}"
    );
    assert!(
        stdout.contains(&format!("with CA file {ca_file:?}")),
        "{stdout}"
    );
}
