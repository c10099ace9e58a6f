//! [`PemFiles`], and [`Pem`]: the parsed credential a certificate store holds.

use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};

use super::{Certificate, CertificateError};
use crate::source::{BoxError, FetchContext, Fetched, FileSource, TokenSource};
use crate::store::{Credential, Kind, LoadError, Stamp};
use crate::sync::lock;

/// A client certificate and its key in two PEM files
/// ([`IdentityStore::files`](super::IdentityStore::files)). A projected volume swaps both
/// at once, but two reads are two steps: the certificate is read again after the key, and
/// the pair again while it moved, so that a read holds both files of one swap.
#[derive(Debug, Clone)]
pub(crate) struct PemFiles<S = FileSource> {
    paths: [PathBuf; 2],
    sources: [S; 2],
}

/// The certificate's place in a [`PemFiles`]'s arrays, and the key's.
const CERT: usize = 0;
const KEY: usize = 1;

/// How many times a fetch reads the pair again when the certificate moved under it:
/// a swap takes one; more means the files change faster than they are read.
const SWAPS_WAITED: usize = 3;

impl PemFiles {
    pub(crate) fn new(cert: impl Into<PathBuf>, key: impl Into<PathBuf>) -> Self {
        let paths = [cert.into(), key.into()];
        let sources = [FileSource::new(&paths[CERT]), FileSource::new(&paths[KEY])];
        Self { paths, sources }
    }
}

/// A read of one of the two files that failed, and which.
#[derive(Debug, thiserror::Error)]
#[error("{part} {}", path.display())]
struct PartError {
    part: &'static str,
    path: PathBuf,
    source: BoxError,
}

impl<S: TokenSource> TokenSource for PemFiles<S> {
    type Error = BoxError;

    async fn fetch(&self, cx: FetchContext) -> Result<Fetched, BoxError> {
        let read = |part: usize| async move {
            self.sources[part].fetch(cx).await.map_err(|e| PartError {
                part: ["certificate", "key"][part],
                path: self.paths[part].clone(),
                source: e.into(),
            })
        };
        let mut cert = read(CERT).await?;
        for _ in 0..SWAPS_WAITED {
            let key = read(KEY).await?;
            let again = read(CERT).await?;
            if again.bytes() == cert.bytes() {
                return Ok(join(&cert, &key));
            }
            cert = again;
        }
        Ok(join(&cert, &read(KEY).await?))
    }

    fn describe(&self) -> String {
        let [cert, key] = &self.paths;
        format!("certificate {} and key {}", cert.display(), key.display())
    }

    fn paths(&self) -> &[PathBuf] {
        &self.paths
    }

    fn default_refresh_interval(&self) -> Option<Duration> {
        self.sources[CERT].default_refresh_interval()
    }
}

/// A certificate's PEM and its key's, as one PEM.
fn join(cert: &Fetched, key: &Fetched) -> Fetched {
    Fetched::new([cert.bytes(), b"\n", key.bytes()].concat())
}

/// A certificate of a bundle that could not be used.
pub(crate) struct Skipped {
    /// Its place in the bundle, from 1.
    pub(crate) position: usize,
    /// Its subject, when it parses.
    pub(crate) subject: Option<String>,
    pub(crate) error: CertificateError,
}

/// A credential that PEM bytes parse into, and what it says of itself.
pub(crate) trait Parse: fmt::Display + Send + Sync + Sized + 'static {
    /// What it is, for the store's logs, errors and default cap.
    const KIND: Kind;

    /// The credential `pem` holds at `now`, or why it holds none.
    fn parse(pem: &[u8], now: SystemTime) -> Result<Pem<Self>, CertificateError>;

    /// The certificate it stands for (a client identity's leaf), whose subject, fingerprint
    /// and dates are the credential's; none for a bundle, fingerprinted by its digest.
    fn certificate(&self) -> Option<&Certificate> {
        None
    }

    /// Whether it is no longer valid at `now`, beyond its certificate's expiry.
    fn is_expired_at(&self, _now: SystemTime) -> bool {
        false
    }
}

