use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::{Value, json};

use super::*;
use crate::source::Trigger;

const V1: &str = "client.authentication.k8s.io/v1";
const V1BETA1: &str = "client.authentication.k8s.io/v1beta1";
/// Looks like a JWT: must never reach an error message.
const SECRET: &str = "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJhbGljZSJ9.c2lnbmF0dXJlMTIz";

/// Writes an executable `#!/bin/sh` script `name` in `dir`.
fn script(dir: &Path, name: &str, body: &str) -> PathBuf {
    let path = dir.join(name);
    crate::test_support::write_script(&path, body);
    path
}

/// A plugin that prints `doc` (written to a file beside it) and counts its runs.
fn printing(dir: &Path, doc: &Value) -> ExecSource {
    std::fs::write(dir.join("out.json"), doc.to_string()).unwrap();
    let body = format!(
        "echo run >> '{d}/runs'\ncat '{d}/out.json'",
        d = dir.display()
    );
    ExecSource::new(script(dir, "plugin", &body)).interactive_mode(InteractiveMode::Never)
}

impl ExecSource {
    /// Whether standard input counts as a terminal, instead of asking the OS.
    fn stdin_terminal(mut self, is_terminal: bool) -> Self {
        self.stdin_terminal = Some(is_terminal);
        self
    }

    /// Tells the plugin about the cluster (a kubeconfig's `provideClusterInfo: true`).
    fn cluster(mut self, cluster: ClusterInfo) -> Self {
        self.cluster = Some(cluster);
        self
    }

    /// Whether a certificate waits to be handed over.
    #[cfg(feature = "tls")]
    fn holds_handover(&self) -> bool {
        crate::sync::lock(&self.handover).is_some()
    }
}

/// Hand-overs alive, by the command of the plugin whose run made them: each test's plugin
/// is in a directory of its own, so each test sees its own.
#[cfg(feature = "tls")]
static LIVE_HANDOVERS: std::sync::Mutex<std::collections::BTreeMap<String, usize>> =
    std::sync::Mutex::new(std::collections::BTreeMap::new());

/// Counts itself in [`LIVE_HANDOVERS`] while it lives, as part of a hand-over.
#[cfg(feature = "tls")]
pub(super) struct Live(String);

#[cfg(feature = "tls")]
impl Live {
    pub(super) fn new(command: String) -> Self {
        *crate::sync::lock(&LIVE_HANDOVERS)
            .entry(command.clone())
            .or_default() += 1;
        Live(command)
    }
}

/// The hand-overs alive that runs of `command` made.
#[cfg(feature = "tls")]
fn live_handovers(command: &std::path::Path) -> usize {
    let live = crate::sync::lock(&LIVE_HANDOVERS);
    live.get(&command.display().to_string())
        .copied()
        .unwrap_or(0)
}

#[cfg(feature = "tls")]
impl Drop for Live {
    fn drop(&mut self) {
        *crate::sync::lock(&LIVE_HANDOVERS)
            .get_mut(&self.0)
            .expect("counted") -= 1;
    }
}

fn credential(api: &str, status: Value) -> Value {
    json!({"kind": "ExecCredential", "apiVersion": api, "status": status})
}

fn runs(dir: &Path) -> usize {
    std::fs::read_to_string(dir.join("runs"))
        .map(|s| s.lines().count())
        .unwrap_or(0)
}

async fn fetch(source: &ExecSource) -> Result<Fetched, ExecError> {
    source
        .fetch(FetchContext::new(Trigger::Call, 64 * 1024))
        .await
}

