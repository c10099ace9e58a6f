use super::*;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use std::sync::OnceLock;

pub(crate) fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

/// An RSA key made once per test run (kube-apiserver's usual service-account key).
fn rsa_key() -> &'static (EncodingKey, jsonwebtoken::DecodingKey) {
    static KEY: OnceLock<(EncodingKey, jsonwebtoken::DecodingKey)> = OnceLock::new();
    KEY.get_or_init(|| {
        use rsa::pkcs1::{EncodeRsaPrivateKey, EncodeRsaPublicKey};
        let private = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 2048).unwrap();
        let public = private.to_public_key();
        (
            EncodingKey::from_rsa_der(private.to_pkcs1_der().unwrap().as_bytes()),
            jsonwebtoken::DecodingKey::from_rsa_der(public.to_pkcs1_der().unwrap().as_bytes()),
        )
    })
}

/// A token signed with a fresh key: RS256 (RSA) or ES256 (P-256, the other key type
/// kube-apiserver accepts for signing service-account tokens).
pub(crate) fn sign(alg: Algorithm, claims: &Value) -> String {
    let mut header = Header::new(alg);
    header.kid = Some("k8s-sa-key-1".into());
    let key = match alg {
        Algorithm::RS256 => rsa_key().0.clone(),
        Algorithm::ES256 => {
            let pair = rcgen::KeyPair::generate().unwrap();
            EncodingKey::from_ec_der(&pair.serialize_der())
        }
        other => unimplemented!("{other:?}"),
    };
    jsonwebtoken::encode(&header, claims, &key).unwrap()
}

/// The payload kube-apiserver writes for a projected service-account token.
pub(crate) fn service_account_claims(iat: u64, exp: u64, warnafter: Option<u64>) -> Value {
    let mut k8s = json!({
        "namespace": "payments",
        "node": {"name": "node-a", "uid": "0d4b8f2e-2b1c-4c39-9a55-1c1f1b1b7c11"},
        "pod": {"name": "api-7d9c5", "uid": "9e1c7b2a-5d1f-4b55-8a1e-7f3b0c4e2d10"},
        "serviceaccount": {"name": "api", "uid": "3a2b1c0d-9e8f-4a6b-8c7d-6e5f4a3b2c1d"},
    });
    if let Some(w) = warnafter {
        k8s["warnafter"] = json!(w);
    }
    json!({
        "aud": ["https://kubernetes.default.svc.cluster.local"],
        "exp": exp,
        "iat": iat,
        "iss": "https://kubernetes.default.svc.cluster.local",
        "jti": "c1b7c6a4-2f0e-4c2a-9d7e-5b8e8f0a1d23",
        "kubernetes.io": k8s,
        "nbf": iat,
        "sub": "system:serviceaccount:payments:api",
    })
}

