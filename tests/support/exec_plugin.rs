//! A real exec credential plugin for tests: a `#!/bin/sh` script in a temp directory that
//! prints the `ExecCredential` the test wrote beside it, and counts its runs.
//!
//! What the script does on each run, in order, steered by files the test creates:
//! 1. appends a line to `runs` (so a run counts from its start);
//! 2. while `hold` exists, waits (a slow plugin, released by the test);
//! 3. if `hang` exists, writes its pid to `pid` and becomes `sleep 600` (a hung plugin);
//! 4. if `fail` exists, prints it on stderr and exits with status 1;
//! 5. prints `credential`.
//!
//! Writes its kubeconfig through `kube_api.rs` and its script through `script.rs` beside
//! it (`super::kube_api`, `super::script`), so examples include all three with
//! `#[path = "../tests/support/..."]`.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};

use bearer_reload::source::ExecSource;
use serde_json::json;

/// The `apiVersion` the plugin is configured for and answers in.
pub const API_VERSION: &str = "client.authentication.k8s.io/v1";

/// The plugin and the files that steer it. Removed when dropped.
pub struct Plugin {
    dir: tempfile::TempDir,
    script: PathBuf,
}

impl Default for Plugin {
    fn default() -> Self {
        Self::new()
    }
}

impl Plugin {
    /// A plugin with no credential yet (it prints nothing until [`Plugin::issue`]).
    pub fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("plugin.sh");
        let d = shell_quote(dir.path());
        let body = format!(
            "# A test exec plugin: counts its runs, then does what the files beside it say.\n\
             dir={d}\n\
             echo run >> \"$dir/runs\"\n\
             while [ -e \"$dir/hold\" ]; do sleep 0.02; done\n\
             if [ -e \"$dir/hang\" ]; then echo $$ > \"$dir/pid\"; exec sleep 600; fi\n\
             if [ -e \"$dir/fail\" ]; then cat \"$dir/fail\" >&2; exit 1; fi\n\
             cat \"$dir/credential\"\n"
        );
        super::script::write_script(&script, &body);
        Self { dir, script }
    }

    /// The script's path.
    pub fn command(&self) -> &Path {
        &self.script
    }

    /// The plugin as a source built by hand (interactive mode off).
    pub fn source(&self) -> ExecSource {
        ExecSource::new(&self.script).never_interactive()
    }

    /// From the next run on, the plugin prints `token`, with `expires` as its
    /// `expirationTimestamp` when given.
    pub fn issue(&self, token: &str, expires: Option<SystemTime>) {
        let mut status = json!({ "token": token });
        if let Some(at) = expires {
            status["expirationTimestamp"] = json!(rfc3339(at));
        }
        let doc = json!({"kind": "ExecCredential", "apiVersion": API_VERSION, "status": status});
        self.print(&doc.to_string());
    }

    /// From the next run on, the plugin prints `output` as it is.
    pub fn print(&self, output: &str) {
        self.write("credential", output);
    }

    /// Runs wait (after counting themselves) until [`Plugin::release`].
    pub fn hold(&self) {
        self.write("hold", "");
    }

    pub fn release(&self) {
        self.remove("hold");
    }

    /// Runs print `stderr` on stderr and exit with status 1, until [`Plugin::heal`].
    pub fn fail(&self, stderr: &str) {
        self.write("fail", stderr);
    }

    pub fn heal(&self) {
        self.remove("fail");
    }

    /// Runs hang (as `sleep 600`, with their pid in `pid`) until [`Plugin::unhang`].
    pub fn hang(&self) {
        self.write("hang", "");
    }

    pub fn unhang(&self) {
        self.remove("hang");
        self.remove("pid");
    }

    /// The pid of the last hung run, once it has written it.
    pub fn hung_pid(&self) -> Option<u32> {
        let pid = std::fs::read_to_string(self.dir.path().join("pid")).ok()?;
        pid.trim().parse().ok()
    }

    /// Runs started so far.
    pub fn runs(&self) -> usize {
        std::fs::read_to_string(self.dir.path().join("runs"))
            .map(|s| s.lines().count())
            .unwrap_or(0)
    }

    /// Waits, with a deadline, until `n` runs have started.
    pub async fn wait_runs(&self, n: usize, deadline: Duration) {
        let until = Instant::now() + deadline;
        while self.runs() < n {
            assert!(
                Instant::now() < until,
                "the plugin ran {} times, not {n}, within {deadline:?}",
                self.runs()
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    /// A kubeconfig for the API server `api` whose user authenticates with this plugin;
    /// returns its path.
    pub fn kubeconfig(&self, api: &super::kube_api::KubeApi, namespace: &str) -> PathBuf {
        let user = super::kube_api::User {
            exec: Some(super::kube_api::ExecUser {
                api_version: API_VERSION,
                command: &self.script,
                install_hint: "the test writes this plugin",
            }),
            ..Default::default()
        };
        api.kubeconfig_for(&user, namespace)
    }

    fn write(&self, name: &str, contents: &str) {
        // Atomic, so that a run never reads half a file.
        let tmp = self.dir.path().join(format!(".{name}.tmp"));
        std::fs::write(&tmp, contents).unwrap();
        std::fs::rename(&tmp, self.dir.path().join(name)).unwrap();
    }

    fn remove(&self, name: &str) {
        match std::fs::remove_file(self.dir.path().join(name)) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => panic!("remove {name}: {e}"),
        }
    }
}

/// Whether process `pid` is gone (or a zombie: it has exited and only waits to be reaped).
pub fn process_gone(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Err(_) => true,
        // "pid (comm) S ...": the state follows the last ')'.
        Ok(stat) => stat
            .rsplit_once(')')
            .is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X'])),
    }
}

fn shell_quote(path: &Path) -> String {
    format!("'{}'", path.to_string_lossy().replace('\'', "'\\''"))
}

/// `YYYY-MM-DDTHH:MM:SSZ`, as Kubernetes writes timestamps.
fn rfc3339(at: SystemTime) -> String {
    let secs = at
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    let at = jiff::Timestamp::from_second(secs as i64).unwrap();
    at.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}