#[tokio::test]
async fn runs_the_plugin_with_its_args_env_and_exec_info() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let body = format!(
        "printf '%s\\n' \"$@\" > '{d}/args'\n\
         printf '%s' \"$KUBERNETES_EXEC_INFO\" > '{d}/info'\n\
         printf '%s|%s' \"$REGION\" \"$HOME\" > '{d}/env'\n\
         echo '{{\"kind\":\"ExecCredential\",\"apiVersion\":\"{V1}\",\
         \"status\":{{\"token\":\"tok-1\",\"expirationTimestamp\":\"2099-01-02T03:04:05Z\"}}}}'"
    );
    let mut cluster = ClusterInfo {
        server: "https://10.0.0.1:6443".into(),
        ..ClusterInfo::default()
    };
    cluster.certificate_authority_data = Some(b"baz".to_vec());
    cluster.tls_server_name = Some("kubernetes".into());
    cluster.config = Some(json!({"audience": "snorlax"}));
    let source = ExecSource::new(script(dir.path(), "plugin", &body))
        .args(["eks", "get-token"])
        .arg("--cluster-name=prod")
        .env("REGION", "eu-west-1")
        .drop_env("HOME")
        .interactive_mode(InteractiveMode::Never)
        .cluster(cluster);
    let fetched = fetch(&source).await.unwrap();
    assert_eq!(fetched.bytes(), b"tok-1");
    let exp: jiff::Timestamp = "2099-01-02T03:04:05Z".parse().unwrap();
    assert_eq!(fetched.expires_at(), Some(SystemTime::from(exp)));

    let read = |name: &str| std::fs::read_to_string(dir.path().join(name)).unwrap();
    assert_eq!(read("args"), "eks\nget-token\n--cluster-name=prod\n");
    assert_eq!(read("env"), "eu-west-1|", "REGION set, HOME dropped");
    // client-go's "beta-with-cluster-and-provide-cluster-info-is-serialized", in v1.
    let info: Value = serde_json::from_str(&read("info")).unwrap();
    assert_eq!(
        info,
        json!({
            "kind": "ExecCredential",
            "apiVersion": V1,
            "spec": {
                "cluster": {
                    "server": "https://10.0.0.1:6443",
                    "tls-server-name": "kubernetes",
                    "certificate-authority-data": "YmF6",
                    "config": {"audience": "snorlax"},
                },
                "interactive": false,
            },
        })
    );
}

#[test]
fn exec_info_without_a_cluster_is_client_gos_basic_request() {
    let info: Value =
        serde_json::from_str(&credential::exec_info(ApiVersion::V1Beta1, false, None)).unwrap();
    let expected = r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1beta1","spec":{"interactive":false}}"#;
    assert_eq!(info, serde_json::from_str::<Value>(expected).unwrap());
}

#[tokio::test]
async fn v1beta1_is_accepted_and_the_version_must_match() {
    let dir = tempfile::tempdir().unwrap();
    let doc = credential(V1BETA1, json!({"token": "beta"}));
    let source = printing(dir.path(), &doc).api_version(ApiVersion::V1Beta1);
    let fetched = fetch(&source).await.unwrap();
    assert_eq!(fetched.bytes(), b"beta");
    assert_eq!(fetched.expires_at(), None, "no expiry: kept until a 401");

    let err = fetch(&source.api_version(ApiVersion::V1))
        .await
        .unwrap_err();
    assert!(matches!(err, ExecError::WrongApiVersion { .. }), "{err:?}");
    let msg = err.to_string();
    assert!(
        msg.contains(&format!(
            "configured for apiVersion {V1} but printed \"{V1BETA1}\""
        )),
        "{msg}"
    );
}

