//! What of a plugin's standard error may go into an error message: its tail, cut, with
//! anything that looks like a token taken out.
//!
//! A run of 16 or more characters of the token68 alphabet (`A-Z a-z 0-9 - . _ ~ + / =`:
//! base64, base64url, JWTs, hex) that holds a digit, or both upper- and lowercase letters,
//! is replaced by `[redacted]`. Plain words and lowercase paths stay readable; a path with
//! digits or capitals is redacted too, which costs a little context and never a secret.

/// Stderr bytes kept for an error message.
pub(super) const STDERR_TAIL: usize = 2048;

const MIN_SECRET: usize = 16;

const REDACTED: &str = "[redacted]";

fn is_token_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"-._~+/=".contains(&b)
}

/// `text` with every run of token characters that looks like a secret replaced.
pub(crate) fn redact(text: &str) -> String {
    // Token characters are ASCII: every run of them, and every run of the others, is a
    // run of whole characters.
    let runs = text
        .as_bytes()
        .chunk_by(|a, b| is_token_byte(*a) == is_token_byte(*b));
    runs.map(|run| match std::str::from_utf8(run) {
        Ok(run) if !looks_secret(run) => run,
        _ => REDACTED,
    })
    .collect()
}

fn looks_secret(run: &str) -> bool {
    if run.len() < MIN_SECRET || is_api_version(run) {
        return false;
    }
    let has = |f: fn(&u8) -> bool| run.bytes().any(|b| f(&b));
    has(u8::is_ascii_digit) || (has(u8::is_ascii_uppercase) && has(u8::is_ascii_lowercase))
}

/// `group/vN`, `group/vNalphaM`, `group/vNbetaM` in lowercase: never a secret.
fn is_api_version(s: &str) -> bool {
    let Some((group, version)) = s.rsplit_once("/v") else {
        return false;
    };
    let digits = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_digit());
    let (major, pre) = version.split_at(
        version
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(version.len()),
    );
    let pre_ok = pre.is_empty()
        || ["alpha", "beta"]
            .iter()
            .any(|p| pre.strip_prefix(p).is_some_and(digits));
    group
        .bytes()
        .all(|b| matches!(b, b'a'..=b'z' | b'0'..=b'9' | b'.' | b'-'))
        && digits(major)
        && pre_ok
}

/// The last [`STDERR_TAIL`] bytes of a stream, kept while it is read.
#[derive(Default)]
pub(super) struct Tail {
    bytes: Vec<u8>,
    cut: bool,
}

impl Tail {
    pub(super) fn push(&mut self, chunk: &[u8]) {
        self.bytes.extend_from_slice(chunk);
        if self.bytes.len() > STDERR_TAIL {
            let extra = self.bytes.len() - STDERR_TAIL;
            self.bytes.drain(..extra);
            self.cut = true;
        }
    }

    /// The tail as text fit for an error: trimmed, terminal escapes dropped, secrets
    /// redacted; after a cut, the partial word at the cut is dropped too, so that the end
    /// of a token cut in two never shows.
    pub(super) fn into_message(self) -> String {
        let text = String::from_utf8_lossy(&self.bytes);
        let clean = |text: &str| redact(strip_escapes(text).trim());
        if !self.cut {
            return clean(&text);
        }
        let start = text.bytes().position(|b| !is_token_byte(b));
        format!("…{}", clean(&text[start.unwrap_or(text.len())..]))
    }
}

/// `text` without terminal escape sequences (colours, cursor moves), other control
/// characters but newlines turned into spaces.
pub(super) fn strip_escapes(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '\x1b' => {
                // CSI: ESC [ parameters... final byte in '@'..='~'; else ESC and one char.
                if chars.next() == Some('[') {
                    chars.find(|c| ('@'..='~').contains(c));
                }
            }
            '\n' => out.push('\n'),
            c if c.is_control() => out.push(' '),
            c => out.push(c),
        }
    }
    out
}
