//! [`LoadError`]: why a token could not be loaded.

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use crate::token::TokenError;

/// Why a token could not be loaded. The last good token stays in use.
///
/// Cheap to clone, so that every caller that shared one read gets the same error. Every
/// message names the source (a path, a loader, a command); none holds the token.
#[derive(Debug, Clone, thiserror::Error)]
#[non_exhaustive]
pub enum LoadError {
    /// The source failed: a file that cannot be read, a loader's error. The message is
    /// the source's error, which names it; [`LoadError::downcast_ref`] gets the error
    /// itself (a [`FileError`](crate::source::FileError), ...).
    #[error("{error}")]
    Fetch {
        /// The source, as [`TokenSource::describe`](crate::source::TokenSource::describe)
        /// names it.
        origin: Arc<str>,
        /// The source's error.
        error: Arc<dyn Error + Send + Sync + 'static>,
    },
    /// Bytes were fetched but are not a valid token.
    #[error("invalid token from {origin}: {source}")]
    Invalid {
        /// The source.
        origin: Arc<str>,
        /// What is wrong with the bytes.
        #[source]
        source: TokenError,
    },
    /// The fetch did not finish in time (a stuck mount, a FIFO without a writer, a hung
    /// loader or plugin); the last good token stays and later reloads are not held up.
    #[error("fetching the token from {origin} took longer than {after:?}")]
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
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() {
    /// use bearer_reload::TokenFile;
    /// use bearer_reload::source::FileError;
    ///
    /// let err = TokenFile::new("/nonexistent/token").load().await.unwrap_err();
    /// assert!(matches!(err.downcast_ref::<FileError>(), Some(FileError::Read { .. })));
    /// assert!(err.to_string().starts_with("cannot read token file /nonexistent/token"));
    /// # }
    /// ```
    pub fn downcast_ref<E: Error + 'static>(&self) -> Option<&E> {
        match self {
            LoadError::Fetch { error, .. } => error.downcast_ref(),
            _ => None,
        }
    }
}
