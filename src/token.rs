//! A bearer token: bytes from a file, validated, trimmed, and prebuilt as a sensitive header.
//!
//! A [`Token`] never shows its secret: `Debug` and `Display` print a short
//! [`Fingerprint`] (the first 8 hex digits of the SHA-256 of the token), which is enough to
//! tell two tokens apart in logs and nothing more.
//!
//! ```
//! use bearer_reload::token::{Token, TokenError, DEFAULT_MAX_SIZE};
//!
//! // `echo $TOKEN > file` leaves a newline: it is trimmed.
//! let token = Token::parse(b"abc.def\n", DEFAULT_MAX_SIZE).unwrap();
//! assert_eq!(token.header_value().as_bytes(), b"Bearer abc.def");
//! assert!(token.header_value().is_sensitive());
//! assert!(!format!("{token:?}").contains("abc.def"));
//!
//! // A control byte inside the token is an error that says where, not what the token is.
//! let err = Token::parse(b"abc\x07def", DEFAULT_MAX_SIZE).unwrap_err();
//! assert_eq!(err, TokenError::InvalidByte { offset: 3 });
//! ```

use std::fmt;
use std::time::SystemTime;

use http::HeaderValue;
use sha2::{Digest, Sha256};

/// The default cap on the size of a token file: 64 KiB.
pub const DEFAULT_MAX_SIZE: usize = 64 * 1024;

const PREFIX: &[u8] = b"Bearer ";

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
    /// The input is larger than the cap.
    #[error("token is larger than the cap of {max} bytes")]
    TooLarge {
        /// The cap in force, in bytes.
        max: usize,
    },
}

/// A short, non-secret identifier of a token: the first 8 hex digits of its SHA-256.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Fingerprint([u8; 4]);

impl Fingerprint {
    fn of(digest: &[u8; 32]) -> Self {
        Self([digest[0], digest[1], digest[2], digest[3]])
    }
}

impl fmt::Display for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for b in self.0 {
            write!(f, "{b:02x}")?;
        }
        Ok(())
    }
}

impl fmt::Debug for Fingerprint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// A validated bearer token, held as a prebuilt sensitive `Authorization` header value.
///
/// Built by [`Token::parse`]; the [`TokenStore`](crate::TokenStore) gives it a generation
/// when it installs it.
#[derive(Clone)]
pub struct Token {
    header: HeaderValue,
    digest: [u8; 32],
    generation: u64,
    loaded_at: SystemTime,
}

impl Token {
    /// Validates `bytes` as a token: trims leading and trailing ASCII whitespace, then
    /// requires at least one byte, only visible ASCII, and at most `max_size` input bytes.
    pub fn parse(bytes: &[u8], max_size: usize) -> Result<Self, TokenError> {
        if bytes.len() > max_size {
            return Err(TokenError::TooLarge { max: max_size });
        }
        let start = bytes
            .iter()
            .position(|b| !b.is_ascii_whitespace())
            .ok_or(TokenError::Empty)?;
        let end = bytes
            .iter()
            .rposition(|b| !b.is_ascii_whitespace())
            .map_or(start, |i| i + 1);
        let secret = &bytes[start..end];
        if let Some(i) = secret.iter().position(|b| !(0x21..=0x7e).contains(b)) {
            return Err(TokenError::InvalidByte { offset: start + i });
        }
        let mut value = Vec::with_capacity(PREFIX.len() + secret.len());
        value.extend_from_slice(PREFIX);
        value.extend_from_slice(secret);
        // Visible ASCII after a fixed prefix is always a valid header value.
        let mut header = HeaderValue::from_maybe_shared(bytes::Bytes::from(value))
            .map_err(|_| TokenError::InvalidByte { offset: start })?;
        header.set_sensitive(true);
        Ok(Self {
            header,
            digest: Sha256::digest(secret).into(),
            generation: 0,
            loaded_at: SystemTime::now(),
        })
    }

    /// The `Authorization` header value, `Bearer <token>`, marked sensitive.
    pub fn header_value(&self) -> &HeaderValue {
        &self.header
    }

