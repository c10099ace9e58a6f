//! The token endpoint's answer (feature `oauth2`), over an arbitrary status and body:
//! never panics, and an error never quotes an `access_token` the body holds. An answer
//! that gives a token goes through a store whose clock the input sets: its expiry is
//! counted from each fetch's time, and the timer works out when to ask again.
#![no_main]

#[path = "common.rs"]
mod common;

use bearer_reload::oauth2::fuzz_parse_response;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((status, body)) = data.split_first_chunk::<2>() else {
        return;
    };
    let byte = status[0] ^ status[1];
    // A status as it is when it is one (the seeds' 200 was 300 before), else mapped to one.
    let status = match u16::from_le_bytes(*status) {
        s @ 100..=599 => s,
        s => 100 + s % 500,
    };
    let now = common::now_from(byte);
    let Err(e) = fuzz_parse_response(status, body, now) else {
        let body = body.to_vec();
        common::run_tokens(
            move |sent_at| fuzz_parse_response(status, &body, sent_at),
            now,
            common::span_from(byte.rotate_left(4)),
        );
        return;
    };
    let shown = format!("{e} {e:?}");
    let token = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|doc| doc.get("access_token")?.as_str().map(str::to_owned));
    // Short values can be words of the message itself.
    // A token that is also elsewhere in the body may be quoted from there.
    let once = |t: &str| body.windows(t.len()).filter(|w| *w == t.as_bytes()).count() == 1;
    if let Some(token) = token.filter(|t| t.len() >= 12 && once(t)) {
        assert!(
            !shown.contains(&token),
            "the error quotes the token: {shown}"
        );
    }
});
