//! The API server's answer to a TokenRequest, over arbitrary text: never panics, and the
//! problem named is one of the parser's fixed phrases (it quotes nothing of the body).
#![no_main]

use bearer_reload::source::fuzz_parse_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(problem) = fuzz_parse_response(body) {
        // A `&'static str`: it cannot hold the body.
        assert!(!problem.is_empty());
    }
});