fn b64(bytes: &[u8]) -> String {
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

#[test]
fn decodes_a_projected_service_account_token() {
    let iat = 1_800_000_000;
    for alg in [Algorithm::RS256, Algorithm::ES256] {
        let jwt = sign(alg, &service_account_claims(iat, iat + 3607, None));
        let claims = decode(&jwt).unwrap_or_else(|| panic!("{alg:?}"));
        assert_eq!(
            claims.sub.as_deref(),
            Some("system:serviceaccount:payments:api")
        );
        assert_eq!(claims.iat, Some(at(iat)));
        assert_eq!(claims.nbf, Some(at(iat)));
        assert_eq!(claims.exp, Some(at(iat + 3607)));
        assert_eq!(claims.warnafter, None);
        assert_eq!(claims.rotate_hint(), Some(at(iat + 3607)));
        // The kubelet rotates at 80% of the TTL: 2885.6 s.
        assert_eq!(
            claims.rotation_point(),
            Some(at(iat + 2885) + Duration::from_millis(600))
        );
    }
}

#[test]
fn the_signed_test_tokens_are_real() {
    // The RS256 tokens the tests decode verify against the key's public half.
    let jwt = sign(Algorithm::RS256, &service_account_claims(1, 2, None));
    let mut validation = jsonwebtoken::Validation::new(Algorithm::RS256);
    validation.validate_exp = false;
    validation.validate_aud = false;
    jsonwebtoken::decode::<Value>(&jwt, &rsa_key().1, &validation).unwrap();
}

#[test]
fn decodes_the_legacy_extended_shape() {
    // exp extended to a year; the real lifetime is in warnafter.
    let iat = 1_800_000_000;
    let year = 365 * 24 * 3600;
    let jwt = sign(
        Algorithm::RS256,
        &service_account_claims(iat, iat + year, Some(iat + 3607)),
    );
    let claims = decode(&jwt).unwrap();
    assert_eq!(claims.exp, Some(at(iat + year)));
    assert_eq!(claims.warnafter, Some(at(iat + 3607)));
    assert_eq!(claims.rotate_hint(), Some(at(iat + 3607)));
    assert_eq!(
        claims.rotation_point(),
        Some(at(iat + 2885) + Duration::from_millis(600)),
        "scheduled from warnafter, not from the year-long exp"
    );
    // Overdue needs both: past warnafter and past 80% of iat..exp plus a minute.
    assert_eq!(claims.overdue_at(), Some(at(iat + year * 4 / 5 + 60)));
    assert_eq!(claims.freshness_at(at(iat + 3608)), Freshness::Fresh);
    assert_eq!(
        claims.freshness_at(at(iat + year * 4 / 5 + 60)),
        Freshness::Overdue
    );
    assert_eq!(claims.freshness_at(at(iat + year)), Freshness::Expired);
}

#[test]
fn decodes_a_legacy_secret_based_token() {
    let jwt = sign(
        Algorithm::RS256,
        &json!({
            "iss": "kubernetes/serviceaccount",
            "kubernetes.io/serviceaccount/namespace": "kube-system",
            "kubernetes.io/serviceaccount/secret.name": "builder-token-x7k2p",
            "kubernetes.io/serviceaccount/service-account.name": "builder",
            "kubernetes.io/serviceaccount/service-account.uid": "5e1f",
            "sub": "system:serviceaccount:kube-system:builder",
        }),
    );
    let claims = decode(&jwt).unwrap();
    assert_eq!(
        claims.sub.as_deref(),
        Some("system:serviceaccount:kube-system:builder")
    );
    assert_eq!((claims.exp, claims.rotation_point()), (None, None));
    assert_eq!(claims.freshness_at(at(0)), Freshness::Unknown);
}

#[test]
fn claim_shapes_are_read_leniently() {
    let payload = json!({
        "aud": "one",
        "exp": 1_800_000_000.75,
        "iat": -10,
        "nbf": "yesterday",
        "sub": 42,
    });
    let jwt = format!(
        "{}.{}.",
        b64(br#"{"alg":"none"}"#),
        b64(payload.to_string().as_bytes())
    );
    let claims = decode(&jwt).unwrap();
    assert_eq!(
        claims.exp,
        Some(at(1_800_000_000) + Duration::from_millis(750))
    );
    assert_eq!(claims.iat, Some(UNIX_EPOCH - Duration::from_secs(10)));
    assert_eq!(
        (claims.nbf, claims.sub, claims.warnafter),
        (None, None, None)
    );
    // Dates past what `SystemTime` holds are absent, not a panic.
    let huge = json!({"exp": 1e300, "iat": u64::MAX});
    let jwt = format!(
        "{}.{}.",
        b64(br#"{"alg":"none"}"#),
        b64(huge.to_string().as_bytes())
    );
    let claims = decode(&jwt).unwrap();
    assert_eq!((claims.exp, claims.iat), (None, None));
}

#[test]
fn without_an_issue_date_warnafter_alone_says_when_a_token_is_overdue() {
    // No `iat` nor `nbf`: no lifetime to take 80% of, but `warnafter` still counts.
    let payload = br#"{"exp":5000,"kubernetes.io":{"warnafter":3000}}"#;
    let jwt = format!("{}.{}.", b64(br#"{"alg":"none"}"#), b64(payload));
    let claims = decode(&jwt).unwrap();
    assert_eq!(claims.rotation_point(), None);
    assert_eq!(claims.overdue_at(), Some(at(3000)));
    assert_eq!(claims.freshness_at(at(2999)), Freshness::Fresh);
    assert_eq!(claims.freshness_at(at(3000)), Freshness::Overdue);
}

#[test]
fn padding_is_tolerated() {
    let header = base64::engine::general_purpose::URL_SAFE.encode(br#"{"alg":"none"}"#);
    let payload = base64::engine::general_purpose::URL_SAFE.encode(br#"{"sub":"abc"}"#);
    assert!(header.ends_with('=') && payload.ends_with('='));
    let claims = decode(&format!("{header}.{payload}.c2ln")).unwrap();
    assert_eq!(claims.sub.as_deref(), Some("abc"));
}

#[test]
fn malformed_jwts_are_not_jwts() {
    let good_header = b64(br#"{"alg":"RS256"}"#);
    let good_payload = b64(br#"{"sub":"x"}"#);
    let sig = b64(&[7; 32]);
    let cases = [
        ("missing parts", format!("{good_header}.{good_payload}")),
        ("one part", good_header.clone()),
        (
            "four parts",
            format!("{good_header}.{good_payload}.{sig}.{sig}"),
        ),
        ("empty header", format!(".{good_payload}.{sig}")),
        ("empty payload", format!("{good_header}..{sig}")),
        ("bad base64 payload", format!("{good_header}.e!yJ.{sig}")),
        (
            "standard alphabet",
            format!("{good_header}.{good_payload}+/.{sig}"),
        ),
        (
            "bad base64 signature",
            format!("{good_header}.{good_payload}.a*b"),
        ),
        (
            "bad base64 length",
            format!("{good_header}.{good_payload}.abcde"),
        ),
        (
            "non-JSON payload",
            format!("{good_header}.{}.{sig}", b64(b"not json")),
        ),
        (
            "payload not an object",
            format!("{good_header}.{}.{sig}", b64(b"[1,2]")),
        ),
        (
            "non-JSON header",
            format!("{}.{good_payload}.{sig}", b64(b"{alg")),
        ),
        (
            "header without alg",
            format!("{}.{good_payload}.{sig}", b64(b"{}")),
        ),
        (
            "alg not a string",
            format!("{}.{good_payload}.{sig}", b64(br#"{"alg":1}"#)),
        ),
        (
            "invalid UTF-8",
            format!("{good_header}.{}.{sig}", b64(b"{\"sub\":\"\xff\"}")),
        ),
    ];
    for (name, token) in cases {
        assert!(decode(&token).is_none(), "{name}: {token}");
    }
    assert!(decode(&format!("{good_header}.{good_payload}.{sig}")).is_some());
}

#[test]
fn debug_shows_the_claims_it_reads_with_dates() {
    let iat = 1_800_000_000;
    let jwt = sign(
        Algorithm::ES256,
        &service_account_claims(iat, iat + 3607, Some(iat + 3000)),
    );
    let claims = decode(&jwt).unwrap();
    let shown = format!("{claims:?}");
    assert!(
        shown.ends_with(
            r#"exp: Some(2027-01-15T09:00:07Z), warnafter: Some(2027-01-15T08:50:00Z) }"#
        ),
        "{shown}"
    );
}