/// Each broken credential, and the error that names it.
#[tokio::test]
async fn a_broken_credential_gets_an_error_that_says_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let cases: [(Value, &str); 12] = [
        (
            json!([SECRET]),
            "invalid JSON: the document is not a JSON object",
        ),
        (
            json!({"kind": "Secret", "apiVersion": V1, "status": {"token": SECRET}}),
            "printed kind \"Secret\", not ExecCredential",
        ),
        (
            json!({"apiVersion": V1, "status": {"token": SECRET}}),
            "printed kind none",
        ),
        (credential(V1, Value::Null), "without a status"),
        // A value is shown up to 64 characters.
        (
            json!({"kind": "k".repeat(64), "apiVersion": V1}),
            &format!("printed kind \"{}\",", "k".repeat(64)),
        ),
        (
            json!({"kind": "k".repeat(65), "apiVersion": V1}),
            &format!("printed kind \"{}…\",", "k".repeat(64)),
        ),
        (
            credential(V1, json!({"token": ""})),
            "without a token (status.token)",
        ),
        (
            credential(V1, json!({"expirationTimestamp": "2099-01-01T00:00:00Z"})),
            "without a token",
        ),
        (
            credential(
                V1,
                json!({"token": SECRET, "expirationTimestamp": "tomorrow"}),
            ),
            "not an RFC 3339 time",
        ),
        (
            credential(
                V1,
                json!({"clientCertificateData": "cert", "clientKeyData": SECRET}),
            ),
            "returned a client certificate",
        ),
        // Either half alone is still a certificate credential, not a missing token.
        (
            credential(V1, json!({"clientCertificateData": "cert"})),
            "returned a client certificate",
        ),
        (
            credential(V1, json!({"clientKeyData": SECRET})),
            "returned a client certificate",
        ),
    ];
    for (doc, want) in cases {
        let source = printing(dir.path(), &doc);
        let msg = fetch(&source).await.unwrap_err().to_string();
        assert!(msg.starts_with("the plugin "), "{msg}");
        assert!(msg.contains(want), "{doc}: {msg}");
        assert!(!msg.contains("c2lnbmF0dXJl"), "{msg}");
    }
    std::fs::write(dir.path().join("out.json"), "{\"kind\": ").unwrap();
    let err = fetch(&printing_raw(dir.path())).await.unwrap_err();
    assert!(matches!(err, ExecError::InvalidJson { .. }), "{err:?}");
    assert!(err.to_string().contains("EOF while parsing"), "{err}");
    // A kind that is a token is redacted.
    let doc = json!({"kind": SECRET, "apiVersion": V1});
    let msg = fetch(&printing(dir.path(), &doc))
        .await
        .unwrap_err()
        .to_string();
    assert!(msg.contains("printed kind \"[redacted]\""), "{msg}");
}

/// The plugin of `printing`, printing `out.json` as it is.
fn printing_raw(dir: &Path) -> ExecSource {
    let body = format!("cat '{}/out.json'", dir.display());
    ExecSource::new(script(dir, "raw", &body)).interactive_mode(InteractiveMode::Never)
}

#[tokio::test]
async fn a_failing_plugin_reports_its_status_and_its_stderr_redacted() {
    let dir = tempfile::tempdir().unwrap();
    let body = format!(
        "echo 'error: refresh token {SECRET} has expired' >&2\n\
         echo '\x1b[31mrun `aws sso login --profile prod`\x1b[0m' >&2\n\
         exit 3"
    );
    let source = ExecSource::new(script(dir.path(), "failing", &body))
        .interactive_mode(InteractiveMode::Never);
    let err = fetch(&source).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the plugin exited with status 3; stderr: error: refresh token [redacted] has \
         expired\nrun `aws sso login --profile prod`"
    );

    let killed = ExecSource::new(script(dir.path(), "killed", "kill -9 $$"))
        .interactive_mode(InteractiveMode::Never);
    let msg = fetch(&killed).await.unwrap_err().to_string();
    assert!(msg.ends_with("was killed by signal 9 (no stderr)"), "{msg}");
}

#[tokio::test]
async fn a_long_stderr_keeps_its_tail_and_never_half_a_token() {
    let dir = tempfile::tempdir().unwrap();
    // Noise, a long token, then exactly 2044 bytes: the 2 KiB tail begins with the token's
    // last 4 characters, "MTIz", which alone look like nothing.
    let body = format!(
        "i=0; while [ $i -lt 200 ]; do echo 'progress: still working on it' >&2; i=$((i+1)); done\n\
         i=0; while [ $i -lt 20 ]; do printf '%s' '{SECRET}' >&2; i=$((i+1)); done\n\
         printf '\\n' >&2\n\
         i=0; while [ $i -lt 168 ]; do printf 'detail line\\n' >&2; i=$((i+1)); done\n\
         printf 'fatal: the session is gone\\n' >&2\nexit 1"
    );
    assert!(SECRET.ends_with("MTIz"));
    let source = ExecSource::new(script(dir.path(), "noisy", &body))
        .interactive_mode(InteractiveMode::Never);
    let msg = fetch(&source).await.unwrap_err().to_string();
    assert!(
        msg.ends_with("detail line\nfatal: the session is gone"),
        "{msg}"
    );
    assert!(msg.contains("stderr: …detail line\n"), "{msg}");
    assert!(msg.len() < redact::STDERR_TAIL + 200, "{}", msg.len());
    assert!(!msg.contains("MTIz") && !msg.contains("eyJ"), "{msg}");
}

