//! `Credentials::from_kubeconfig`: a kubeconfig mounted from a Secret that something else
//! rewrites (its inline token, client certificate and CA bundle rotating with the file),
//! against an HTTPS server that requires client certificates from a CA, checks the bearer
//! token, and refuses the old credentials the moment the new ones are written.

use crate::support;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use bearer_reload::kube::Credentials;
use bearer_reload::testing::ProjectedTokenDir;
use http::StatusCode;
use kube::client::Body;
use kube::config::KubeConfigOptions;
use serde_json::json;
use support::mtls::{MtlsServer, PRESENTED};
use support::pki::{Ca, Issued};
use support::{DEADLINE, chain, eventually};

const HOUR: Duration = Duration::from_secs(3600);

/// What a kubeconfig holds inline.
struct Inline<'a> {
    server: &'a str,
    ca_pem: &'a str,
    token: Option<&'a str>,
    identity: Option<&'a Issued>,
}

/// A kubeconfig (as Cluster API writes one: one cluster, one user, one current context)
/// with every credential inline.
fn kubeconfig(inline: &Inline<'_>) -> String {
    let mut user = serde_json::Map::new();
    if let Some(token) = inline.token {
        user.insert("token".into(), json!(token));
    }
    if let Some(identity) = inline.identity {
        user.insert(
            "client-certificate-data".into(),
            json!(STANDARD.encode(&identity.cert_pem)),
        );
        user.insert(
            "client-key-data".into(),
            json!(STANDARD.encode(&identity.key_pem)),
        );
    }
    json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "workload", "cluster": {
            "server": inline.server,
            "certificate-authority-data": STANDARD.encode(inline.ca_pem),
        }}],
        "users": [{"name": "workload-admin", "user": user}],
        "contexts": [{"name": "workload-admin@workload", "context": {
            "cluster": "workload", "user": "workload-admin",
        }}],
        "current-context": "workload-admin@workload",
    })
    .to_string()
}

/// The Secret's volume: the kubeconfig as its key `value`, swapped through `..data` as the
/// kubelet updates a mounted Secret.
fn mount(dir: &Path, kubeconfig: String) -> ProjectedTokenDir {
    ProjectedTokenDir::create_named(dir.join("secret"), "value", kubeconfig).unwrap()
}

async fn from_kubeconfig(path: &Path) -> (kube::Config, Credentials) {
    support::tls::install_ring();
    Credentials::from_kubeconfig(path, &KubeConfigOptions::default())
        .await
        .unwrap()
}

/// A GET through `client`: its status, the certificate and the token it arrived with.
async fn get(client: &kube::Client, server: &MtlsServer) -> (StatusCode, String, String) {
    let request = http::Request::get("/").body(Body::empty()).unwrap();
    let response = client.send(request).await.unwrap();
    let presented = response.headers()[PRESENTED].to_str().unwrap().to_owned();
    let arrival = server
        .arrivals()
        .into_iter()
        .rev()
        .find(|a| !a.refused)
        .map(|a| a.authorization.unwrap_or_default())
        .unwrap_or_default();
    (response.status(), presented, arrival)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_token_rotates_with_the_file_under_the_same_client() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let identity = ca.client("workload-admin", HOUR);
    let (url, ca_pem) = (server.url(""), ca.pem());
    let inline = |token: &str| {
        kubeconfig(&Inline {
            server: &url,
            ca_pem: &ca_pem,
            token: Some(token),
            identity: Some(&identity),
        })
    };
    server.accept_tokens(&["token-1"]);
    let volume = mount(tmp.path(), inline("token-1"));
    let (config, credentials) = from_kubeconfig(&volume.token_path()).await;
    assert!(
        config.auth_info.token.is_none(),
        "kube's auth layer would overwrite ours"
    );
    let client = credentials.client(config).unwrap();
    let token = credentials_token(&credentials);
    assert!(
        token.status().source.contains("kubeconfig"),
        "{:?}",
        token.status()
    );
    assert_eq!(token.status().watch, bearer_reload::WatchState::Active);
    let (status, _, sent) = get(&client, &server).await;
    assert_eq!((status, sent.as_str()), (StatusCode::OK, "Bearer token-1"));

    // Requests run throughout; the server refuses the old token the moment the file is
    // rewritten. None fails: a refused one reads the file and is sent again.
    let load = {
        let client = client.clone();
        tokio::spawn(async move {
            let mut failed = 0;
            for _ in 0..400 {
                let request = http::Request::get("/load").body(Body::empty()).unwrap();
                match client.send(request).await {
                    Ok(response) if response.status() == StatusCode::OK => {}
                    _ => failed += 1,
                }
            }
            failed
        })
    };
    for n in 2..=4 {
        // The issuer's new token is valid before it is written; the old one is refused the
        // moment it is.
        let (old, next) = (format!("token-{}", n - 1), format!("token-{n}"));
        server.accept_tokens(&[&old, &next]);
        volume.rotate(inline(&next)).unwrap();
        server.accept_tokens(&[&next]);
        let (status, _, sent) = get(&client, &server).await;
        assert_eq!((status, sent), (StatusCode::OK, format!("Bearer {next}")));
        support::wait_for_token(&token, &next).await;
        // The next rotation after some of the load's requests: a request meets one
        // rotation, as the layer retries a refused request once.
        let seen = server.arrivals().len() as u64;
        server.wait_requests(seen + 20, DEADLINE).await;
    }
    assert_eq!(
        load.await.unwrap(),
        0,
        "requests failed through the rotations"
    );
    assert_eq!(token.generation(), 4);
    assert!(token.status().last_error.is_none());
}

