//! [`ExecSource`]: a Kubernetes exec credential plugin as a token source.

use std::ffi::OsString;
use std::fmt;
use std::io::IsTerminal as _;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use super::{FetchContext, Fetched, TokenSource};

mod credential;
mod error;

/// For the fuzz targets (`--cfg fuzzing`): a plugin's output as a token store's run and an
/// identity store's would answer it.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_parse_credential(
    stdout: &[u8],
) -> Result<(Result<Fetched, ExecError>, Result<Fetched, ExecError>), ExecError> {
    let read = || credential::parse(stdout, credential::ApiVersion::V1, "fuzz");
    Ok((
        answer(read()?, Wants::Token, "fuzz".into()),
        answer(read()?, Wants::ClientCertificate, "fuzz".into()),
    ))
}
#[cfg(feature = "kube")]
mod from_kube;
mod redact;
mod run;

pub(crate) use credential::{ApiVersion, ClusterInfo};
pub use error::ExecError;

const FETCH_TIMEOUT: Duration = Duration::from_secs(60);

const MAX_OUTPUT: usize = 1024 * 1024;

/// Whether the plugin may talk to the user (a kubeconfig's `interactiveMode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub(crate) enum InteractiveMode {
    /// Empty standard input; standard error captured for error messages.
    Never,
    /// Shares the terminal when standard input is one.
    #[default]
    IfAvailable,
    /// Needs a terminal: without one, [`ExecError::NeedsTerminal`] rather than a hang.
    #[cfg_attr(not(feature = "kube"), allow(dead_code))]
    Always,
}

/// A Kubernetes exec credential plugin (`aws eks get-token`,
/// `gke-gcloud-auth-plugin`, `kubelogin`, Teleport, Pinniped) as a token source.
///
/// The plugin is run as client-go runs it, with `KUBERNETES_EXEC_INFO`, and prints an
/// `ExecCredential` whose `status.token` becomes the token and whose
/// `status.expirationTimestamp`, if any, its expiry.
///
/// The store built on it does the rest:
/// - the plugin runs in a child process, never twice at once, with a time limit; a run
///   that goes over it (or fails) ends with the plugin killed. On Unix a plugin that does
///   not share the terminal runs in a process group of its own, killed whole, so that a
///   wrapper's children (`sh -c 'helper & wait'`) do not outlive it; on Windows only the
///   plugin process itself is killed, and processes it started may keep running;
/// - a credential with an expiry is fetched again before it expires (see
///   [`Fetched::with_expires_at`]); one without is kept until a server refuses it;
/// - a refusal runs the plugin again (at most once per
///   [`unauthorized_reload_interval`](crate::StoreBuilder::unauthorized_reload_interval));
/// - a failed run keeps the last good token and is reported with an [`ExecError`].
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use bearer_reload::TokenStore;
/// use bearer_reload::source::ExecSource;
///
/// let credential = r#"{"kind":"ExecCredential","apiVersion":"client.authentication.k8s.io/v1",
///                      "status":{"token":"abc","expirationTimestamp":"2099-01-01T00:00:00Z"}}"#;
/// let plugin = ExecSource::new("echo")
///     .arg(credential)
///     .never_interactive();
/// let store = TokenStore::builder(plugin).load().await?;
/// assert_eq!(store.current().header_value(), "Bearer abc");
/// assert!(store.status().expires_at.is_some());
/// # Ok(()) }
/// ```
///
/// # From a kubeconfig
///
/// With feature `kube`, `ExecSource::try_from(&exec)` reads a kubeconfig's `ExecConfig`, as
/// [`bearer_reload::kube`] does. A credential with a client certificate and no token fails
/// a token store ([`ExecError::ClientCertificate`]): `tls::IdentityStore::exec` loads it.
///
#[cfg_attr(feature = "kube", doc = "[`bearer_reload::kube`]: crate::kube")]
#[cfg_attr(
    not(feature = "kube"),
    doc = "[`bearer_reload::kube`]: crate#feature-flags"
)]
#[derive(Clone)]
pub struct ExecSource {
    command: PathBuf,
    args: Vec<OsString>,
    env: Vec<(OsString, OsString)>,
    drop_env: Vec<OsString>,
    api_version: ApiVersion,
    interactive: InteractiveMode,
    install_hint: Option<String>,
    cluster: Option<ClusterInfo>,
    max_output: usize,
    /// `None` asks the OS at each run.
    stdin_terminal: Option<bool>,
    wants: Wants,
    /// A token run also returned a client certificate, which the `kube` module then loads.
    saw_certificate: Arc<AtomicBool>,
    /// A certificate a token run got, for the first run of a
    /// [`client_certificate`](ExecSource::client_certificate) clone instead of its own.
    #[cfg(feature = "tls")]
    handover: Arc<std::sync::Mutex<Option<Handover>>>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Wants {
    /// `status.token`.
    Token,
    /// `status.clientCertificateData` and `status.clientKeyData`, as one PEM.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    ClientCertificate,
}

impl fmt::Debug for ExecSource {
    /// The command, without its arguments and variables' values, which may be secrets.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let env: Vec<_> = self.env.iter().map(|(name, _)| name).collect();
        f.debug_struct("ExecSource")
            .field("command", &self.command)
            .field("args", &format_args!("<{} arguments>", self.args.len()))
            .field("env", &env)
            .field("api_version", &self.api_version)
            .field("interactive", &self.interactive)
            .field("provide_cluster_info", &self.cluster.is_some())
            .finish_non_exhaustive()
    }
}