/// A credential parsed from PEM, as its store holds it.
pub(crate) struct Pem<T> {
    pub(crate) value: T,
    /// The SHA-256 of every certificate's DER, in order: the same for the same credential.
    pub(crate) digest: [u8; 32],
    /// Certificates left out as unusable (a CA bundle's), each warned about by the parser.
    pub(crate) skipped: Vec<Skipped>,
    pub(crate) stamp: Stamp,
}

impl<T: fmt::Display> fmt::Display for Pem<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.value.fmt(f)
    }
}

impl<T: Parse> Credential for Pem<T> {
    const KIND: Kind = T::KIND;

    type Parser = PemParser;

    /// The read's PEM parsed, or why it is not a usable `T`.
    fn from_fetched(
        fetched: Fetched,
        parser: &PemParser,
        origin: &Arc<str>,
        _max_size: usize,
        now: SystemTime,
    ) -> Result<Self, LoadError> {
        let pem = T::parse(fetched.bytes(), now).map_err(|error| LoadError::Fetch {
            origin: origin.clone(),
            error: Arc::new(error),
        })?;
        parser.warn_skipped(origin, &pem);
        Ok(pem)
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
        Some(&self.value.certificate()?.subject)
    }

    fn fingerprint(&self) -> String {
        let [a, b, c, d, ..] = self.digest;
        match self.value.certificate() {
            Some(certificate) => certificate.fingerprint.clone(),
            None => format!("{a:02x}{b:02x}{c:02x}{d:02x}"),
        }
    }

    fn logged(&self) -> impl fmt::Display + '_ {
        &self.value
    }

    fn seed(&self) -> u64 {
        u64::from_be_bytes(self.digest[..8].try_into().expect("8 bytes"))
    }

    /// A certificate's `notAfter`.
    fn own_expiry(&self) -> Option<SystemTime> {
        self.value.certificate().map(|c| c.not_after)
    }

    /// The earlier of the source's expiry (an exec plugin's) and its own.
    fn expires_at(&self) -> Option<SystemTime> {
        let own = self.own_expiry();
        self.stamp.source_expiry.into_iter().chain(own).min()
    }

    /// Past the source's expiry or its own (for a bundle, every authority's).
    fn is_expired_at(&self, now: SystemTime) -> bool {
        self.expires_at().is_some_and(|exp| now >= exp) || self.value.is_expired_at(now)
    }

    fn skipped(&self) -> u64 {
        self.skipped.len() as u64
    }

    fn issued_at(&self) -> Option<SystemTime> {
        self.value.certificate().map(|c| c.not_before)
    }
}

/// The SHA-256 of `certs`' DER, each after its length.
pub(crate) fn digest<'a>(certs: impl IntoIterator<Item = &'a [u8]>) -> [u8; 32] {
    let mut hash = Sha256::new();
    for der in certs {
        hash.update((der.len() as u64).to_be_bytes());
        hash.update(der);
    }
    hash.finalize().into()
}

/// What turns PEM into a [`Pem`]: it remembers the skipped certificates last warned about,
/// so that a timer's read of the same bundle warns no more.
#[derive(Default)]
pub(crate) struct PemParser {
    warned: Mutex<([u8; 32], Vec<usize>)>,
}

impl PemParser {
    /// Warns about each certificate `pem` left out, unless they were the last warned about.
    fn warn_skipped<T>(&self, origin: &str, pem: &Pem<T>) {
        let key = (pem.digest, pem.skipped.iter().map(|s| s.position).collect());
        let mut warned = lock(&self.warned);
        if *warned != key {
            for skipped in &pem.skipped {
                tracing::warn!(
                    source = %origin,
                    position = skipped.position,
                    subject = skipped.subject.as_deref().unwrap_or("(does not parse)"),
                    error = %skipped.error,
                    "a certificate of the CA bundle cannot be used: skipped, the others are trusted"
                );
            }
            *warned = key;
        }
    }
}

#[cfg(test)]
mod tests;
