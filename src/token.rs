//! A bearer token: bytes from a source, validated, trimmed, and prebuilt as a sensitive
//! header.
//!
//! A [`Token`] never shows its secret: `Debug` and `Display` print its
//! [`fingerprint`](Token::fingerprint), and what the token says about itself:
//!
//! - a **JWT**: its claims, read without verifying the signature: `sub`, `exp` and the
//!   Kubernetes `warnafter` hint ([`subject`](Token::subject),
//!   [`expires_at`](Token::expires_at), [`refresh_at`](Token::refresh_at));
//! - a kubeadm **bootstrap token** (`abcdef.0123456789abcdef`): its public id, the part
//!   before the dot;
//! - anything else is **opaque**, a token that looks like a JWT but does not decode too.
//!
//! ```
//! use bearer_reload::token::{Token, TokenError};
//!
//! // `echo $TOKEN > file` leaves a newline: it is trimmed.
//! let token = Token::parse(b"abc.def\n").unwrap();
//! assert_eq!(token.header_value().as_bytes(), b"Bearer abc.def");
//! assert!(token.header_value().is_sensitive());
//! assert!(!format!("{token:?}").contains("abc.def"));
//!
//! // A control byte inside the token is an error that says where, not what the token is.
//! let err = Token::parse(b"abc\x07def").unwrap_err();
//! assert_eq!(err, TokenError::InvalidByte { offset: 3 });
//!
//! // A bootstrap token shows its id, never its secret.
//! let token = Token::parse(b"07401b.f395accd246ae52d").unwrap();
//! assert_eq!(token.subject(), Some("system:bootstrap:07401b"));
//! let shown = format!("{token} {token:?}");
//! assert!(shown.contains("07401b") && !shown.contains("f395accd246ae52d"));
//!
//! // A JWT: {"alg":"none"} . {"sub":"system:serviceaccount:default:app","exp":1800000000} .
//! let jwt = Token::parse(
//!     b"eyJhbGciOiJub25lIn0\
//!       .eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDphcHAiLCJleHAiOjE4MDAwMDAwMDB9.",
//! )
//! .unwrap();
//! assert_eq!(jwt.subject(), Some("system:serviceaccount:default:app"));
//! assert_eq!(
//!     jwt.expires_at(),
//!     Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000))
//! );
//! ```

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use http::HeaderValue;
use sha2::{Digest, Sha256};
use zeroize::Zeroizing;

use crate::clock::Rfc3339;
use crate::source::Fetched;
use crate::store::{Credential, Kind, LoadError};

pub(crate) mod claims;
pub(crate) use claims::{Claims, Freshness};

/// For the fuzz targets (`--cfg fuzzing`): what the token says about itself, which must
/// hold no secret.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_claims(token: &Token, now: SystemTime) -> String {
    let _ = token.freshness_at(now);
    format!("{:?} {:?}", token.kind, token.subject())
}

/// The default cap on the size of a token, in bytes as the source gives them.
pub(crate) const DEFAULT_MAX_SIZE: usize = 64 * 1024;

const PREFIX: &[u8] = b"Bearer ";

const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why bytes were not accepted as a token. The messages never show the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// Nothing but whitespace, or nothing at all.
    #[error("token is empty")]
    Empty,
    /// A byte that is not visible ASCII (0x21..=0x7E) inside the token.
    #[error("token has a byte that is not visible ASCII at offset {offset}")]
    InvalidByte {
        /// Offset of the byte in the input, before trimming.
        offset: usize,
    },
    /// The input starts with a UTF-8 byte-order mark (`EF BB BF`), as files saved by
    /// Notepad or PowerShell's `Out-File` do: save the file without one.
    #[error(
        "token starts with a UTF-8 byte-order mark (EF BB BF): save the file without one \
         (as ASCII, or UTF-8 without BOM)"
    )]
    ByteOrderMark,
    /// The input is larger than the cap.
    #[error("token is larger than the cap of {max} bytes")]
    TooLarge {
        /// The cap in force, in bytes.
        max: usize,
    },
}

/// What a token is, as far as can be told without verifying it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenKind {
    Jwt(Claims),
    /// A kubeadm bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`.
    Bootstrap {
        /// The user the API server authenticates it as: `system:bootstrap:<id>`.
        user: String,
    },
    Opaque,
}

impl TokenKind {
    fn detect(token: &str) -> Self {
        let ok = |s: &str, len| {
            s.len() == len && s.bytes().all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9'))
        };
        match token.split_once('.') {
            Some((id, secret)) if ok(id, 6) && ok(secret, 16) => TokenKind::Bootstrap {
                user: format!("{BOOTSTRAP_USER}{id}"),
            },
            _ => claims::decode(token).map_or(TokenKind::Opaque, TokenKind::Jwt),
        }
    }

    pub(crate) fn name(&self) -> &'static str {
        match self {
            TokenKind::Jwt(_) => "jwt",
            TokenKind::Bootstrap { .. } => "bootstrap",
            TokenKind::Opaque => "opaque",
        }
    }
}