#[tokio::test]
async fn a_command_not_found_shows_the_install_hint() {
    let dir = tempfile::tempdir().unwrap();
    let missing = dir.path().join("no-such-plugin");
    let source =
        ExecSource::new(&missing).install_hint("\x1b[1mbrew install no-such-plugin\x1b[0m\n");
    let err = fetch(&source).await.unwrap_err();
    assert_eq!(
        err.to_string(),
        "the command was not found; brew install no-such-plugin"
    );
    assert!(
        matches!(&err, ExecError::NotFound { command, .. } if *command == missing.display().to_string())
    );
    let bare = ExecSource::new("bearer-reload-no-such-plugin");
    let err = fetch(&bare).await.unwrap_err();
    assert_eq!(err.to_string(), "the command was not found");

    // Not executable: found, but cannot start.
    let path = dir.path().join("not-executable");
    std::fs::write(&path, "#!/bin/sh\n").unwrap();
    let err = fetch(&ExecSource::new(&path)).await.unwrap_err();
    assert!(matches!(err, ExecError::Start { .. }), "{err:?}");
    assert!(err.to_string().contains("could not be started"), "{err}");
}

#[tokio::test]
async fn output_over_the_cap_is_refused_without_waiting_for_the_plugin() {
    let dir = tempfile::tempdir().unwrap();
    // Prints 4 KiB, then would run for ten minutes: the run ends at the cap.
    let body = "head -c 4096 /dev/zero | tr '\\0' 'a'\nexec sleep 600";
    let source = ExecSource::new(script(dir.path(), "chatty", body))
        .interactive_mode(InteractiveMode::Never)
        .max_output(1024);
    let started = Instant::now();
    let err = fetch(&source).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(
        err.to_string(),
        "the plugin printed more than 1024 bytes; refused"
    );
}

#[tokio::test]
async fn the_default_cap_takes_big_tokens_and_stops_at_a_mebibyte() {
    let dir = tempfile::tempdir().unwrap();
    // Cloud providers' tokens run to kilobytes (Azure's are 2 to 3 KiB).
    let token = "x".repeat(6000);
    let fetched = fetch(&printing(
        dir.path(),
        &credential(V1, json!({"token": token})),
    ))
    .await
    .unwrap();
    assert_eq!(fetched.bytes(), token.as_bytes());
    // The same credential and a mebibyte of trailing blanks: one byte too many.
    let body = format!(
        "cat '{}/out.json'
head -c 1048576 /dev/zero | tr '\\0' ' '",
        dir.path().display()
    );
    let source = ExecSource::new(script(dir.path(), "padded", &body))
        .interactive_mode(InteractiveMode::Never);
    let err = fetch(&source).await.unwrap_err();
    assert!(
        err.to_string().contains("printed more than 1048576 bytes"),
        "{err}"
    );
}

#[tokio::test]
async fn interactive_always_without_a_terminal_fails_before_running() {
    let dir = tempfile::tempdir().unwrap();
    let doc = credential(V1, json!({"token": "t"}));
    let source = printing(dir.path(), &doc).interactive_mode(InteractiveMode::Always);
    let err = fetch(&source.clone().stdin_terminal(false))
        .await
        .unwrap_err();
    assert!(matches!(err, ExecError::NeedsTerminal { .. }), "{err:?}");
    assert!(
        err.to_string()
            .contains("needs a terminal (interactiveMode: Always)")
    );
    assert_eq!(runs(dir.path()), 0, "the plugin was not run");

    // With a terminal it runs, told that it is interactive; IfAvailable without one runs
    // detached, Never always does.
    let info = |mode, terminal| {
        let s = ExecSource::new("x")
            .interactive_mode(mode)
            .stdin_terminal(terminal);
        s.shares_terminal().unwrap()
    };
    assert!(info(InteractiveMode::Always, true));
    assert!(info(InteractiveMode::IfAvailable, true));
    assert!(!info(InteractiveMode::IfAvailable, false));
    assert!(!info(InteractiveMode::Never, true));
}

