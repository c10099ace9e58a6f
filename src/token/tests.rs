use super::*;

/// Test-only views of a token.
impl Token {
    /// What the token is: a JWT with its claims, a bootstrap token with its id, or opaque.
    pub(crate) fn kind(&self) -> &TokenKind {
        &self.kind
    }

    /// The same token with the dates its source gave.
    pub(crate) fn with_source_dates(
        mut self,
        loaded_at: std::time::SystemTime,
        expires_at: Option<std::time::SystemTime>,
        refresh_at: Option<std::time::SystemTime>,
    ) -> Self {
        self.stamp.loaded_at = loaded_at;
        self.stamp.source_expiry = expires_at;
        self.stamp.refresh_at = refresh_at;
        self
    }
}

fn secret(t: &Token) -> &[u8] {
    &t.header_value().as_bytes()[PREFIX.len()..]
}

#[test]
fn trims_ascii_whitespace_on_both_ends() {
    for input in [&b"tok"[..], b"tok\n", b"  tok\r\n", b"\ttok \n\n"] {
        let t = Token::parse(input).unwrap();
        assert_eq!(secret(&t), b"tok", "input {input:?}");
    }
}

#[test]
fn empty_and_whitespace_only_are_rejected() {
    for input in [&b""[..], b"\n", b"  \t\r\n "] {
        assert_eq!(Token::parse(input).unwrap_err(), TokenError::Empty);
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
            Token::parse(input).unwrap_err(),
            TokenError::InvalidByte { offset },
            "input {input:?}"
        );
    }
}

#[test]
fn a_byte_order_mark_is_refused_and_named() {
    for input in [
        &b"\xEF\xBB\xBFabc"[..],
        b"\xEF\xBB\xBFabc\r\n",
        b"\xEF\xBB\xBF",
    ] {
        let err = Token::parse(input).unwrap_err();
        assert_eq!(err, TokenError::ByteOrderMark, "input {input:?}");
        assert!(err.to_string().contains("byte-order mark"), "{err}");
    }
    // Only at the start: the same bytes inside a token are bad bytes, with their offset.
    assert_eq!(
        Token::parse(b"ab\xEF\xBB\xBF").unwrap_err(),
        TokenError::InvalidByte { offset: 2 }
    );
}

#[test]
fn cap_is_inclusive() {
    assert!(Token::parse_capped(&[b'a'; 16], 16).is_ok());
    assert_eq!(
        Token::parse_capped(&[b'a'; 17], 16).unwrap_err(),
        TokenError::TooLarge { max: 16 }
    );
}

#[test]
fn header_is_sensitive_and_round_trips() {
    let t = Token::parse(b"eyJ.abc-_~+/=").unwrap();
    assert!(t.header_value().is_sensitive());
    assert_eq!(t.header_value().to_str().unwrap(), "Bearer eyJ.abc-_~+/=");
}

#[test]
fn debug_and_display_show_only_the_fingerprint() {
    let t = Token::parse(b"s3cr3t-token-value").unwrap();
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
    let a = Token::parse_capped(b"abc\n", 100).unwrap();
    let b = Token::parse_capped(b" abc", 100).unwrap();
    let c = Token::parse_capped(b"abd", 100).unwrap();
    assert!(a.same(&b));
    assert!(!a.same(&c));
    assert_ne!(a.fingerprint(), c.fingerprint());
}

mod kinds {
    use super::super::*;
    use crate::token::claims::tests::{at, service_account_claims, sign};
    use base64::Engine as _;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use jsonwebtoken::Algorithm;
    use proptest::prelude::*;
    use std::time::{Duration, UNIX_EPOCH};

    fn parse(t: &str) -> Token {
        Token::parse(t.as_bytes()).unwrap()
    }

    /// Everything a token shows of itself: Debug (both forms), Display, its kind.
    fn shown(t: &Token) -> String {
        format!("{t:?}\n{t:#?}\n{t}\n{:?}\n{:#?}", t.kind(), t.kind())
    }

