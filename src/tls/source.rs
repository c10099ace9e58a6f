//! Where PEM comes from: [`PemFiles`] (a certificate and its key in two files), the
//! wrapper that turns any source's PEM into a parsed credential, and [`Pem`], the
//! credential a client-identity or CA-bundle store holds.

use std::fmt;
use std::marker::PhantomData;
use std::ops::Deref;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::CertificateError;
use crate::source::{BoxError, FetchContext, Fetched, FileSource, TokenSource};
use crate::store::{Credential, Kind, LoadError, Stamp};

/// A client certificate (with its chain) and its private key in two PEM files (see
/// [`IdentityStore::files`](super::IdentityStore::files)).
///
/// Both files change in one step in a projected volume (the kubelet's `..data` swap: a
/// pod certificate's `keyPath` and `certificateChainPath`, a Secret's `tls.key` and
/// `tls.crt`), but two reads are two steps: a swap between them would pair the old
/// certificate with the new key. The certificate is read again after the key, and the
/// pair read again while the certificate moved, so that a read holds both files of one
/// swap (the key check refuses what still does not belong together).
#[derive(Debug, Clone)]
pub(crate) struct PemFiles<S = FileSource> {
    paths: [PathBuf; 2],
    cert: S,
    key: S,
}

/// How many times a fetch reads the pair again when the certificate moved under it:
/// a swap takes one; more means the files change faster than they are read.
const SWAPS_WAITED: usize = 3;

impl PemFiles {
    /// The certificate at `cert` and the key at `key`.
    pub(crate) fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        let (cert, key) = (cert.into(), key.into());
        Self {
            cert: FileSource::new(&cert),
            key: FileSource::new(&key),
            paths: [cert, key],
        }
    }
}

/// One of the two files.
#[derive(Debug, Clone, Copy)]
enum Part {
    Certificate,
    Key,
}

/// A read of one of the two files that failed, and which.
#[derive(Debug, thiserror::Error)]
#[error("{part} {}", path.display())]
struct PartError {
    part: &'static str,
    path: PathBuf,
    #[source]
    source: BoxError,
}

impl<S: TokenSource> PemFiles<S> {
    async fn read(&self, part: Part, cx: FetchContext) -> Result<Fetched, PartError> {
        let (source, path, part) = match part {
            Part::Certificate => (&self.cert, &self.paths[0], "certificate"),
            Part::Key => (&self.key, &self.paths[1], "key"),
        };
        source.fetch(cx).await.map_err(|e| PartError {
            part,
            path: path.clone(),
            source: e.into(),
        })
    }
}

impl<S: TokenSource> TokenSource for PemFiles<S> {
    type Error = BoxError;

    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, BoxError> {
        let mut cert = self.read(Part::Certificate, cx).await?;
        for _ in 0..SWAPS_WAITED {
            let key = self.read(Part::Key, cx).await?;
            let again = self.read(Part::Certificate, cx).await?;
            if again.bytes() == cert.bytes() {
                return Ok(join(&cert, &key));
            }
            cert = again;
        }
        let key = self.read(Part::Key, cx).await?;
        Ok(join(&cert, &key))
    }

    fn describe(&self) -> String {
        format!(
            "certificate {} and key {}",
            self.paths[0].display(),
            self.paths[1].display()
        )
    }

    fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    fn default_refresh_interval(&self) -> Option<Duration> {
        self.cert.default_refresh_interval()
    }
}

/// A certificate's PEM and its key's, as one PEM.
fn join(cert: &Fetched, key: &Fetched) -> Fetched {
    Fetched::new([cert.bytes(), b"\n", key.bytes()].concat())
}

/// A credential parsed from PEM, and what the store needs of it.
pub(crate) struct Parsed<T> {
    pub(crate) value: T,
    /// The SHA-256 of every certificate's DER, in order: the same for the same credential.
    pub(crate) digest: [u8; 32],
    /// When the credential stops being valid.
    pub(crate) expires_at: Option<SystemTime>,
    /// Certificates left out as unusable (a CA bundle's), each warned about by the source.
    pub(crate) skipped: Vec<Skipped>,
}

/// A certificate of a bundle that could not be used.
pub(crate) struct Skipped {
    /// Its place in the bundle, from 1.
    pub(crate) position: usize,
    /// Its subject, when it parses.
    pub(crate) subject: Option<String>,
    /// Why it was left out.
    pub(crate) error: CertificateError,
}

/// A credential that PEM bytes parse into, and what it says of itself.
pub(crate) trait Parse: fmt::Display + Clone + Send + Sync + Sized + 'static {
    /// What it is, for the store's logs, errors and default cap.
    const KIND: Kind;

    fn parse(pem: &[u8], now: SystemTime) -> Result<Parsed<Self>, CertificateError>;

    /// Whom it names (none, unless it says).
    fn subject(&self) -> Option<&str> {
        None
    }

    /// Its fingerprint: a certificate's own, or (a bundle) the start of `digest`, which
    /// changes when any of its certificates does.
    fn fingerprint(&self, digest: &[u8; 32]) -> String;

    /// Whether it is no longer valid at `now`.
    fn is_expired_at(&self, now: SystemTime) -> bool;

    /// Certificates of it left out as unusable.
    fn skipped(&self) -> u64 {
        0
    }

    /// When it became valid, if it says.
    fn issued_at(&self) -> Option<SystemTime> {
        None
    }
}

