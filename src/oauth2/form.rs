//! The `application/x-www-form-urlencoded` body of a token request (RFC 6749 Appendix B).

use std::fmt;

use bytes::Bytes;

/// An `application/x-www-form-urlencoded` body being built. Its values include secrets:
/// `Debug` shows the names alone.
#[derive(Default)]
pub(super) struct Form(String);

impl Form {
    pub(super) fn push(&mut self, name: &str, value: &str) {
        if !self.0.is_empty() {
            self.0.push('&');
        }
        encode_into(&mut self.0, name);
        self.0.push('=');
        encode_into(&mut self.0, value);
    }

    pub(super) fn into_body(self) -> Bytes {
        Bytes::from(self.0)
    }

    #[cfg(test)]
    pub(super) fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Form {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let names = self.0.split('&').filter_map(|pair| pair.split('=').next());
        f.debug_list().entries(names).finish()
    }
}

/// Appends `s` form-urlencoded (the WHATWG `application/x-www-form-urlencoded` byte
/// serializer, which RFC 6749 Appendix B asks for): unreserved bytes as they are, space
/// as `+`, the rest `%XX`.
pub(super) fn encode_into(out: &mut String, s: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for byte in s.bytes() {
        match byte {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'.' | b'_' | b'*' => {
                out.push(char::from(byte));
            }
            b' ' => out.push('+'),
            _ => {
                out.push('%');
                out.push(char::from(HEX[usize::from(byte >> 4)]));
                out.push(char::from(HEX[usize::from(byte & 0xf)]));
            }
        }
    }
}