    #[test]
    fn a_service_account_jwt_shows_sub_exp_and_warnafter_only() {
        let iat = 1_800_000_000;
        let jwt = sign(
            Algorithm::RS256,
            &service_account_claims(iat, iat + 365 * 86_400, Some(iat + 3607)),
        );
        let t = parse(&format!("{jwt}\n"));
        let TokenKind::Jwt(claims) = t.kind() else {
            panic!("{t:?}")
        };
        assert_eq!(claims.iat, Some(at(iat)));
        assert_eq!(t.subject(), Some("system:serviceaccount:payments:api"));
        assert_eq!(t.expires_at(), Some(at(iat + 365 * 86_400)));
        assert_eq!(t.refresh_at(), Some(at(iat + 3607)));
        let fp = t.fingerprint();
        assert_eq!(
            t.to_string(),
            format!(
                "jwt token {fp} (sub system:serviceaccount:payments:api, \
                 exp 2028-01-15T08:00:00Z, warnafter 2027-01-15T09:00:07Z)"
            )
        );
        assert_eq!(
            format!("{t:?}"),
            format!(
                "Token {{ kind: jwt, fingerprint: {fp}, generation: 0, \
                 sub: \"system:serviceaccount:payments:api\", \
                 exp: 2028-01-15T08:00:00Z, warnafter: 2027-01-15T09:00:07Z, .. }}"
            )
        );
        let signature = jwt.rsplit('.').next().unwrap();
        assert!(signature.len() > 300, "RS256 with a 2048-bit key");
        let out = shown(&t);
        assert!(!out.contains(signature) && !out.contains(&jwt), "{out}");
    }

    #[test]
    fn bootstrap_tokens_show_their_id_and_never_their_secret() {
        let t = parse("  07401b.f395accd246ae52d\n");
        assert_eq!(
            t.kind(),
            &TokenKind::Bootstrap {
                user: "system:bootstrap:07401b".into()
            }
        );
        assert_eq!(t.subject(), Some("system:bootstrap:07401b"));
        assert_eq!(t.expires_at(), None);
        assert_eq!(
            t.freshness_at(std::time::SystemTime::now()),
            Freshness::Unknown
        );
        let fp = t.fingerprint();
        assert_eq!(t.to_string(), format!("bootstrap token {fp} (id 07401b)"));
        let out = shown(&t);
        assert!(out.contains("07401b"), "{out}");
        assert!(!out.contains("f395accd246ae52d"), "{out}");
    }

    #[test]
    fn wrong_bootstrap_shapes_are_opaque() {
        for t in [
            "07401B.f395accd246ae52d",  // upper case id
            "07401b.f395accd246aE52d",  // upper case secret
            "07401.f395accd246ae52d",   // id too short
            "07401bb.f395accd246ae52d", // id too long
            "07401b.f395accd246ae52",   // secret too short
            "07401b.f395accd246ae52dd", // secret too long
            "07401b-f395accd246ae52d",  // no dot
            "07401b.f395accd.246ae52d", // two dots
            "07401b.f395accd246ae52d.", // trailing dot
            "07401_.f395accd246ae52d",  // not [a-z0-9]
            "07401b..f395accd246ae52d", // empty part
        ] {
            let token = parse(t);
            assert_eq!(token.kind(), &TokenKind::Opaque, "{t}");
            assert_eq!(token.subject(), None, "{t}");
            assert_eq!(
                token.to_string(),
                format!("opaque token {}", token.fingerprint())
            );
            assert!(!shown(&token).contains(t));
        }
    }

    #[test]
    fn malformed_jwts_are_valid_opaque_tokens() {
        for t in [
            "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJ4In0",  // two parts
            "eyJhbGciOiJSUzI1NiJ9.e!yJ.c2ln",        // bad base64
            "eyJhbGciOiJSUzI1NiJ9.bm90IGpzb24.c2ln", // payload "not json"
            "bm90IGpzb24.eyJzdWIiOiJ4In0.c2ln",      // header "not json"
        ] {
            let token = parse(t);
            assert_eq!(token.kind(), &TokenKind::Opaque, "{t}");
            assert_eq!(token.header_value(), &format!("Bearer {t}")[..]);
        }
    }

    fn b64(bytes: &[u8]) -> String {
        URL_SAFE_NO_PAD.encode(bytes)
    }

    /// A token, and the parts of it that must never be shown.
    #[derive(Debug, Clone)]
    struct Case {
        token: String,
        secrets: Vec<String>,
        kind: &'static str,
    }

    fn opaque() -> impl Strategy<Value = Case> {
        "[!-~]{16,200}".prop_map(|token| Case {
            secrets: vec![token.clone()],
            token,
            kind: "any",
        })
    }

    fn bootstrap() -> impl Strategy<Value = Case> {
        ("[a-z0-9]{6}", "[a-z0-9]{16}").prop_map(|(id, secret)| Case {
            token: format!("{id}.{secret}"),
            secrets: vec![format!("{id}.{secret}"), secret],
            kind: "bootstrap",
        })
    }