impl ExecSource {
    /// The plugin `command` (a name looked up on `PATH`, or a path), speaking
    /// `client.authentication.k8s.io/v1`.
    pub fn new(command: impl Into<PathBuf>) -> Self {
        Self {
            command: command.into(),
            args: Vec::new(),
            env: Vec::new(),
            drop_env: Vec::new(),
            api_version: ApiVersion::default(),
            interactive: InteractiveMode::default(),
            install_hint: None,
            cluster: None,
            max_output: MAX_OUTPUT,
            stdin_terminal: None,
            wants: Wants::Token,
            saw_certificate: Arc::default(),
            #[cfg(feature = "tls")]
            handover: Arc::default(),
        }
    }

    /// One more argument.
    pub fn arg(mut self, arg: impl Into<OsString>) -> Self {
        self.args.push(arg.into());
        self
    }

    /// More arguments.
    pub fn args<I: IntoIterator<Item = A>, A: Into<OsString>>(mut self, args: I) -> Self {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }

    /// A variable set for the plugin, over the process's own environment (later ones win).
    pub fn env(mut self, name: impl Into<OsString>, value: impl Into<OsString>) -> Self {
        self.env.push((name.into(), value.into()));
        self
    }

    /// A variable of the process's environment not passed to the plugin.
    pub fn drop_env(mut self, name: impl Into<OsString>) -> Self {
        self.drop_env.push(name.into());
        self
    }

    /// Speak `client.authentication.k8s.io/v1beta1` with the plugin instead of `v1`.
    pub fn v1beta1(self) -> Self {
        self.api_version(ApiVersion::V1Beta1)
    }

    pub(crate) fn api_version(mut self, version: ApiVersion) -> Self {
        self.api_version = version;
        self
    }

    /// Never give the plugin the terminal (a kubeconfig's `interactiveMode: Never`); by
    /// default it shares it when standard input is one.
    pub fn never_interactive(self) -> Self {
        self.interactive_mode(InteractiveMode::Never)
    }

    pub(crate) fn interactive_mode(mut self, mode: InteractiveMode) -> Self {
        self.interactive = mode;
        self
    }

    /// What to tell the user when the command is not found (`brew install aws-iam-authenticator`).
    pub fn install_hint(mut self, hint: impl Into<String>) -> Self {
        self.install_hint = Some(redact::strip_escapes(&hint.into()));
        self
    }

    /// The most the plugin may print, in bytes (default 1 MiB): past it, the run fails.
    pub fn max_output(mut self, bytes: usize) -> Self {
        self.max_output = bytes;
        self
    }

    /// Resolves a relative command that contains a path separator (`./bin/auth`) against
    /// `dir`, the directory of the kubeconfig that names it, as kubectl does (and kube's
    /// `Kubeconfig::read_from`); a bare name stays a `PATH` lookup.
    pub fn resolve_against(mut self, dir: impl AsRef<Path>) -> Self {
        let has_separator = self.command.components().count() > 1;
        if has_separator && self.command.is_relative() {
            let joined = dir.as_ref().join(&self.command);
            self.command = std::path::absolute(&joined).unwrap_or(joined);
        }
        self
    }

    /// The command.
    pub fn command(&self) -> &Path {
        &self.command
    }

