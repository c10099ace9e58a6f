//! [`CertificateStatus`]: what a certificate store tells about itself.

use std::time::SystemTime;

use super::Certificate;
use crate::store::{LoadError, WatchState};

/// A snapshot of an [`IdentityStore`](super::IdentityStore) or a
/// [`RootStore`](super::RootStore), for health checks and debugging. Holds no key.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct CertificateStatus {
    /// Where the PEM comes from: a path, two paths, a command.
    pub source: String,
    /// The current credential's generation (1 for the first).
    pub generation: u64,
    /// The certificates in use: an identity's chain, the presented certificate first; a
    /// bundle's authorities.
    pub certificates: Vec<Certificate>,
    /// When the current credential was read.
    pub loaded_at: SystemTime,
    /// When the identity stops being valid: its certificate's `notAfter` (or an exec
    /// plugin's earlier `expirationTimestamp`); `None` for a bundle.
    pub expires_at: Option<SystemTime>,
    /// Whether the credential in use has expired (for a bundle: every authority in it),
    /// because nothing newer came: servers will refuse it. A read that finds an expired
    /// certificate in the source is refused, and its error is in `last_error`.
    pub expired: bool,
    /// Reads of the source, successful or not.
    pub reads: u64,
    /// Credentials installed after the first.
    pub rotations: u64,
    /// Reads that failed and were reported.
    pub failures: u64,
    /// The error of the last read, if it failed; `None` once a read succeeds again.
    pub last_error: Option<LoadError>,
    /// Whether changes to the files are watched.
    pub watch: WatchState,
    /// Refusals seen by an [`HttpsClient`](super::HttpsClient): for an identity, handshakes
    /// the server refused and 401s; for a bundle, server certificates it did not verify.
    pub refused: u64,
    /// Reads of the source those refusals asked for.
    pub refused_reloads: u64,
    /// Requests sent again, on a new connection, after a refusal.
    pub retries: u64,
    /// Requests sent again that were not refused the second time.
    pub retries_succeeded: u64,
}