/// A credential parsed from PEM, as its store holds it: the parsed value, its digest (the
/// same for the same credential) and the store's stamp.
#[derive(Clone)]
pub(crate) struct Pem<T> {
    value: T,
    digest: [u8; 32],
    /// When the credential stops being valid by its own word.
    expires_at: Option<SystemTime>,
    stamp: Stamp,
}

impl<T> Deref for Pem<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.value
    }
}

impl<T: fmt::Display> fmt::Display for Pem<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl<T: Parse> Credential for Pem<T> {
    const KIND: Kind = T::KIND;

    type Parser = PemParser<T>;

    /// The read's PEM parsed, or why it is not a usable `T` (the store's error names the
    /// source first).
    fn from_fetched(
        fetched: Fetched,
        parser: &PemParser<T>,
        origin: &Arc<str>,
        _max_size: usize,
        now: SystemTime,
    ) -> Result<Self, LoadError> {
        let parsed = T::parse(fetched.bytes(), now).map_err(|error| LoadError::Fetch {
            origin: origin.clone(),
            error: Arc::new(error),
        })?;
        parser.warn_skipped(origin, &parsed);
        Ok(Pem {
            value: parsed.value,
            digest: parsed.digest,
            expires_at: parsed.expires_at,
            stamp: Stamp::default(),
        })
    }

    fn stamp(&self) -> &Stamp {
        &self.stamp
    }

    fn stamped(mut self, stamp: Stamp) -> Self {
        self.stamp = stamp;
        self
    }

    fn same(&self, other: &Self) -> bool {
        self.digest == other.digest
    }

    fn subject(&self) -> Option<&str> {
        self.value.subject()
    }

    fn fingerprint(&self) -> String {
        self.value.fingerprint(&self.digest)
    }

    fn logged(&self) -> impl fmt::Display + '_ {
        &self.value
    }

    fn seed(&self) -> u64 {
        u64::from_be_bytes(self.digest[..8].try_into().expect("8 bytes"))
    }

    /// A certificate's `notAfter` (every authority's of a bundle).
    fn own_expiry(&self) -> Option<SystemTime> {
        self.expires_at
    }

    /// The earlier of the source's expiry (an exec plugin's `expirationTimestamp`) and its
    /// own.
    fn expires_at(&self) -> Option<SystemTime> {
        match (self.stamp.source_expiry, self.expires_at) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// Past the source's expiry (an exec plugin's `expirationTimestamp`), or past its own
    /// (a certificate's `notAfter`, every authority's of a bundle).
    fn is_expired_at(&self, now: SystemTime) -> bool {
        self.expires_at().is_some_and(|exp| now >= exp) || self.value.is_expired_at(now)
    }

    fn skipped(&self) -> u64 {
        self.value.skipped()
    }

    fn issued_at(&self) -> Option<SystemTime> {
        self.value.issued_at()
    }
}

/// The SHA-256 of the DER of `certs`, one after the other.
pub(crate) fn digest<'a>(certs: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut hash = Sha256::new();
    for der in certs {
        hash.update((der.len() as u64).to_be_bytes());
        hash.update(der);
    }
    hash.finalize().into()
}

/// What turns PEM into a [`Pem`] of `T`, held by its store: it remembers the bundle whose
/// skipped certificates were last warned about, so that a timer's read of the same bundle
/// warns no more.
pub(crate) struct PemParser<T> {
    parsed: PhantomData<fn() -> T>,
    warned: Mutex<Option<([u8; 32], Vec<usize>)>>,
}

impl<T> Default for PemParser<T> {
    fn default() -> Self {
        Self {
            parsed: PhantomData,
            warned: Mutex::new(None),
        }
    }
}

impl<T> PemParser<T> {
    /// Warns about each certificate `parsed` left out, unless this bundle's were the last
    /// warned about.
    fn warn_skipped(&self, origin: &str, parsed: &Parsed<T>) {
        let key = (
            parsed.digest,
            parsed.skipped.iter().map(|s| s.position).collect(),
        );
        let mut warned = self.warned.lock().unwrap_or_else(|e| e.into_inner());
        if parsed.skipped.is_empty() || warned.as_ref() == Some(&key) {
            *warned = (!parsed.skipped.is_empty()).then_some(key);
            return;
        }
        for skipped in &parsed.skipped {
            tracing::warn!(
                source = %origin,
                position = skipped.position,
                subject = skipped.subject.as_deref().unwrap_or("(does not parse)"),
                error = %skipped.error,
                "a certificate of the CA bundle cannot be used: skipped, the others are trusted"
            );
        }
        *warned = Some(key);
    }
}

#[cfg(test)]
mod tests;