const BOOTSTRAP_USER: &str = "system:bootstrap:";

fn bootstrap_id_of(user: &str) -> &str {
    user.strip_prefix(BOOTSTRAP_USER).unwrap_or(user)
}

/// A validated bearer token, held as a prebuilt sensitive `Authorization` header value;
/// [`TokenStore::current`](crate::TokenStore::current) hands it out.
#[derive(Clone)]
pub struct Token {
    header: HeaderValue,
    digest: [u8; 32],
    kind: TokenKind,
    stamp: Stamp,
}

impl Token {
    /// Validates `bytes` as a token, as a store does each read: trims ASCII whitespace,
    /// then requires at least one byte, only visible ASCII, and at most 64 KiB of input (a
    /// store's cap is [`max_size`](crate::StoreBuilder::max_size)).
    ///
    /// # Errors
    ///
    /// The [`TokenError`] that says what is wrong.
    pub fn parse(bytes: &[u8]) -> Result<Self, TokenError> {
        Self::parse_capped(bytes, DEFAULT_MAX_SIZE)
    }

    /// [`parse`](Self::parse) with a cap of `max_size` input bytes.
    pub(crate) fn parse_capped(bytes: &[u8], max_size: usize) -> Result<Self, TokenError> {
        if bytes.len() > max_size {
            return Err(TokenError::TooLarge { max: max_size });
        }
        if bytes.starts_with(UTF8_BOM) {
            return Err(TokenError::ByteOrderMark);
        }
        let trimmed = bytes.trim_ascii_start();
        let start = bytes.len() - trimmed.len();
        let secret = trimmed.trim_ascii_end();
        if secret.is_empty() {
            return Err(TokenError::Empty);
        }
        if let Some(i) = secret.iter().position(|b| !b.is_ascii_graphic()) {
            return Err(TokenError::InvalidByte { offset: start + i });
        }
        // Allocated at its size: no reallocation leaves an unwiped copy behind.
        let value = Zeroizing::new([PREFIX, secret].concat());
        // Wiped when the last clone of the header (clones share it) is dropped. Visible
        // ASCII after a fixed prefix is always a valid header value.
        let mut header = HeaderValue::from_maybe_shared(bytes::Bytes::from_owner(value))
            .map_err(|_| TokenError::InvalidByte { offset: start })?;
        header.set_sensitive(true);
        // Visible ASCII is UTF-8.
        let kind = std::str::from_utf8(secret).map_or(TokenKind::Opaque, TokenKind::detect);
        Ok(Self {
            header,
            digest: Sha256::digest(secret).into(),
            kind,
            stamp: Stamp::default(),
        })
    }

    /// Whom the token is for, when it says: a JWT's `sub`, or the user a bootstrap token
    /// authenticates as (`system:bootstrap:<id>`).
    pub fn subject(&self) -> Option<&str> {
        match &self.kind {
            TokenKind::Jwt(claims) => claims.sub.as_deref(),
            TokenKind::Bootstrap { user } => Some(user),
            TokenKind::Opaque => None,
        }
    }

    /// When the token expires: the expiry its source gave, else a JWT's `exp`.
    pub fn expires_at(&self) -> Option<SystemTime> {
        Credential::expires_at(self)
    }

    pub(crate) fn claims(&self) -> Option<&Claims> {
        match &self.kind {
            TokenKind::Jwt(claims) => Some(claims),
            _ => None,
        }
    }

    /// When the token is due to be replaced: when its source asked to be fetched again
    /// ([`Fetched::with_refresh_at`](crate::source::Fetched::with_refresh_at)), else a
    /// JWT's `warnafter` (the real lifetime of a token whose `exp` the API server extended
    /// to a year), else its `exp`.
    pub fn refresh_at(&self) -> Option<SystemTime> {
        self.stamp
            .refresh_at
            .or_else(|| self.claims().and_then(Claims::rotate_hint))
    }

    /// The `Authorization` header value, `Bearer <token>`, marked sensitive.
    pub fn header_value(&self) -> &HeaderValue {
        &self.header
    }

    /// The token's fingerprint, safe to log: the first 8 hex digits of its SHA-256.
    pub fn fingerprint(&self) -> String {
        format!("{:08x}", self.short_fingerprint())
    }

    fn short_fingerprint(&self) -> u32 {
        let [a, b, c, d, ..] = self.digest;
        u32::from_be_bytes([a, b, c, d])
    }

    /// The store generation this token was installed as.
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.stamp.generation
    }

    /// When the bytes of this token were read.
    pub fn loaded_at(&self) -> SystemTime {
        self.stamp.loaded_at
    }
}

/// What a store writes on each credential it installs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Stamp {
    /// 0 until a store installs it; 1 for a store's first.
    pub(crate) generation: u64,
    /// When the store read it, on the store's clock.
    pub(crate) loaded_at: SystemTime,
    /// The expiry the source gave, which wins over the credential's own.
    pub(crate) source_expiry: Option<SystemTime>,
    /// When the source asked to be fetched again.
    pub(crate) refresh_at: Option<SystemTime>,
}