#[test]
fn a_relative_command_with_a_separator_resolves_against_the_kubeconfig_directory() {
    let dir = Path::new("/home/me/.kube");
    let resolve = |c: &str| ExecSource::new(c).resolve_against(dir).command().to_owned();
    assert_eq!(
        resolve("./bin/auth"),
        Path::new("/home/me/.kube/./bin/auth")
    );
    assert_eq!(resolve("bin/auth"), Path::new("/home/me/.kube/bin/auth"));
    assert_eq!(
        resolve("aws"),
        Path::new("aws"),
        "a bare name stays a PATH lookup"
    );
    assert_eq!(resolve("/usr/bin/aws"), Path::new("/usr/bin/aws"));
}

#[test]
fn debug_never_shows_env_values_or_arguments() {
    let source = ExecSource::new("kubectl")
        .args([
            "oidc-login",
            "get-token",
            "--oidc-client-secret=hunter2-arg",
        ])
        .env("AWS_SECRET_ACCESS_KEY", "hunter2-secret");
    let debug = format!("{source:?}");
    assert!(
        debug.contains("AWS_SECRET_ACCESS_KEY")
            && debug.contains("<3 arguments>")
            && !debug.contains("hunter2"),
        "{debug}"
    );
    let source = ExecSource::new("aws");
    assert_eq!(source.describe(), "exec plugin aws");
    assert_eq!(source.default_fetch_timeout(), Duration::from_secs(60));
    assert_eq!(source.default_refresh_interval(), None);
}

#[test]
fn redaction_takes_out_what_looks_like_a_token_and_keeps_words() {
    let r = redact::redact;
    assert_eq!(
        r(&format!("token {SECRET} expired")),
        "token [redacted] expired"
    );
    assert_eq!(
        r("k8s-aws-v1.aHR0cHM6Ly9zdHMuYW1hem9uYXdzLmNvbS8"),
        "[redacted]"
    );
    assert_eq!(
        r("abcdef.0123456789abcdef"),
        "[redacted]",
        "a bootstrap token"
    );
    assert_eq!(r("0123456789abcdef0123"), "[redacted]", "hex");
    assert_eq!(
        r("error: could not reach /usr/local/bin/authenticator"),
        "error: could not reach /usr/local/bin/authenticator"
    );
    assert_eq!(
        r("short Ab1 words-only-here-lowercase"),
        "short Ab1 words-only-here-lowercase"
    );
    assert_eq!(
        r("apiVersion client.authentication.k8s.io/v1alpha1 is not supported"),
        "apiVersion client.authentication.k8s.io/v1alpha1 is not supported"
    );
    assert_eq!(r("abc.io/v1beta1x0123456789"), "[redacted]");
    // A group with a hyphen is still an API version; one with capitals is no API group,
    // and with a digit it looks like a token.
    assert_eq!(
        r("apiVersion pinniped-login.concierge.io/v1 is not supported"),
        "apiVersion pinniped-login.concierge.io/v1 is not supported"
    );
    assert_eq!(r("K8sAwsToken.Example/v1"), "[redacted]");
    // Sixteen characters is the shortest that can be a token; fifteen is left.
    assert_eq!(r("abcdefghijklmn12"), "[redacted]");
    assert_eq!(r("abcdefghijklm12"), "abcdefghijklm12");
}

#[test]
fn stderr_is_cut_only_past_its_tail_and_loses_its_control_characters() {
    // Exactly the tail: whole, not marked as cut.
    let mut line = "word ".repeat(redact::STDERR_TAIL / 5);
    line.push_str(&"w".repeat(redact::STDERR_TAIL - line.len()));
    let mut tail = redact::Tail::default();
    tail.push(line.as_bytes());
    assert_eq!(tail.into_message(), line);
    // One more byte: cut, and the word at the cut dropped (it may be the end of one).
    let mut tail = redact::Tail::default();
    tail.push(format!("x{line}").as_bytes());
    assert_eq!(tail.into_message(), format!("…{}", &line["word ".len()..]));

    assert_eq!(
        redact::strip_escapes("\x1b[31mred\x1b[0m\tbell\x07\r\nnext"),
        "red bell  \nnext"
    );
}