    /// The token's fingerprint, safe to log.
    pub fn fingerprint(&self) -> Fingerprint {
        Fingerprint::of(&self.digest)
    }

    /// The store generation this token was installed as (0 until a store installs it).
    pub fn generation(&self) -> u64 {
        self.generation
    }

    /// When the bytes of this token were read.
    pub fn loaded_at(&self) -> SystemTime {
        self.loaded_at
    }

    /// Whether both tokens carry the same secret.
    pub fn same_secret(&self, other: &Token) -> bool {
        self.digest == other.digest
    }

    pub(crate) fn with_generation(mut self, generation: u64) -> Self {
        self.generation = generation;
        self
    }
}

impl fmt::Debug for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Token")
            .field("fingerprint", &self.fingerprint())
            .field("generation", &self.generation)
            .finish_non_exhaustive()
    }
}

impl fmt::Display for Token {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "token {}", self.fingerprint())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret(t: &Token) -> &[u8] {
        &t.header_value().as_bytes()[PREFIX.len()..]
    }

    #[test]
    fn trims_ascii_whitespace_on_both_ends() {
        for input in [&b"tok"[..], b"tok\n", b"  tok\r\n", b"\ttok \n\n"] {
            let t = Token::parse(input, DEFAULT_MAX_SIZE).unwrap();
            assert_eq!(secret(&t), b"tok", "input {input:?}");
        }
    }

    #[test]
    fn empty_and_whitespace_only_are_rejected() {
        for input in [&b""[..], b"\n", b"  \t\r\n "] {
            assert_eq!(
                Token::parse(input, DEFAULT_MAX_SIZE).unwrap_err(),
                TokenError::Empty
            );
        }
    }

    #[test]
    fn bad_bytes_are_rejected_with_their_offset() {
        let cases: [(&[u8], usize); 5] = [
            (b"ab cd", 2),
            (b"  ab\ncd\n", 4),
            (b"ab\x00", 2),
            (b"\xffab", 0),
            (b"ab\x7fcd", 2),
        ];
        for (input, offset) in cases {
            assert_eq!(
                Token::parse(input, DEFAULT_MAX_SIZE).unwrap_err(),
                TokenError::InvalidByte { offset },
                "input {input:?}"
            );
        }
    }

    #[test]
    fn cap_is_inclusive() {
        assert!(Token::parse(&[b'a'; 16], 16).is_ok());
        assert_eq!(
            Token::parse(&[b'a'; 17], 16).unwrap_err(),
            TokenError::TooLarge { max: 16 }
        );
    }

    #[test]
    fn header_is_sensitive_and_round_trips() {
        let t = Token::parse(b"eyJ.abc-_~+/=", DEFAULT_MAX_SIZE).unwrap();
        assert!(t.header_value().is_sensitive());
        assert_eq!(t.header_value().to_str().unwrap(), "Bearer eyJ.abc-_~+/=");
    }

    #[test]
    fn debug_and_display_show_only_the_fingerprint() {
        let t = Token::parse(b"s3cr3t-token-value", DEFAULT_MAX_SIZE).unwrap();
        let fp = t.fingerprint().to_string();
        assert_eq!(fp.len(), 8);
        // sha256("s3cr3t-token-value") computed independently of the code under test.
        let expected: String = Sha256::digest(b"s3cr3t-token-value")[..4]
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(fp, expected);
        for out in [format!("{t:?}"), format!("{t:#?}"), t.to_string()] {
            assert!(!out.contains("s3cr3t"), "{out}");
            assert!(out.contains(&fp), "{out}");
        }
        // http's own Debug of a sensitive value hides it too.
        assert!(!format!("{:?}", t.header_value()).contains("s3cr3t"));
    }

    #[test]
    fn same_secret_ignores_surrounding_whitespace() {
        let a = Token::parse(b"abc\n", 100).unwrap();
        let b = Token::parse(b" abc", 100).unwrap();
        let c = Token::parse(b"abd", 100).unwrap();
        assert!(a.same_secret(&b));
        assert!(!a.same_secret(&c));
        assert_ne!(a.fingerprint(), c.fingerprint());
    }
}
