//! [`Part`]: one inline credential of a kubeconfig, as the source of its own store.

use std::sync::Arc;
use std::time::Duration;

use super::snapshot::Snapshot;
use crate::source::{FetchContext, Fetched, TokenSource, Trigger};
use crate::store::{LoadError, OnFailure, Recency, Store};

/// Which credential of the file a [`Part`] takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Which {
    Token,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Identity,
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Roots,
}

/// One inline credential of the file, taken out of what the file's store holds. The file
/// is read again for a refusal, a reload or the credential's own dates; otherwise the
/// part's store follows the file's (see `refresh::follow`).
pub(crate) struct Part {
    file: Store<Snapshot>,
    which: Which,
    origin: String,
}

impl Part {
    pub(crate) fn new(file: &Store<Snapshot>, which: Which) -> Self {
        let name = match which {
            Which::Token => "token",
            Which::Identity => "client certificate",
            Which::Roots => "CA bundle",
        };
        Self {
            origin: format!("{}: {name}", file.status().source),
            file: file.clone(),
            which,
        }
    }

    /// The credential as the file's store holds it, or the error of its last read: a file
    /// that cannot be used fails its parts' reads too, and each keeps its last good one.
    fn take(&self) -> Result<Fetched, FileFailed> {
        if let Some(error) = self.file.last_error() {
            return Err(error.into());
        }
        let snapshot = self.file.current();
        let bytes = match self.which {
            Which::Token => snapshot.token.as_ref().map(|s| s.as_slice()),
            Which::Identity => snapshot.identity.as_ref().map(|s| s.as_slice()),
            Which::Roots => snapshot.roots.as_deref(),
        }
        .expect("the file's shape keeps its inline credentials");
        Ok(Fetched::new(bytes.to_vec()))
    }

    /// Whether a fetch for `trigger` reads the file again first (else it takes what the
    /// file's store read last).
    pub(super) fn reads_file(trigger: Trigger) -> bool {
        !matches!(trigger, Trigger::Load | Trigger::Watch)
    }
}

impl TokenSource for Part {
    type Error = FileFailed;

    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, FileFailed> {
        if Self::reads_file(cx.trigger()) {
            // A read that starts now (a refusal must not be answered by an older read), with
            // the file's watcher started again if its runtime went.
            self.file.revive_if_stopped();
            let read = self
                .file
                .downgrade()
                .reload(cx.trigger(), Recency::AfterNow, OnFailure::Report)
                .await;
            if let Some(Err(error)) = read {
                return Err(error.into());
            }
        }
        self.take()
    }

    fn describe(&self) -> String {
        self.origin.clone()
    }

    /// None: the file's store reads the file, and this one follows it.
    fn default_refresh_interval(&self) -> Option<Duration> {
        None
    }
}

/// The file's store's read failed: what it says of the file (its error names the file),
/// without the store's own words again.
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub(crate) struct FileFailed(Arc<dyn std::error::Error + Send + Sync>);

impl From<LoadError> for FileFailed {
    fn from(error: LoadError) -> Self {
        FileFailed(match error {
            LoadError::Fetch { error, .. } => error,
            other => Arc::new(other),
        })
    }
}