#[tokio::test]
async fn the_expiry_is_the_credentials() {
    let dir = tempfile::tempdir().unwrap();
    let at = UNIX_EPOCH + Duration::from_secs(4_102_444_800); // 2100-01-01
    let doc = credential(
        V1,
        json!({"token": "t", "expirationTimestamp": "2100-01-01T00:00:00Z"}),
    );
    assert_eq!(
        fetch(&printing(dir.path(), &doc))
            .await
            .unwrap()
            .expires_at(),
        Some(at)
    );
    let doc = credential(
        V1,
        json!({"token": "t", "expirationTimestamp": "2100-01-01T01:00:00+01:00"}),
    );
    assert_eq!(
        fetch(&printing(dir.path(), &doc))
            .await
            .unwrap()
            .expires_at(),
        Some(at)
    );
}

#[cfg(feature = "kube")]
mod from_kube {
    use ::kube::config::ExecConfig;

    use super::*;

    fn exec(value: Value) -> ExecConfig {
        serde_json::from_value(value).unwrap()
    }

    #[test]
    fn a_kubeconfig_exec_section_becomes_a_source() {
        let mut config = exec(json!({
            "apiVersion": V1BETA1,
            "command": "aws",
            "args": ["eks", "get-token"],
            "env": [{"name": "AWS_PROFILE", "value": "prod"}, {"name": "EMPTY"}],
            "installHint": "install the aws cli",
            "interactiveMode": "Never",
            "provideClusterInfo": true,
        }));
        // kube's own: variables the plugin does not inherit.
        config.drop_env = Some(vec!["AWS_SESSION_TOKEN".into()]);
        config.cluster = Some(::kube::config::ExecAuthCluster {
            server: Some("https://k".into()),
            certificate_authority_data: Some(b"ca".to_vec()),
            ..Default::default()
        });
        let source = ExecSource::try_from(&config).unwrap();
        assert_eq!(source.command(), Path::new("aws"));
        assert_eq!(source.args, ["eks", "get-token"]);
        assert_eq!(
            source.env,
            [
                ("AWS_PROFILE".into(), "prod".into()),
                ("EMPTY".into(), "".into())
            ]
        );
        assert_eq!(source.drop_env, ["AWS_SESSION_TOKEN"]);
        assert_eq!(source.api_version, ApiVersion::V1Beta1);
        assert_eq!(source.interactive, InteractiveMode::Never);
        assert_eq!(source.install_hint.as_deref(), Some("install the aws cli"));
        let cluster = source.cluster.unwrap();
        assert_eq!(
            (cluster.server.as_str(), cluster.certificate_authority_data),
            ("https://k", Some(b"ca".to_vec()))
        );
    }

    /// client-go's defaults (clientcmd's `SetDefaults_ExecConfig`): `IfAvailable` for a
    /// `v1beta1` section without `interactiveMode`; a `v1` section must say.
    #[test]
    fn interactive_mode_defaults_as_client_go_does() {
        let modes = [
            ("Never", InteractiveMode::Never),
            ("IfAvailable", InteractiveMode::IfAvailable),
            ("Always", InteractiveMode::Always),
        ];
        for version in [V1, V1BETA1] {
            for (given, want) in modes {
                let config = exec(json!({"command": "aws", "apiVersion": version,
                                         "interactiveMode": given}));
                let source = ExecSource::try_from(&config).unwrap();
                assert_eq!(source.interactive, want, "{version} {given}");
            }
        }
        let v1beta1 = exec(json!({"command": "aws", "apiVersion": V1BETA1}));
        let source = ExecSource::try_from(&v1beta1).unwrap();
        assert_eq!(source.interactive, InteractiveMode::IfAvailable);
        let v1 = exec(json!({"command": "aws", "apiVersion": V1}));
        assert!(ExecSource::try_from(&v1).is_err());
    }

