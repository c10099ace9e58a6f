//! [`LoadError`]: why a token could not be loaded.

use std::error::Error;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::token::TokenError;

/// Why a token (or, feature `tls`, a certificate or CA bundle) could not be loaded. The
/// last good one stays in use.
///
/// Cheap to clone, so that every caller that shared one read gets the same error. Each
/// message names the source first (a path, a loader, a command, a service account), and
/// the cause is the error's [`source`](Error::source), not repeated in the message: printed
/// as a chain (`anyhow`'s `{:#}`, or by walking `source()`), each cause shows once. None
/// holds the token.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::error::Error as _;
/// use bearer_reload::TokenStore;
/// use bearer_reload::source::{FileError, FileSource};
///
/// let err = TokenStore::builder(FileSource::new("/nonexistent/token"))
///     .load()
///     .await
///     .unwrap_err();
/// assert_eq!(err.to_string(), "cannot fetch from file /nonexistent/token");
/// assert!(matches!(err.downcast_ref::<FileError>(), Some(FileError::Read { .. })));
/// let cause = err.source().unwrap();
/// assert_eq!(cause.to_string(), "cannot read the file");
/// assert!(cause.source().unwrap().to_string().contains("No such file"));
/// # }
/// ```
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The source failed: a file that cannot be read, a plugin that exited with an error,
    /// a loader's error. The source's error is the `source()`;
    /// [`LoadError::downcast_ref`] gets it as its own type (a
    /// [`FileError`](crate::source::FileError), ...).
    #[error("cannot fetch from {origin}")]
    Fetch {
        /// The source, as [`TokenSource::describe`](crate::source::TokenSource::describe)
        /// names it.
        origin: Arc<str>,
        /// The source's error.
        #[source]
        error: Arc<dyn Error + Send + Sync + 'static>,
    },
    /// Bytes were fetched but are not a valid token.
    #[error("invalid token from {origin}")]
    Invalid {
        /// The source.
        origin: Arc<str>,
        /// What is wrong with the bytes.
        #[source]
        source: TokenError,
    },
    /// The fetch did not finish in time (a stuck mount, a FIFO without a writer, a hung
    /// loader or plugin); the last good token stays and later reloads are not held up.
    #[error("fetching from {origin} took longer than {after:?}")]
    Timeout {
        /// The source.
        origin: Arc<str>,
        /// The time limit.
        after: Duration,
    },
}

impl LoadError {
    /// The source the error comes from.
    pub fn origin(&self) -> &str {
        match self {
            LoadError::Fetch { origin, .. }
            | LoadError::Invalid { origin, .. }
            | LoadError::Timeout { origin, .. } => origin,
        }
    }

    /// The source's own error, if it is an `E`.
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        match self {
            LoadError::Fetch { error, .. } => error.downcast_ref(),
            _ => None,
        }
    }
}

/// An error and its causes on one line, `a: b: c`, for logs.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn Error + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut cause = self.0.source();
        while let Some(error) = cause {
            write!(f, ": {error}")?;
            cause = error.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chain_shows_each_cause_once_after_the_source() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let err = LoadError::Fetch {
            origin: "file /run/token".into(),
            error: Arc::new(crate::source::FileError::Read {
                path: "/run/token".into(),
                source: io,
            }),
        };
        assert_eq!(
            Chain(&err).to_string(),
            "cannot fetch from file /run/token: cannot read the file: gone"
        );
        let invalid = LoadError::Invalid {
            origin: "loader l".into(),
            source: TokenError::Empty,
        };
        assert_eq!(
            Chain(&invalid).to_string(),
            "invalid token from loader l: token is empty"
        );
    }

    #[tokio::test]
    async fn an_anyhow_chain_names_the_path_first_and_each_cause_once() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("token");
        let load = || crate::test_support::file(&path).no_watch().load();
        let err = anyhow::Error::new(load().await.unwrap_err());
        assert_eq!(
            format!("{err:#}"),
            format!(
                "cannot fetch from file {}: cannot read the file: No such file or \
                 directory (os error 2)",
                path.display()
            )
        );
        std::fs::write(&path, "a\x07b").unwrap();
        let err = anyhow::Error::new(load().await.unwrap_err());
        assert_eq!(
            format!("{err:#}"),
            format!(
                "invalid token from file {}: token has a byte that is not visible ASCII at \
                 offset 1",
                path.display()
            )
        );
        // The cause is the source error itself, for code that looks for it.
        assert!(err.chain().any(|e| e.is::<TokenError>()));
    }
}
