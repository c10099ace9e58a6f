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
        std::iter::successors(self.0.source(), |e| (*e).source())
            .try_for_each(|e| write!(f, ": {e}"))
    }
}

#[cfg(test)]
mod tests;
