//! The JWT claims decoder, reached through `Token::parse` of `header.payload.signature`
//! built from the fuzzer's input: never panics, and shows no signature. The token then
//! goes through a store whose clock the input sets, whose timer works out the claims'
//! dates (the kubelet's rotation point, the point it is overdue, `exp`): never a panic.
#![no_main]

#[path = "common.rs"]
mod common;

use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use bearer_reload::source::Fetched;
use bearer_reload::token::Token;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks how the payload is built; the rest is split in two at the
    // second byte: a JSON payload (raw) and a signature.
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let Some((&split, rest)) = rest.split_first() else {
        return;
    };
    // After the split byte (it was the payload's first byte, which made the seeds' JSON
    // invalid: the claims were seldom decoded).
    let (raw, signature) = rest.split_at(usize::from(split).min(rest.len()));
    let payload = raw;
    let header = if mode & 1 == 0 {
        URL_SAFE_NO_PAD.encode(br#"{"alg":"RS256","kid":"k"}"#)
    } else {
        URL_SAFE_NO_PAD.encode(payload)
    };
    let payload = if mode & 2 == 0 {
        URL_SAFE_NO_PAD.encode(payload)
    } else {
        // The raw bytes as the payload part: exercises the base64 decoder on junk.
        String::from_utf8_lossy(payload).into_owned()
    };
    let signature = URL_SAFE_NO_PAD.encode(signature);
    let jwt = format!("{header}.{payload}.{signature}");
    if let Ok(token) = Token::parse(jwt.as_bytes()) {
        let claims = bearer_reload::token::fuzz_claims(&token, std::time::SystemTime::now());
        let shown = format!("{token:?} {token:#?} {token} {claims}");
        let _ = token.expires_at();
        let _ = token.refresh_at();
        let _ = bearer_reload::token::fuzz_claims(&token, std::time::UNIX_EPOCH);
        // Unless the claims themselves hold it (the input can put it there).
        if signature.len() > 8 && !String::from_utf8_lossy(raw).contains(&signature) {
            assert!(!shown.contains(&signature), "the signature is shown");
        }
        // The mode's high bits pick the store's clock and how long its timer runs.
        let jwt = jwt.into_bytes();
        common::run_tokens(
            move |_| Ok::<_, String>(Fetched::new(jwt.clone())),
            common::now_from(mode & 0xfc),
            common::span_from(mode.rotate_left(4)),
        );
    }
});
