//! A bearer token: bytes from a source, validated, trimmed, and prebuilt as a sensitive
//! header.
//!
//! A [`Token`] never shows its secret: `Debug` and `Display` print a short fingerprint
//! (the first 8 hex digits of the SHA-256 of the token), which is enough to tell two
//! tokens apart in logs, and what the token says about itself without its secret part:
//!
//! - a **JWT** (three base64url parts): its claims, read without verifying the signature;
//!   logs show `sub`, `exp` and the Kubernetes `warnafter` hint, and
//!   [`subject`](Token::subject), [`expires_at`](Token::expires_at) and
//!   [`refresh_at`](Token::refresh_at) return them;
//! - a kubeadm **bootstrap token** (`abcdef.0123456789abcdef`): its public id, the part
//!   before the dot (the API server's user `system:bootstrap:<id>`); the rest is the
//!   secret;
//! - anything else is **opaque**. A token that looks like a JWT but does not decode is a
//!   valid opaque bearer token, just without claims.
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

/// What the token says about itself (its kind and claims, in full) and how it stands
/// against `now`, for the fuzz targets (`--cfg fuzzing`, which cargo-fuzz sets; never in a
/// normal build): the claims' `Debug`, which must hold no secret.
#[cfg(fuzzing)]
#[doc(hidden)]
pub fn fuzz_claims(token: &Token, now: SystemTime) -> String {
    let _ = token.freshness_at(now);
    format!("{:?} {:?}", token.kind, token.subject())
}

/// The default cap on the size of a token, in bytes as the source gives them: 64 KiB.
pub(crate) const DEFAULT_MAX_SIZE: usize = 64 * 1024;

const PREFIX: &[u8] = b"Bearer ";

/// What Notepad and PowerShell put at the start of a UTF-8 file.
const UTF8_BOM: &[u8] = b"\xEF\xBB\xBF";

/// Why bytes were not accepted as a token.
///
/// The messages name the problem and, for a bad byte, its offset; never the token.
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
    /// Notepad or PowerShell's `Out-File` do. Refused, never sent: save the file without
    /// one (`Set-Content -Encoding ascii`, or an editor's "UTF-8 without BOM").
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

/// What a token is, as far as can be told without verifying it. Holds no secret.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TokenKind {
    /// A JWT, with the claims read from its payload (the signature is not verified).
    Jwt(Claims),
    /// A kubeadm bootstrap token, `[a-z0-9]{6}.[a-z0-9]{16}`.
    Bootstrap {
        /// The user the API server authenticates it as: `system:bootstrap:` and the
        /// public token id, the six characters before the dot.
        user: String,
    },
    /// Any other token.
    Opaque,
}

impl TokenKind {
    fn detect(token: &str) -> Self {
        // A kubeadm bootstrap token is `[a-z0-9]{6}\.[a-z0-9]{16}`.
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

    /// A short name: `jwt`, `bootstrap` or `opaque`.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            TokenKind::Jwt(_) => "jwt",
            TokenKind::Bootstrap { .. } => "bootstrap",
            TokenKind::Opaque => "opaque",
        }
    }
}

/// What the API server calls the user of a bootstrap token, before its id.
const BOOTSTRAP_USER: &str = "system:bootstrap:";

/// The id in a bootstrap token's user name.
fn bootstrap_id_of(user: &str) -> &str {
    user.strip_prefix(BOOTSTRAP_USER).unwrap_or(user)
}

/// A validated bearer token, held as a prebuilt sensitive `Authorization` header value.
///
/// Built by [`Token::parse`]; the [`TokenStore`](crate::TokenStore) gives it a generation
/// when it installs it, and [`TokenStore::current`](crate::TokenStore::current) hands it
/// out.
#[derive(Clone)]
pub struct Token {
    header: HeaderValue,
    digest: [u8; 32],
    kind: TokenKind,
    /// The store's generation and read time, and the source's dates (an expiry that wins
    /// over a JWT's `exp`, a time to fetch again).
    stamp: Stamp,
}

impl Token {
    /// Validates `bytes` as a token: trims leading and trailing ASCII whitespace, then
    /// requires at least one byte, only visible ASCII, and at most 64 KiB of input (a
    /// store's cap is [`max_size`](crate::StoreBuilder::max_size)).
    ///
    /// Also reads what the token says about itself (see the [module docs](self)). A token
    /// that looks like a JWT but does not decode is accepted as opaque: only the server
    /// can say whether it is valid. A store parses each read this way; this is for a
    /// source's own tests, and the crate's benches and fuzz targets.
    ///
    /// # Errors
    ///
    /// The [`TokenError`] that says what is wrong and where, never the token: empty, too
    /// large, a byte-order mark, a byte that cannot be in a header.
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
        // The buffer is wiped when the last clone of the header (the last request carrying
        // it) is dropped; each clone only counts up, as a shared buffer's does.
        // Visible ASCII after a fixed prefix is always a valid header value.
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