impl Default for Stamp {
    fn default() -> Self {
        Self {
            generation: 0,
            loaded_at: SystemTime::now(),
            source_expiry: None,
            refresh_at: None,
        }
    }
}

/// A JWT's dates that logs show.
fn shown_dates(c: &Claims) -> impl Iterator<Item = (&'static str, Rfc3339)> {
    [("exp", c.exp), ("warnafter", c.warnafter)]
        .into_iter()
        .filter_map(|(name, date)| Some((name, Rfc3339(date?))))
}

/// The kind, the fingerprint, the generation, and the non-secret parts.
impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut d = f.debug_struct("Token");
        d.field("kind", &format_args!("{}", self.kind.name()))
            .field(
                "fingerprint",
                &format_args!("{:08x}", self.short_fingerprint()),
            )
            .field("generation", &self.stamp.generation);
        match &self.kind {
            TokenKind::Jwt(claims) => {
                if let Some(sub) = &claims.sub {
                    d.field("sub", sub);
                }
                for (name, date) in shown_dates(claims) {
                    d.field(name, &date);
                }
            }
            TokenKind::Bootstrap { user } => _ = d.field("id", &bootstrap_id_of(user)),
            TokenKind::Opaque => {}
        }
        d.finish_non_exhaustive()
    }
}

/// One line for logs: `jwt token 1a2b3c4d (sub system:serviceaccount:ns:app, exp
/// 2026-11-29T13:00:07Z)`, `bootstrap token 1a2b3c4d (id abcdef)`.
impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} token {:08x}",
            self.kind.name(),
            self.short_fingerprint()
        )?;
        let parts: Vec<String> = match &self.kind {
            TokenKind::Jwt(c) => (c.sub.iter().map(|sub| format!("sub {sub}")))
                .chain(shown_dates(c).map(|(name, date)| format!("{name} {date}")))
                .collect(),
            TokenKind::Bootstrap { user } => vec![format!("id {}", bootstrap_id_of(user))],
            TokenKind::Opaque => Vec::new(),
        };
        if parts.is_empty() {
            return Ok(());
        }
        write!(f, " ({})", parts.join(", "))
    }
}

/// A token as a store holds it.
impl Credential for Token {
    const KIND: Kind = Kind::TOKEN;

    type Parser = ();

    fn from_fetched(
        fetched: Fetched,
        _: &(),
        origin: &Arc<str>,
        max_size: usize,
        _: SystemTime,
    ) -> Result<Self, LoadError> {
        Token::parse_capped(fetched.bytes(), max_size).map_err(|source| LoadError::Invalid {
            origin: origin.clone(),
            source,
        })
    }

    fn stamp(&self) -> &Stamp {
        &self.stamp
    }

    fn stamped(self, stamp: Stamp) -> Self {
        Self { stamp, ..self }
    }

    fn same(&self, other: &Self) -> bool {
        self.digest == other.digest
    }

    fn subject(&self) -> Option<&str> {
        Token::subject(self)
    }

    fn fingerprint(&self) -> String {
        Token::fingerprint(self)
    }

    fn logged(&self) -> impl fmt::Display + '_ {
        Token::fingerprint(self)
    }

    fn shown(&self) -> String {
        format!("{self:?}")
    }

    fn seed(&self) -> u64 {
        self.short_fingerprint().into()
    }

    fn own_expiry(&self) -> Option<SystemTime> {
        self.claims().and_then(|c| c.exp)
    }

    fn freshness_at(&self, now: SystemTime) -> Freshness {
        let claims = self
            .claims()
            .map_or(Freshness::Unknown, |c| c.freshness_at(now));
        match self.stamp.source_expiry {
            Some(exp) if now >= exp => Freshness::Expired,
            Some(_) if claims == Freshness::Unknown => Freshness::Fresh,
            _ => claims,
        }
    }

    /// The kubelet's rotation point and the point it is overdue.
    fn own_moments(&self) -> [Option<SystemTime>; 2] {
        let claims = self.claims();
        [
            claims
                .and_then(|c| c.rotation_point())
                .and_then(|at| at.checked_add(KUBELET_JITTER)),
            claims.and_then(|c| c.overdue_at()),
        ]
    }

    fn overdue_at(&self) -> Option<SystemTime> {
        self.claims().and_then(|c| c.overdue_at())
    }

    fn issued_at(&self) -> Option<SystemTime> {
        self.claims().and_then(|c| c.iat)
    }

    fn refresh_at(&self) -> Option<SystemTime> {
        Token::refresh_at(self)
    }
}

/// How long after the kubelet's rotation point the file is re-read: its jitter.
const KUBELET_JITTER: Duration = Duration::from_secs(10);

#[cfg(test)]
mod tests;
