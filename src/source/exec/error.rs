//! [`ExecError`]: why a plugin gave no token.

use std::fmt;
use std::io;

use super::ApiVersion;

/// Why an exec plugin gave no token, or its configuration cannot be used. Every message
/// names the command and the problem; none holds a token (the plugin's stderr is cut and
/// redacted, and nothing of its standard output is quoted but a redacted `kind` or
/// `apiVersion`).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The command does not exist (not on `PATH`, or no file at its path).
    #[error("exec plugin {command} not found{}", Hint(install_hint.as_deref()))]
    NotFound {
        /// The command.
        command: String,
        /// The kubeconfig's `installHint`, shown to say how to install it.
        install_hint: Option<String>,
    },
    /// The command exists but could not be started (permission denied, ...).
    #[error("exec plugin {command} could not be started: {source}")]
    Start {
        /// The command.
        command: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Reading the plugin's output or waiting for it failed.
    #[error("exec plugin {command}: {source}")]
    Io {
        /// The command.
        command: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The plugin exited unsuccessfully.
    #[error("exec plugin {command} {status}{}", Stderr(stderr.as_deref()))]
    Exit {
        /// The command.
        command: String,
        /// How it ended: `exited with status 1`, `was killed by signal 9`.
        status: String,
        /// The tail of its standard error, cut and redacted; `None` when it went to the
        /// terminal (interactive mode).
        stderr: Option<String>,
    },
    /// The plugin printed more than the source accepts.
    #[error("exec plugin {command} printed more than {max} bytes; refused")]
    OutputTooLarge {
        /// The command.
        command: String,
        /// The cap.
        max: usize,
    },
    /// The plugin's output is not a JSON document.
    #[error("exec plugin {command} printed invalid JSON: {reason}")]
    InvalidJson {
        /// The command.
        command: String,
        /// Where the JSON is broken (line and column), without quoting it.
        reason: String,
    },
    /// The document is not an `ExecCredential`.
    #[error("exec plugin {command} printed kind {}, not ExecCredential", Found(found.as_deref()))]
    WrongKind {
        /// The command.
        command: String,
        /// The `kind` it printed, redacted and cut.
        found: Option<String>,
    },
    /// The document is not of the version the plugin was given.
    #[error(
        "exec plugin {command} is configured for apiVersion {expected} but printed {}",
        Found(found.as_deref())
    )]
    WrongApiVersion {
        /// The command.
        command: String,
        /// The version the plugin was given.
        expected: ApiVersion,
        /// The `apiVersion` it printed, redacted and cut.
        found: Option<String>,
    },
    /// The credential has no `status`.
    #[error("exec plugin {command} printed an ExecCredential without a status")]
    MissingStatus {
        /// The command.
        command: String,
    },
    /// The credential's `status.token` is missing or empty.
    #[error("exec plugin {command} printed an ExecCredential without a token (status.token)")]
    MissingToken {
        /// The command.
        command: String,
    },
    /// `status.expirationTimestamp` is not an RFC 3339 time.
    #[error(
        "exec plugin {command} printed a status.expirationTimestamp that is not an RFC 3339 time"
    )]
    InvalidExpiry {
        /// The command.
        command: String,
    },
    /// The credential holds a client certificate (`clientCertificateData`,
    /// `clientKeyData`): not supported here; with `bearer_reload::kube`, such a config
    /// gets kube's own client.
    #[error(
        "exec plugin {command} returned a client certificate; only bearer tokens are \
         supported (use kube's own client for certificate credentials)"
    )]
    ClientCertificate {
        /// The command.
        command: String,
    },
    /// `interactiveMode: Always`, and standard input is not a terminal: the plugin is not
    /// run (it would wait for an answer that cannot come).
    #[error(
        "exec plugin {command} needs a terminal (interactiveMode: Always) and standard \
         input is not one; not running it"
    )]
    NeedsTerminal {
        /// The command.
        command: String,
    },
    /// The kubeconfig's `exec` section cannot be used as it is.
    #[error("exec plugin {command}: {problem}")]
    Config {
        /// The command, or `(no command)`.
        command: String,
        /// What is wrong.
        problem: String,
    },
}

struct Hint<'a>(Option<&'a str>);

impl fmt::Display for Hint<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(hint) => write!(f, "; {}", hint.trim()),
            None => Ok(()),
        }
    }
}

struct Stderr<'a>(Option<&'a str>);

impl fmt::Display for Stderr<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some("") => f.write_str(" (no stderr)"),
            Some(stderr) => write!(f, "; stderr: {stderr}"),
            None => Ok(()),
        }
    }
}

struct Found<'a>(Option<&'a str>);

impl fmt::Display for Found<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Some(found) => write!(f, "{found:?}"),
            None => f.write_str("none"),
        }
    }
}