    #[test]
    fn an_unusable_exec_section_is_an_error_naming_the_command() {
        let cases = [
            (
                json!({"apiVersion": V1}),
                "exec plugin (no command): the exec section has no command".to_owned(),
            ),
            (
                json!({"command": "aws"}),
                format!(
                    "exec plugin aws: the exec section has no apiVersion (use {V1} or {V1BETA1})"
                ),
            ),
            (
                json!({"command": "aws", "apiVersion": "client.authentication.k8s.io/v1alpha1"}),
                format!(
                    "apiVersion \"client.authentication.k8s.io/v1alpha1\" is not supported \
                     (use {V1} or {V1BETA1})"
                ),
            ),
            (
                json!({"command": "aws", "apiVersion": V1}),
                format!(
                    "exec plugin aws: the exec section has no interactiveMode, which {V1} \
                     requires (Never, IfAvailable or Always)"
                ),
            ),
            (
                json!({"command": "aws", "apiVersion": V1, "interactiveMode": "Never",
                       "env": [{"value": "x"}]}),
                "exec plugin aws: an env entry has no name".to_owned(),
            ),
            (
                json!({"command": "aws", "apiVersion": V1, "interactiveMode": "Never",
                       "provideClusterInfo": true}),
                "provideClusterInfo is set but the config holds no cluster info".to_owned(),
            ),
        ];
        for (config, want) in cases {
            let msg = ExecSource::try_from(&exec(config.clone()))
                .unwrap_err()
                .to_string();
            assert!(msg.contains(&want), "{config}: {msg}");
        }
    }
}

/// A credential with a token, a client certificate and its key.
#[cfg(feature = "tls")]
fn token_and_certificate() -> Value {
    credential(
        V1,
        json!({
            "token": "tok-1",
            "clientCertificateData": "CERT",
            "clientKeyData": SECRET,
            "expirationTimestamp": "2099-01-02T03:04:05Z",
        }),
    )
}

#[cfg(feature = "tls")]
#[tokio::test]
async fn a_handed_over_key_leaves_every_clone_once_taken() {
    let dir = tempfile::tempdir().unwrap();
    let token = printing(dir.path(), &token_and_certificate());
    let identity = token.clone().client_certificate();
    assert!(!token.holds_handover());
    let fetched = fetch(&token).await.unwrap();
    assert_eq!(fetched.bytes(), b"tok-1");
    // The clones share it until the identity's first fetch takes it, instead of a run.
    assert!(token.holds_handover() && identity.holds_handover());
    assert_eq!(live_handovers(&dir.path().join("plugin")), 1);
    let handed = fetch(&identity).await.unwrap();
    assert_eq!(runs(dir.path()), 1);
    assert_eq!(handed.bytes(), format!("CERT\n{SECRET}").as_bytes());
    let expiry = "2099-01-02T03:04:05Z".parse::<jiff::Timestamp>().unwrap();
    assert_eq!(handed.expires_at(), Some(SystemTime::from(expiry)));
    assert!(!token.holds_handover() && !identity.holds_handover());
    assert_eq!(live_handovers(&dir.path().join("plugin")), 0);
    // Later token runs hand over nothing (a newer certificate is the identity's to run for).
    fetch(&token).await.unwrap();
    assert!(!token.holds_handover());
    assert_eq!(live_handovers(&dir.path().join("plugin")), 0);
}

#[cfg(all(feature = "kube", feature = "tls"))]
#[tokio::test]
async fn a_key_no_identity_store_took_is_dropped_once_the_credentials_are_loaded() {
    // A config that verifies no server: kube's own TLS handles the certificate, so no
    // identity store takes the key the token's run got. It was kept with the token's
    // store for that store's life.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("out.json"),
        token_and_certificate().to_string(),
    )
    .unwrap();
    let body = format!("cat '{}/out.json'", dir.path().display());
    let exec = ::kube::config::ExecConfig {
        api_version: Some(V1.into()),
        command: Some(script(dir.path(), "plugin", &body).display().to_string()),
        interactive_mode: Some(::kube::config::ExecInteractiveMode::Never),
        ..Default::default()
    };
    let mut config = ::kube::Config::new("https://127.0.0.1:6443".parse().unwrap());
    config.auth_info.exec = Some(exec);
    config.accept_invalid_certs = true;
    let credentials = crate::kube::Credentials::load(&config).await.unwrap();
    let token = credentials.token_store().expect("a token store");
    assert_eq!(token.current().header_value(), "Bearer tok-1");
    assert_eq!(live_handovers(&dir.path().join("plugin")), 0);
    drop(credentials);
}
