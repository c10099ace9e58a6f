//! Properties of [`Token::parse`] and of the JWT claims decoder over arbitrary input.

use super::super::*;
use base64::Engine as _;
use base64::engine::general_purpose::{URL_SAFE, URL_SAFE_NO_PAD};
use proptest::prelude::*;

/// What `Token::parse(input, cap)` must answer, computed independently of it.
fn expected(input: &[u8], cap: usize) -> Result<Vec<u8>, TokenError> {
    if input.len() > cap {
        return Err(TokenError::TooLarge { max: cap });
    }
    if input.starts_with(&[0xef, 0xbb, 0xbf]) {
        return Err(TokenError::ByteOrderMark);
    }
    let ws = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\r' | b'\x0c');
    let Some(start) = input.iter().position(|b| !ws(b)) else {
        return Err(TokenError::Empty);
    };
    let end = input.iter().rposition(|b| !ws(b)).unwrap() + 1;
    let trimmed = &input[start..end];
    if let Some(i) = trimmed.iter().position(|&b| !(b'!'..=b'~').contains(&b)) {
        return Err(TokenError::InvalidByte { offset: start + i });
    }
    Ok([b"Bearer ", trimmed].concat())
}

/// Bytes biased towards what makes parsing interesting: whitespace at either end, visible
/// ASCII, and now and then a control, DEL, non-ASCII or vertical-tab byte.
fn tokenish() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![
        8 => 0x21u8..=0x7e,
        2 => prop::sample::select(&b" \t\n\r\x0c"[..]),
        1 => prop::sample::select(&b"\x00\x07\x0b\x7f\x80\xff"[..]),
        1 => any::<u8>(),
    ];
    prop::collection::vec(byte, 0..200)
}

fn inputs() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        prop::collection::vec(any::<u8>(), 0..300),
        tokenish(),
        // Whitespace around a visible token, the common case.
        ("[ \t\r\n]{0,4}", "[!-~]{1,150}", "[ \t\r\n\x0c]{0,4}")
            .prop_map(|(a, b, c)| format!("{a}{b}{c}").into_bytes()),
        // A file saved with a byte-order mark.
        tokenish().prop_map(|t| [&b"\xEF\xBB\xBF"[..], &t].concat()),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2048))]

    #[test]
    fn parse_accepts_exactly_the_valid_tokens_and_says_why_not(
        input in inputs(),
        cap in prop_oneof![Just(DEFAULT_MAX_SIZE), 0usize..320],
    ) {
        let got = Token::parse_capped(&input, cap);
        match (&got, expected(&input, cap)) {
            (Ok(token), Ok(header)) => {
                prop_assert_eq!(token.header_value().as_bytes(), &header[..]);
                prop_assert!(token.header_value().is_sensitive());
                prop_assert_eq!(token.generation(), 0);
                // Whatever its kind, showing it never panics nor shows it whole.
                let shown = format!("{token:?} {token:#?} {token} {:?}", token.kind());
                let secret = &header[PREFIX.len()..];
                // A shorter token can be a word of the output itself: "generatio".
                if secret.len() > 16 {
                    let secret = std::str::from_utf8(secret).unwrap();
                    prop_assert!(!shown.contains(secret), "{} shows {}", shown, secret);
                }
            }
            (Err(e), Err(want)) => prop_assert_eq!(e, &want),
            (got, want) => prop_assert!(false, "parse gave {:?}, expected {:?}", got, want),
        }
    }

    #[test]
    fn trimming_is_idempotent(input in inputs(), pad in "[ \t\r\n]{0,3}") {
        let Ok(token) = Token::parse(&input) else {
            return Ok(());
        };
        let trimmed = &token.header_value().as_bytes()[PREFIX.len()..];
        let again = Token::parse(trimmed).unwrap();
        prop_assert_eq!(again.header_value().as_bytes(), token.header_value().as_bytes());
        prop_assert!(again.same(&token));
        prop_assert_eq!(again.fingerprint(), token.fingerprint());
        prop_assert_eq!(again.kind(), token.kind());
        // Whitespace added back around it changes nothing either.
        let padded = [pad.as_bytes(), trimmed, pad.as_bytes()].concat();
        let padded = Token::parse(&padded).unwrap();
        prop_assert_eq!(padded.header_value().as_bytes(), token.header_value().as_bytes());
    }

    #[test]
    fn the_claims_decoder_never_panics_on_any_string(s in ".{0,300}") {
        let _ = claims::decode(&s);
    }

    #[test]
    fn the_claims_decoder_never_panics_on_dotted_base64(
        header in prop::collection::vec(any::<u8>(), 0..80),
        payload in prop_oneof![
            prop::collection::vec(any::<u8>(), 0..200),
            json_ish().prop_map(String::into_bytes),
        ],
        signature in prop::collection::vec(any::<u8>(), 0..80),
        padded in any::<bool>(),
        alg_header in any::<bool>(),
    ) {
        let b64 = |b: &[u8]| if padded { URL_SAFE.encode(b) } else { URL_SAFE_NO_PAD.encode(b) };
        let header = if alg_header { b64(br#"{"alg":"RS256"}"#) } else { b64(&header) };
        let jwt = format!("{header}.{}.{}", b64(&payload), b64(&signature));
        let claims = claims::decode(&jwt);
        if let Some(claims) = &claims {
            // The helpers over the dates never panic, whatever the dates.
            let _ = (claims.rotate_hint(), claims.rotation_point(), claims.overdue_at());
            let _ = format!("{claims:?}");
            for now in [std::time::UNIX_EPOCH, std::time::SystemTime::now()] {
                let _ = claims.freshness_at(now);
            }
        }
        // Through the parser too, as a whole token.
        let token = Token::parse(jwt.as_bytes()).unwrap();
        prop_assert_eq!(token.claims(), claims.as_ref());
        let _ = format!("{token:?} {token}");
    }
}

/// JSON objects with the claims the decoder reads, of every JSON type.
fn json_ish() -> impl Strategy<Value = String> {
    let value = prop_oneof![
        Just("null".to_owned()),
        any::<bool>().prop_map(|b| b.to_string()),
        any::<i64>().prop_map(|n| n.to_string()),
        any::<u64>().prop_map(|n| n.to_string()),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(|f| format!("{f:e}")),
        Just("1e400".to_owned()),
        Just("-1e400".to_owned()),
        "[a-z:]{0,12}".prop_map(|s| format!("\"{s}\"")),
        Just(r#"["a","b",1]"#.to_owned()),
        Just(r#"{"name":"x"}"#.to_owned()),
    ];
    let key = prop::sample::select(vec![
        "iss",
        "sub",
        "aud",
        "iat",
        "nbf",
        "exp",
        "kubernetes.io",
        "kubernetes.io/serviceaccount/namespace",
        "kubernetes.io/serviceaccount/service-account.name",
    ]);
    let nested = prop::collection::vec(
        (
            prop::sample::select(vec!["namespace", "serviceaccount", "pod", "warnafter"]),
            value.clone(),
        ),
        0..4,
    )
    .prop_map(|kv| {
        let body: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    });
    prop::collection::vec((key, prop_oneof![value, nested]), 0..8).prop_map(|kv| {
        let body: Vec<String> = kv.iter().map(|(k, v)| format!("\"{k}\":{v}")).collect();
        format!("{{{}}}", body.join(","))
    })
}
