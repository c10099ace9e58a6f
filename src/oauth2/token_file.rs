//! A token read from a file to go in a request: a client assertion, a subject token.

use std::path::Path;

use super::error::Error;

/// The largest client assertion or subject token file read.
const MAX_FILE: u64 = 64 * 1024;

/// Reads a token (an assertion, a subject token) from `path`: one line of visible ASCII
/// once surrounding whitespace is trimmed. Errors name the file, never its content.
pub(super) async fn read_token_file(what: &'static str, path: &Path) -> Result<String, Error> {
    let read_error = |source| Error::ReadFile {
        what,
        path: path.to_owned(),
        source,
    };
    let bad = |problem| Error::BadFile {
        what,
        path: path.to_owned(),
        problem,
    };
    let len = tokio::fs::metadata(path).await.map_err(read_error)?.len();
    if len > MAX_FILE {
        return Err(bad("is larger than 64 KiB"));
    }
    let bytes = tokio::fs::read(path).await.map_err(read_error)?;
    let token = bytes.trim_ascii();
    if token.is_empty() {
        return Err(bad("is empty"));
    }
    if !token.iter().all(|b| (0x21..=0x7e).contains(b)) {
        return Err(bad(
            "holds more than one token, or characters a token cannot have",
        ));
    }
    Ok(String::from_utf8(token.to_vec()).expect("visible ASCII is UTF-8"))
}