    /// Whom the token is for, when it says: a JWT's `sub`
    /// (`system:serviceaccount:<namespace>:<name>` for a Kubernetes service account), or
    /// the user a bootstrap token authenticates as (`system:bootstrap:<id>`). Never secret.
    pub fn subject(&self) -> Option<&str> {
        match &self.kind {
            TokenKind::Jwt(claims) => claims.sub.as_deref(),
            TokenKind::Bootstrap { user } => Some(user),
            TokenKind::Opaque => None,
        }
    }

    /// When the token expires: the expiry its source gave (an exec plugin's
    /// `expirationTimestamp`, ...), else a JWT's `exp`; `None` when neither is known.
    pub fn expires_at(&self) -> Option<SystemTime> {
        Credential::expires_at(self)
    }

    /// The claims, for a JWT.
    pub(crate) fn claims(&self) -> Option<&Claims> {
        match &self.kind {
            TokenKind::Jwt(claims) => Some(claims),
            _ => None,
        }
    }

    /// When the token is due to be replaced: when its source asked to be fetched again
    /// ([`Fetched::with_refresh_at`](crate::source::Fetched::with_refresh_at)), else a
    /// JWT's `warnafter`, else its `exp`; `None` when nothing says. For a token whose
    /// `exp` the API server extended to a year, this is the token's real lifetime
    /// (`warnafter`), not the year.
    pub fn refresh_at(&self) -> Option<SystemTime> {
        self.stamp
            .refresh_at
            .or_else(|| self.claims().and_then(Claims::rotate_hint))
    }

    /// The `Authorization` header value, `Bearer <token>`, marked sensitive.
    pub fn header_value(&self) -> &HeaderValue {
        &self.header
    }

    /// The token's fingerprint, safe to log: the first 8 hex digits of the SHA-256 of the
    /// token (`1a2b3c4d`).
    pub fn fingerprint(&self) -> String {
        format!("{:08x}", self.short_fingerprint())
    }

    /// The fingerprint as a number (shown as 8 hex digits), as timers key their jitter on.
    fn short_fingerprint(&self) -> u32 {
        let [a, b, c, d, ..] = self.digest;
        u32::from_be_bytes([a, b, c, d])
    }

    /// The store generation this token was installed as (0 until a store installs it).
    #[inline]
    pub(crate) fn generation(&self) -> u64 {
        self.stamp.generation
    }

    /// When the bytes of this token were read.
    pub fn loaded_at(&self) -> SystemTime {
        self.stamp.loaded_at
    }
}

/// What a store writes on each credential it installs: its generation, when it was read,
/// and the dates its source gave. (Here, as a token carries it on the request path.)
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

/// A JWT's dates that logs show, as logs show them.
fn shown_dates(c: &Claims) -> impl Iterator<Item = (&'static str, Rfc3339)> {
    [("exp", c.exp), ("warnafter", c.warnafter)]
        .into_iter()
        .filter_map(|(name, date)| Some((name, Rfc3339(date?))))
}

/// Shows the kind, the fingerprint, the generation, and the non-secret parts: a JWT's
/// `sub`, `exp` and `warnafter`, a bootstrap token's id.
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
/// 2026-11-29T13:00:07Z)`, `bootstrap token 1a2b3c4d (id abcdef)`, `opaque token 1a2b3c4d`.
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

    /// Validates the bytes as a token, with the source's dates.
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

    /// Whether both tokens carry the same secret.
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

    /// Its own `Debug` (its kind, fingerprint and claims, never its secret).
    fn shown(&self) -> String {
        format!("{self:?}")
    }

    fn seed(&self) -> u64 {
        self.short_fingerprint().into()
    }

    fn own_expiry(&self) -> Option<SystemTime> {
        self.claims().and_then(|c| c.exp)
    }

    /// How the token stands at `now` against the dates in its claims, and the expiry its
    /// source gave.
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

    /// A projected token's rotation point (the kubelet's 80%, and its jitter) and the
    /// point it is overdue, when its source gave no dates of its own.
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