    fn jwt() -> impl Strategy<Value = Case> {
        (
            "[A-Za-z0-9:._-]{1,40}",
            0u64..4_000_000_000,
            1u64..400_000_000,
            proptest::option::of(1u64..100_000),
            proptest::collection::vec(any::<u8>(), 32..300),
        )
            .prop_map(|(sub, iat, ttl, warn, signature)| {
                let mut k8s = serde_json::json!({"namespace": "ns"});
                if let Some(w) = warn {
                    k8s["warnafter"] = (iat + w).into();
                }
                let payload = serde_json::json!({
                    "sub": sub, "iat": iat, "exp": iat + ttl, "kubernetes.io": k8s,
                });
                let signature = b64(&signature);
                let token = format!(
                    "{}.{}.{signature}",
                    b64(br#"{"alg":"RS256","kid":"k"}"#),
                    b64(payload.to_string().as_bytes())
                );
                Case {
                    secrets: vec![token.clone(), signature],
                    token,
                    kind: "jwt",
                }
            })
    }

    #[test]
    fn nothing_shown_ever_contains_a_secret() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let strategy = prop_oneof![opaque(), bootstrap(), jwt()];
        proptest!(ProptestConfig::with_cases(256), |(case in strategy, pad in "[ \t\r\n]{0,3}")| {
            let input = format!("{pad}{}{pad}", case.token);
            let token = Token::parse(input.as_bytes()).unwrap();
            if case.kind != "any" {
                prop_assert_eq!(token.kind().name(), case.kind);
            }
            let status = rt.block_on(async {
                let bytes = input.clone().into_bytes();
                let store = crate::test_support::loader("prop", move || {
                    let bytes = bytes.clone();
                    async move { Ok::<_, std::io::Error>(bytes) }
                })
                .no_periodic_refresh()
                .load()
                .await
                .unwrap();
                format!("{store:?}\n{:?}\n{:#?}", store.status(), store.status())
            });
            let out = format!("{}\n{status}", shown(&token));
            prop_assert!(out.contains(&token.fingerprint().to_string()));
            for secret in &case.secrets {
                prop_assert!(!out.contains(secret.as_str()), "{} in {}", secret, out);
            }
            if let TokenKind::Bootstrap { user } = token.kind() {
                let needle = ["id ", bootstrap_id_of(user)].concat();
                prop_assert!(out.contains(&needle));
            }
        });
    }

    #[test]
    fn dates_far_from_now_are_shown_without_panicking() {
        let t = parse(&format!(
            "{}.{}.",
            b64(br#"{"alg":"none"}"#),
            b64(br#"{"exp":253402300800,"iat":-62135596800}"#)
        ));
        assert_eq!(
            t.expires_at(),
            Some(UNIX_EPOCH + Duration::from_secs(253_402_300_800))
        );
        // Past the year 9999, which RFC 3339 cannot write: seconds since the epoch.
        let shown = t.to_string();
        assert!(
            shown.contains("exp 253402300800s since 1970-01-01T00:00:00Z"),
            "{shown}"
        );
        let claims = format!("{:?}", t.claims().unwrap());
        assert!(
            claims.contains("iat: Some(0001-01-01T00:00:00Z)"),
            "{claims}"
        );
    }
}

#[test]
fn a_sources_expiry_and_the_claims_say_how_a_token_stands_together() {
    use std::time::{Duration, UNIX_EPOCH};
    let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
    // {"alg":"none"} . {"iat":1000,"exp":4600} .
    let jwt = Token::parse(b"eyJhbGciOiJub25lIn0.eyJpYXQiOjEwMDAsImV4cCI6NDYwMH0.").unwrap();
    // A source's later expiry leaves the claims' word on an overdue token.
    let dated = jwt
        .clone()
        .with_source_dates(at(1000), Some(at(5000)), None);
    assert_eq!(dated.freshness_at(at(3950)), Freshness::Overdue);
    assert_eq!(dated.freshness_at(at(2000)), Freshness::Fresh);
    // An opaque token is fresh until its source's expiry, then expired.
    let opaque = Token::parse(b"opaque").unwrap();
    assert_eq!(opaque.freshness_at(at(10)), Freshness::Unknown);
    let dated = opaque.with_source_dates(at(0), Some(at(100)), None);
    assert_eq!(dated.freshness_at(at(10)), Freshness::Fresh);
    assert_eq!(dated.freshness_at(at(100)), Freshness::Expired);
    assert_ne!(dated.freshness_at(at(99)), Freshness::Expired);
}

/// Properties over arbitrary input.
mod prop;