/// The token store of `credentials` (the client holds the same).
fn credentials_token(credentials: &Credentials) -> bearer_reload::TokenStore {
    credentials.token_store().expect("a token store").clone()
}

/// The stores of `credentials`.
fn credentials_stores(
    credentials: &Credentials,
) -> (
    Option<bearer_reload::TokenStore>,
    Option<bearer_reload::tls::IdentityStore>,
    Option<bearer_reload::tls::RootStore>,
) {
    (
        credentials.token_store().cloned(),
        credentials.identity_store().cloned(),
        credentials.root_store().cloned(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_client_certificate_rotates_and_the_old_one_is_never_sent_again() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let (url, ca_pem) = (server.url(""), ca.pem());
    let first = ca.client("workload-admin", HOUR);
    let inline = |identity: &Issued| {
        kubeconfig(&Inline {
            server: &url,
            ca_pem: &ca_pem,
            token: None,
            identity: Some(identity),
        })
    };
    let volume = mount(tmp.path(), inline(&first));
    let (config, credentials) = from_kubeconfig(&volume.token_path()).await;
    let (token, identity, _) = credentials_stores(&credentials);
    assert!(token.is_none(), "no token in the file");
    let identity = identity.expect("an identity store");
    let client = credentials.client(config).unwrap();
    assert_eq!(get(&client, &server).await.1, first.fingerprint());

    for generation in 2..=4 {
        let next = ca.client("workload-admin", HOUR);
        let old = server.arrivals().last().unwrap().fingerprint.clone();
        volume.rotate(inline(&next)).unwrap();
        server.refuse(&old);
        // The next request already goes out with the new certificate (a refused handshake
        // or a 401 reads the file, if the watcher has not yet).
        let (status, presented, _) = get(&client, &server).await;
        assert_eq!((status, presented), (StatusCode::OK, next.fingerprint()));
        eventually("the identity store installs the new certificate", || {
            identity.generation() == generation
        })
        .await;
    }
    let after = server.arrivals().len();
    let (status, presented, _) = get(&client, &server).await;
    assert_eq!(status, StatusCode::OK);
    assert!(
        server.arrivals()[after..]
            .iter()
            .all(|a| a.fingerprint == presented),
        "a request went out with an old certificate"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_ca_bundle_moves_to_a_new_authority_under_the_same_client() {
    let tmp = tempfile::tempdir().unwrap();
    let old_ca = Ca::new("kubernetes");
    let new_ca = Ca::new("kubernetes 2027");
    let server = MtlsServer::start(&old_ca, &old_ca.server()).await;
    let identity = old_ca.client("workload-admin", HOUR);
    let url = server.url("");
    let both = format!("{}{}", old_ca.pem(), new_ca.pem());
    let inline = |ca_pem: &str| {
        kubeconfig(&Inline {
            server: &url,
            ca_pem,
            token: None,
            identity: Some(&identity),
        })
    };
    let volume = mount(tmp.path(), inline(&old_ca.pem()));
    let (config, credentials) = from_kubeconfig(&volume.token_path()).await;
    let (_, _, roots) = credentials_stores(&credentials);
    let roots = roots.expect("a CA store");
    let client = credentials.client(config).unwrap();
    assert_eq!(get(&client, &server).await.0, StatusCode::OK);

    // The bundle trusts both authorities, then the server moves to the new one, then the
    // bundle drops the old one: each step under the same client.
    volume.rotate(inline(&both)).unwrap();
    eventually("the bundle of both authorities", || roots.generation() == 2).await;
    server.serve_with(&new_ca.server());
    server.cut_connections();
    assert_eq!(get(&client, &server).await.0, StatusCode::OK);
    volume.rotate(inline(&new_ca.pem())).unwrap();
    eventually("the bundle of the new authority", || {
        roots.generation() == 3
    })
    .await;
    server.cut_connections();
    assert_eq!(get(&client, &server).await.0, StatusCode::OK);

    // And the old authority is no longer trusted: a server back on it is refused.
    server.serve_with(&old_ca.server());
    server.cut_connections();
    let request = http::Request::get("/").body(Body::empty()).unwrap();
    assert!(
        client.send(request).await.is_err(),
        "the old CA is still trusted"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broken_kubeconfig_keeps_every_credential_and_says_what_is_wrong() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = MtlsServer::start(&ca, &ca.server()).await;
    let url = server.url("");
    let identity = ca.client("workload-admin", HOUR);
    let good = Inline {
        server: &url,
        ca_pem: &ca.pem(),
        token: Some("hunter2-token-1"),
        identity: Some(&identity),
    };
    server.accept_tokens(&["hunter2-token-1"]);
    let volume = mount(tmp.path(), kubeconfig(&good));
    let path = volume.token_path();
    let (config, credentials) = from_kubeconfig(&path).await;
    let (token, identity_store, roots) = credentials_stores(&credentials);
    let (token, identity_store, roots) = (token.unwrap(), identity_store.unwrap(), roots.unwrap());
    let stores: [Box<dyn Fn() -> bearer_reload::Status>; 3] = [
        Box::new(move || token.status()),
        Box::new(move || identity_store.status()),
        Box::new(move || roots.status()),
    ];
    let client = credentials.client(config).unwrap();

    let full = kubeconfig(&good);
    let with_token = |token: &str| full.replace("hunter2-token-1", token);
    let cert_data = STANDARD.encode(&identity.cert_pem);
    let broken: [(&str, String, &str); 5] = [
        (
            "half written",
            full[..full.len() / 2].to_owned(),
            "does not parse",
        ),
        (
            "a half-written certificate",
            full.replace(&cert_data, &cert_data[..cert_data.len() / 2]),
            "client-certificate-data",
        ),
        (
            "a token that is no token",
            with_token("hunter2 token 2"),
            "not a valid token",
        ),
        (
            "no such context",
            full.replace(
                "\"current-context\":\"workload-admin@workload\"",
                "\"current-context\":\"other\"",
            ),
            "has no context \"other\"",
        ),
        ("empty", String::new(), "is empty"),
    ];
    for (what, text, says) in broken {
        volume.rotate(&text).unwrap();
        for status in &stores {
            let waited = tokio::time::timeout(DEADLINE, async {
                loop {
                    if status().last_error.is_some() {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            })
            .await;
            assert!(waited.is_ok(), "{what}: no error shown: {:?}", status());
            let status = status();
            let error = chain(status.last_error.as_ref().unwrap());
            assert!(
                error.contains(&path.display().to_string()),
                "{what}: {error}"
            );
            assert!(error.contains(says), "{what}: {error}");
            let mut cause: Option<&(dyn std::error::Error + 'static)> =
                status.last_error.as_ref().map(|e| e as _);
            while let Some(e) = cause {
                assert!(
                    !e.to_string().is_empty(),
                    "{what}: a cause says nothing: {error}"
                );
                cause = e.source();
            }
            assert!(
                !error.contains("hunter2"),
                "{what}: the error shows a secret: {error}"
            );
            assert_eq!(status.generation, 1, "{what}: a credential changed");
        }
        let (status, presented, sent) = get(&client, &server).await;
        assert_eq!(
            (status, presented.as_str(), sent.as_str()),
            (
                StatusCode::OK,
                identity.fingerprint().as_str(),
                "Bearer hunter2-token-1"
            ),
            "{what}"
        );
        // Fixed again: the errors clear, nothing changed.
        volume.rotate(&full).unwrap();
        for status in &stores {
            eventually("the error to clear", || status().last_error.is_none()).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_new_server_in_the_file_is_refused_and_the_client_stays_whole_on_the_old_one() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let old = MtlsServer::start(&ca, &ca.server()).await;
    let new = MtlsServer::start(&ca, &ca.server()).await;
    let identity = ca.client("workload-admin", HOUR);
    let (old_url, new_url) = (old.url(""), new.url(""));
    let inline = |server, token| {
        kubeconfig(&Inline {
            server,
            ca_pem: &ca.pem(),
            token: Some(token),
            identity: Some(&identity),
        })
    };
    let volume = mount(tmp.path(), inline(&old_url, "t1"));
    let (config, credentials) = from_kubeconfig(&volume.token_path()).await;
    let token = credentials_token(&credentials);
    let client = credentials.client(config).unwrap();
    assert_eq!(get(&client, &old).await.0, StatusCode::OK);

    // Another server and another token in one write: neither is taken, never the old
    // server with the new token; the status says why.
    volume.rotate(inline(&new_url, "t2")).unwrap();
    let waited = tokio::time::timeout(DEADLINE, async {
        while token.status().last_error.is_none() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    })
    .await;
    assert!(waited.is_ok(), "no error: {:?}", token.status());
    let error = chain(token.status().last_error.as_ref().unwrap());
    assert!(
        error.contains(&format!("changed from {old_url} to {new_url}")),
        "{error}"
    );
    assert!(error.contains("build a new client"), "{error}");
    let (status, _, sent) = get(&client, &old).await;
    assert_eq!((status, sent.as_str()), (StatusCode::OK, "Bearer t1"));
    assert!(
        new.arrivals().is_empty(),
        "a request went to the new server"
    );

    // A new client from the file follows it.
    let (config, credentials) = from_kubeconfig(&volume.token_path()).await;
    let client = credentials.client(config).unwrap();
    let (status, _, sent) = get(&client, &new).await;
    assert_eq!((status, sent.as_str()), (StatusCode::OK, "Bearer t2"));
}

/// Reads of each kubeconfig file since the last call, by its store
/// (`bearer_reload_reloads_total` of the sources named `kubeconfig <path> ...`, every
/// trigger; the debugging recorder's snapshot takes the counts).
fn kubeconfig_reads(snapshotter: &metrics_util::debugging::Snapshotter) -> BTreeMap<String, u64> {
    let mut reads = BTreeMap::new();
    for (key, _, _, value) in snapshotter.snapshot().into_vec() {
        let key = key.key();
        if key.name() != "bearer_reload_reloads_total" {
            continue;
        }
        let Some(source) = key.labels().find(|l| l.key() == "source") else {
            continue;
        };
        if !source.value().starts_with("kubeconfig ") {
            continue;
        }
        if let metrics_util::debugging::DebugValue::Counter(n) = value {
            *reads.entry(source.value().to_owned()).or_default() += n;
        }
    }
    reads
}

/// The process's metrics recorder, for the one test that reads it, in a process of its own
/// (`support::alone`).
fn recorder() -> &'static metrics_util::debugging::Snapshotter {
    static SNAPSHOTTER: OnceLock<metrics_util::debugging::Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = metrics_util::debugging::DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder.install().unwrap();
        snapshotter
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_thousand_kubeconfigs_in_one_directory_read_once_per_rotated_file() {
    if !support::alone::in_own_process(
        module_path!(),
        "a_thousand_kubeconfigs_in_one_directory_read_once_per_rotated_file",
    ) {
        return;
    }
    const N: usize = 1000;
    const ROTATED: usize = 25;
    let snapshotter = recorder();
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let server = "https://127.0.0.1:6443";
    let write = |path: &Path, token: &str| {
        // As an agent writes: a temporary file renamed over the kubeconfig.
        let temporary = path.with_extension("tmp");
        std::fs::write(
            &temporary,
            kubeconfig(&Inline {
                server,
                ca_pem: &ca.pem(),
                token: Some(token),
                identity: None,
            }),
        )
        .unwrap();
        std::fs::rename(&temporary, path).unwrap();
    };
    let paths: Vec<PathBuf> = (0..N)
        .map(|i| tmp.path().join(format!("cluster-{i:04}.kubeconfig")))
        .collect();
    // Every file written before the first store watches the directory: the stores see
    // only the rotations.
    for (i, path) in paths.iter().enumerate() {
        write(path, &format!("first-{i}"));
    }
    let mut tokens = Vec::new();
    for path in &paths {
        let (_, credentials) = from_kubeconfig(path).await;
        let (token, _, roots) = credentials_stores(&credentials);
        assert!(roots.is_some(), "the inline CA bundle is followed");
        tokens.push(token.unwrap());
    }
    let source = |path: &Path| {
        format!(
            "kubeconfig {} (context workload-admin@workload)",
            path.display()
        )
    };
    let before = kubeconfig_reads(snapshotter);

    let rotated: Vec<usize> = (0..ROTATED).map(|k| (k * 7919) % N).collect();
    for &i in &rotated {
        write(&paths[i], &format!("second-{i}"));
        support::wait_for_token(&tokens[i], &format!("second-{i}")).await;
    }
    // The trailing events of the last renames have had their reads once the files of two
    // stores written after them were seen.
    let after = kubeconfig_reads(snapshotter);
    for (i, path) in paths.iter().enumerate() {
        let source = source(path);
        assert_eq!(before.get(&source), Some(&1), "{source}: read once at load");
        let reads = after.get(&source).copied().unwrap_or_default();
        let expected = u64::from(rotated.contains(&i));
        assert_eq!(reads, expected, "{source}: {reads} reads");
        let token = tokens[i].current();
        let expected = if rotated.contains(&i) {
            "second"
        } else {
            "first"
        };
        assert!(token.header_value().to_str().unwrap().contains(expected));
    }
}

/// A kubeconfig whose inline CA bundle is past a megabyte (a corporate bundle, base64 in
/// the file) loads: a kubeconfig's store takes up to 16 MiB, where a token's takes 64 KiB.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kubeconfig_with_a_ca_bundle_past_a_megabyte_loads() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("workload");
    let bundle = format!("{}{}", support::pki::bundle(100, 16_000), ca.pem());
    let text = kubeconfig(&Inline {
        server: "https://127.0.0.1:6443",
        ca_pem: &bundle,
        token: Some("t0"),
        identity: None,
    });
    assert!(text.len() > 2_000_000, "{} bytes", text.len());
    let path = dir.path().join("config");
    std::fs::write(&path, text).unwrap();
    let (_, credentials) = from_kubeconfig(&path).await;
    let roots = credentials
        .root_store()
        .expect("the inline bundle is the file's");
    assert_eq!(roots.certificates().len(), 101);
}

/// The context a caller chooses is the one followed, and each credential's store says which
/// of the file's credentials it holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_chosen_context_is_followed_and_each_store_names_its_part() {
    let tmp = tempfile::tempdir().unwrap();
    let ca = Ca::new("kubernetes");
    let identity = ca.client("workload-admin", HOUR);
    let inline = Inline {
        server: "https://127.0.0.1:6443",
        ca_pem: &ca.pem(),
        token: Some("token-a"),
        identity: Some(&identity),
    };
    // A second context, `other`, whose user has a token of its own.
    let mut text: serde_json::Value = serde_json::from_str(&kubeconfig(&inline)).unwrap();
    text["users"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "other-user", "user": {"token": "token-b"}}));
    text["contexts"]
        .as_array_mut()
        .unwrap()
        .push(json!({"name": "other", "context": {
            "cluster": "workload", "user": "other-user",
        }}));
    let path = tmp.path().join("config");
    std::fs::write(&path, text.to_string()).unwrap();
    support::tls::install_ring();

    let options = KubeConfigOptions {
        context: Some("other".into()),
        ..KubeConfigOptions::default()
    };
    let (_, chosen) = Credentials::from_kubeconfig(&path, &options).await.unwrap();
    let token = chosen.token_store().expect("an inline token");
    assert_eq!(token.current().header_value(), "Bearer token-b");
    assert!(chosen.identity_store().is_none());

    let (_, current) = from_kubeconfig(&path).await;
    let (token, identity_store, roots) = credentials_stores(&current);
    let token = token.unwrap();
    assert_eq!(token.current().header_value(), "Bearer token-a");
    for (status, part) in [
        (token.status(), ": token"),
        (identity_store.unwrap().status(), ": client certificate"),
        (roots.unwrap().status(), ": CA bundle"),
    ] {
        assert!(
            status.source.ends_with(part),
            "{} for {part}",
            status.source
        );
    }
}

/// A kubeconfig whose token is inline but whose CA is a file it names: the token follows
/// the kubeconfig, the bundle is read from its own file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_inline_token_beside_a_ca_file_reads_the_bundle_from_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let ca = Ca::new("workload");
    let ca_file = dir.path().join("ca.crt");
    std::fs::write(&ca_file, ca.pem()).unwrap();
    let text = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "workload", "cluster": {
            "server": "https://127.0.0.1:6443",
            "certificate-authority": ca_file,
        }}],
        "users": [{"name": "admin", "user": {"token": "t0"}}],
        "contexts": [{"name": "admin@workload", "context": {
            "cluster": "workload", "user": "admin",
        }}],
        "current-context": "admin@workload",
    })
    .to_string();
    let path = dir.path().join("config");
    std::fs::write(&path, text).unwrap();
    let (_, credentials) = from_kubeconfig(&path).await;
    let (token, _, roots) = credentials_stores(&credentials);
    assert_eq!(
        token.expect("the inline token").current().header_value(),
        "Bearer t0"
    );
    let roots = roots.expect("the CA file's store");
    let source = roots.status().source;
    assert!(source.contains(&ca_file.display().to_string()), "{source}");
    assert_eq!(roots.certificates().len(), 1);
}