    /// The same plugin, answering with its client certificate and key as PEM.
    #[cfg(feature = "tls")]
    pub(crate) fn client_certificate(mut self) -> Self {
        self.wants = Wants::ClientCertificate;
        self.saw_certificate = Arc::default();
        self
    }

    #[cfg(all(feature = "kube", feature = "tls"))]
    pub(crate) fn saw_certificate(&self) -> bool {
        self.saw_certificate.load(Ordering::Relaxed)
    }

    fn name(&self) -> String {
        self.command.display().to_string()
    }

    /// Whether the plugin shares the terminal this run.
    fn shares_terminal(&self) -> Result<bool, ExecError> {
        let is_terminal = self
            .stdin_terminal
            .unwrap_or_else(|| std::io::stdin().is_terminal());
        if !is_terminal && self.interactive == InteractiveMode::Always {
            return Err(ExecError::NeedsTerminal {
                command: self.name(),
            });
        }
        Ok(is_terminal && self.interactive != InteractiveMode::Never)
    }

    /// Drops a certificate no identity store took: the key is not kept for the life of
    /// the token's store.
    #[cfg(all(feature = "kube", feature = "tls"))]
    pub(crate) fn drop_handover(&self) {
        drop(crate::sync::lock(&self.handover).take());
    }
}

/// A client certificate and key a token run got, for the identity store's first run.
#[cfg(feature = "tls")]
struct Handover {
    fetched: Fetched,
    /// Counts the hand-overs alive (tests).
    #[cfg(test)]
    _live: tests::Live,
}

fn pem(cert: &str, key: &str) -> Vec<u8> {
    // One allocation of the exact size: no copy of the key left behind by a growth.
    [cert.as_bytes(), b"\n", key.as_bytes()].concat()
}

fn expiring(bytes: Vec<u8>, expires_at: Option<SystemTime>) -> Fetched {
    expires_at
        .into_iter()
        .fold(Fetched::new(bytes), Fetched::with_expires_at)
}

fn answer(
    mut credential: credential::Credential,
    wants: Wants,
    command: String,
) -> Result<Fetched, ExecError> {
    let bytes = match (wants, credential.token.as_mut(), &credential.certificate) {
        // Moved out of the wiped string: the store's copy is the only one.
        (Wants::Token, Some(token), _) => std::mem::take(&mut **token).into_bytes(),
        (Wants::Token, None, _) if credential.has_certificate => {
            return Err(ExecError::ClientCertificate { command });
        }
        (Wants::Token, None, _) => return Err(ExecError::MissingToken { command }),
        (Wants::ClientCertificate, _, Some((cert, key))) => pem(cert, key),
        (Wants::ClientCertificate, _, None) => {
            return Err(ExecError::MissingCertificate { command });
        }
    };
    Ok(expiring(bytes, credential.expires_at))
}

impl TokenSource for ExecSource {
    type Error = ExecError;

    async fn fetch(&self, _cx: FetchContext) -> Result<Fetched, ExecError> {
        #[cfg(feature = "tls")]
        if self.wants == Wants::ClientCertificate {
            let handover = crate::sync::lock(&self.handover).take();
            if let Some(handover) = handover {
                return Ok(handover.fetched);
            }
        }
        let stdout = run::run(self, self.shares_terminal()?).await?;
        let credential = credential::parse(&stdout, self.api_version, &self.name())?;
        drop(stdout);
        // Handed over after a run with no token, or the first run with both (a later one's
        // may be refused).
        #[cfg(feature = "tls")]
        if self.wants == Wants::Token
            && let Some((cert, key)) = &credential.certificate
            && (credential.token.is_none() || !self.saw_certificate.load(Ordering::Relaxed))
        {
            *crate::sync::lock(&self.handover) = Some(Handover {
                fetched: expiring(pem(cert, key), credential.expires_at),
                #[cfg(test)]
                _live: tests::Live::new(self.name()),
            });
        }
        if self.wants == Wants::Token && credential.token.is_some() && credential.has_certificate {
            self.saw_certificate.store(true, Ordering::Relaxed);
        }
        answer(credential, self.wants, self.name())
    }

    fn describe(&self) -> String {
        format!("exec plugin {}", self.name())
    }

    /// 60 s: a plugin may log in to a cloud provider before it answers. Raise it with
    /// [`fetch_timeout`](crate::StoreBuilder::fetch_timeout) for a plugin that waits for
    /// the user (a browser login, a device code).
    fn default_fetch_timeout(&self) -> Duration {
        FETCH_TIMEOUT
    }
}

#[cfg(test)]
mod tests;
