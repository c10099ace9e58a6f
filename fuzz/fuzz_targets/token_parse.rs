//! `Token::parse` over arbitrary bytes: never panics; an accepted token's header value is
//! `Bearer ` + the trimmed input, and nothing it shows contains the secret. An accepted
//! token then goes through a store, whose timer works out its dates: never a panic.
#![no_main]

#[path = "common.rs"]
mod common;

use bearer_reload::source::Fetched;
use bearer_reload::token::{Token, TokenError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    match Token::parse(data) {
        Ok(token) => {
            let trimmed = data.trim_ascii();
            let header = token.header_value().as_bytes();
            assert_eq!(&header[..7], b"Bearer ");
            assert_eq!(&header[7..], trimmed);
            assert!(token.header_value().is_sensitive());
            let claims = bearer_reload::token::fuzz_claims(&token, std::time::SystemTime::now());
            let shown = format!("{token:?} {token:#?} {token} {claims}");
            // Shorter tokens can be words of the output itself ("generatio" is in
            // "generation"); no run of the output without a space is 17 bytes long unless it
            // comes from the claims, which are shorter than the token they come from.
            if trimmed.len() > 16 {
                assert!(
                    !shown
                        .as_bytes()
                        .windows(trimmed.len())
                        .any(|w| w == trimmed),
                    "the token shows its secret"
                );
            }
            let again = Token::parse(trimmed).expect("a trimmed token parses again");
            assert_eq!(again.header_value(), token.header_value());
            // The last byte picks the store's clock: the token's dates against any time.
            let owned = data.to_vec();
            let byte = data.last().copied().unwrap_or(0);
            common::run_tokens(
                move |_| Ok::<_, String>(Fetched::new(owned.clone())),
                common::now_from(byte),
                common::span_from(byte),
            );
        }
        Err(TokenError::TooLarge { max }) => assert!(data.len() > max),
        Err(TokenError::Empty) => assert!(data.trim_ascii().is_empty()),
        Err(TokenError::ByteOrderMark) => assert!(data.starts_with(b"\xEF\xBB\xBF")),
        Err(TokenError::InvalidByte { offset }) => {
            assert!(!(0x21..=0x7e).contains(&data[offset]));
        }
        Err(e) => panic!("unexpected error {e:?}"),
    }
});
