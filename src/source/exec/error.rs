//! [`ExecError`]: why a plugin gave no token.

use std::io;

/// Why an exec plugin gave no token, or its configuration cannot be used.
///
/// The [`LoadError`](crate::LoadError) that wraps it names the command. None holds a
/// token: what it quotes of the plugin's output is cut and redacted.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ExecError {
    /// The command does not exist (not on `PATH`, or no file at its path).
    #[error("the command was not found{}", install_hint.as_deref().map_or_else(String::new, |h| format!("; {}", h.trim())))]
    NotFound {
        /// The command.
        command: String,
        /// The kubeconfig's `installHint`, shown to say how to install it.
        install_hint: Option<String>,
    },
    /// The command exists but could not be started (permission denied, ...).
    #[error("the command could not be started")]
    Start {
        /// The command.
        command: String,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// Reading the plugin's output or waiting for it failed.
    #[error("reading the plugin's output or waiting for it failed")]
    Io {
        /// The command.
        command: String,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The plugin exited unsuccessfully.
    #[error("the plugin {status}{}", stderr_tail(stderr.as_deref()))]
    Exit {
        /// The command.
        command: String,
        /// How it ended: `exited with status 1`, `was killed by signal 9`.
        status: String,
        /// The tail of its standard error; `None` when it went to the terminal.
        stderr: Option<String>,
    },
    /// The plugin printed more than the source accepts.
    #[error("the plugin printed more than {max} bytes; refused")]
    OutputTooLarge {
        /// The command.
        command: String,
        /// The cap.
        max: usize,
    },
    /// The plugin's output is not a JSON document.
    #[error("the plugin printed invalid JSON: {reason}")]
    InvalidJson {
        /// The command.
        command: String,
        /// Where the JSON is broken (line and column), without quoting it.
        reason: String,
    },
    /// The document is not an `ExecCredential`.
    #[error("the plugin printed kind {}, not ExecCredential", found_text(found.as_deref()))]
    WrongKind {
        /// The command.
        command: String,
        /// The `kind` it printed, redacted and cut.
        found: Option<String>,
    },
    /// The document is not of the version the plugin was given.
    #[error(
        "the plugin is configured for apiVersion {expected} but printed {}",
        found_text(found.as_deref())
    )]
    WrongApiVersion {
        /// The command.
        command: String,
        /// The version the plugin was given (`client.authentication.k8s.io/v1`, ...).
        expected: &'static str,
        /// The `apiVersion` it printed, redacted and cut.
        found: Option<String>,
    },
    /// The credential has no `status`.
    #[error("the plugin printed an ExecCredential without a status")]
    MissingStatus {
        /// The command.
        command: String,
    },
    /// The credential's `status.token` is missing or empty.
    #[error("the plugin printed an ExecCredential without a token (status.token)")]
    MissingToken {
        /// The command.
        command: String,
    },
    /// `status.expirationTimestamp` is not an RFC 3339 time.
    #[error("the plugin printed a status.expirationTimestamp that is not an RFC 3339 time")]
    InvalidExpiry {
        /// The command.
        command: String,
    },
    /// The credential holds a client certificate and no token: load it as a client
    /// identity (`tls::IdentityStore::exec`, feature `tls`).
    #[error(
        "the plugin returned a client certificate and no token (status.token): load it as a \
         client identity (tls::IdentityStore::exec)"
    )]
    ClientCertificate {
        /// The command.
        command: String,
    },
    /// The credential lacks `clientCertificateData` or `clientKeyData`.
    #[error(
        "the plugin printed an ExecCredential without a client certificate and key \
         (status.clientCertificateData, status.clientKeyData)"
    )]
    MissingCertificate {
        /// The command.
        command: String,
    },
    /// `interactiveMode: Always`, and standard input is not a terminal: not run.
    #[error(
        "the plugin needs a terminal (interactiveMode: Always) and standard input is not \
         one; not running it"
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

fn stderr_tail(stderr: Option<&str>) -> String {
    match stderr {
        Some("") => " (no stderr)".to_owned(),
        Some(stderr) => format!("; stderr: {stderr}"),
        None => String::new(),
    }
}

fn found_text(found: Option<&str>) -> String {
    found.map_or_else(|| "none".to_owned(), |found| format!("{found:?}"))
}
