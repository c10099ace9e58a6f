//! The API server's answer to a TokenRequest, over arbitrary text: never panics, and the
//! problem named is one of the parser's fixed phrases (it quotes nothing of the body). An
//! answer that gives a token gets the kubelet's refresh point, seen at a time the input
//! sets, and goes through a store whose timer works out when to ask again.
#![no_main]

#[path = "common.rs"]
mod common;

use std::time::Duration;

use bearer_reload::source::fuzz_parse_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(body) = std::str::from_utf8(data) else {
        return;
    };
    // The lifetime asked for and the store's clock, from the body's bytes (which stay
    // whole, as the seeds are).
    let byte = data.iter().fold(0_u8, |a, b| a.wrapping_add(*b));
    let asked = data.iter().fold(0_u8, |a, b| a ^ b);
    let asked = Duration::from_secs(600 + u64::from(asked) * 3600);
    let now = common::now_from(byte);
    match fuzz_parse_response(body, asked, u64::from(byte), now) {
        // A `&'static str`: it cannot hold the body.
        Err(problem) => assert!(!problem.is_empty()),
        Ok(_) => {
            let body = body.to_owned();
            common::run_tokens(
                move |at| fuzz_parse_response(&body, asked, u64::from(byte), at),
                now,
                common::span_from(byte.rotate_left(4)),
            );
        }
    }
});
