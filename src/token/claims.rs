//! The claims of a JWT, read without verifying its signature.
//!
//! This crate is a client: the server verifies the token. The claims are read only to say
//! in logs and [`Status`](crate::Status) what the token is (`sub`) and when it goes bad
//! (`exp`, and the `kubernetes.io` `warnafter` hint), and to re-read the file when the
//! kubelet is due to rotate it. None of them is secret: anyone holding the token can read
//! them. The secret part of a JWT is its signature, which is never kept apart from the
//! header value.
//!
//! A token is a JWT when it has three dot-separated base64url parts (unpadded, padding
//! tolerated), the first a JSON object with an `alg`, the second a JSON object. A claim of
//! the wrong type is treated as absent, so one odd claim does not hide the others.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

use crate::clock::{Rfc3339, fraction_of};

/// base64url, with or without padding.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// How long after the point at which a token should have been rotated it counts as
/// overdue: the kubelet's jitter (10 s) and a sync period's worth of slack.
const OVERDUE_GRACE: Duration = Duration::from_secs(60);

/// The claims of a JWT that say who it is for and when it is valid.
///
/// Read from the token's payload without verifying its signature. Dates are the JWT's
/// numeric dates (seconds since the Unix epoch) as [`SystemTime`].
///
/// ```
/// use bearer_reload::token::{DEFAULT_MAX_SIZE, Token, TokenKind};
///
/// // {"alg":"none"} . {"sub":"system:serviceaccount:default:app","exp":1800000000} .
/// let jwt = "eyJhbGciOiJub25lIn0\
///     .eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQ6ZGVmYXVsdDphcHAiLCJleHAiOjE4MDAwMDAwMDB9.";
/// let token = Token::parse(jwt.as_bytes(), DEFAULT_MAX_SIZE).unwrap();
/// let TokenKind::Jwt(claims) = token.kind() else { panic!("not a JWT") };
/// assert_eq!(claims.sub.as_deref(), Some("system:serviceaccount:default:app"));
/// assert_eq!(
///     claims.exp,
///     Some(std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_800_000_000))
/// );
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claims {
    /// `iss`: who issued the token.
    pub iss: Option<String>,
    /// `sub`: whom the token is for (`system:serviceaccount:<namespace>:<name>` for a
    /// Kubernetes service account).
    pub sub: Option<String>,
    /// `aud`: the audiences the token is for (one string or an array in the JWT).
    pub aud: Vec<String>,
    /// `iat`: when the token was issued.
    pub iat: Option<SystemTime>,
    /// `nbf`: the token is not valid before this time.
    pub nbf: Option<SystemTime>,
    /// `exp`: the token is not valid from this time on.
    pub exp: Option<SystemTime>,
    /// The `kubernetes.io` claims of a service-account token, if present.
    pub kubernetes: Option<KubernetesClaims>,
}

/// The Kubernetes-specific claims of a service-account token.
///
/// Taken from the `kubernetes.io` object of a bound (projected) token, or from the flat
/// `kubernetes.io/serviceaccount/...` claims of a legacy secret-based token.
#[derive(Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct KubernetesClaims {
    /// The namespace of the service account.
    pub namespace: Option<String>,
    /// The name of the service account.
    pub service_account: Option<String>,
    /// The name of the pod the token is bound to.
    pub pod: Option<String>,
    /// `warnafter`: when the API server starts to count the token as stale.
    ///
    /// Set on tokens whose `exp` the API server extended (by default to a year) for clients
    /// that do not reload their token: the token's real lifetime ends here, and the kubelet
    /// rotates it on this schedule, not on `exp`'s.
    pub warnafter: Option<SystemTime>,
}

/// How a token stands against the dates in its claims, at some time.
///
/// ```
/// use std::time::{Duration, UNIX_EPOCH};
/// use bearer_reload::token::{DEFAULT_MAX_SIZE, Freshness, Token};
///
/// // {"alg":"none"} . {"iat":1000,"exp":4600} .
/// let token = Token::parse(b"eyJhbGciOiJub25lIn0.eyJpYXQiOjEwMDAsImV4cCI6NDYwMH0.", DEFAULT_MAX_SIZE)
///     .unwrap();
/// let at = |secs| UNIX_EPOCH + Duration::from_secs(secs);
/// assert_eq!(token.freshness_at(at(2000)), Freshness::Fresh);
/// // 80% of iat..exp (3880), plus a minute: the writer should have replaced it by now.
/// assert_eq!(token.freshness_at(at(3950)), Freshness::Overdue);
/// assert_eq!(token.freshness_at(at(4600)), Freshness::Expired);
/// assert!(token.freshness_at(at(4600)).is_stale());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Freshness {
    /// The token carries no expiry (an opaque or bootstrap token, a JWT without `exp`).
    Unknown,
    /// Within its lifetime, and not past the point at which it should have been replaced.
    Fresh,
    /// Past `warnafter` (if any) and past 80% of its lifetime plus a minute: the process
    /// that writes the file should have replaced it by now (a `subPath` mount, a stopped
    /// kubelet or writer). Still accepted until `exp`.
    Overdue,
    /// Past `exp`: the server will refuse it.
    Expired,
}

impl Freshness {
    /// Whether the token is overdue for replacement or expired.
    pub fn is_stale(self) -> bool {
        matches!(self, Freshness::Overdue | Freshness::Expired)
    }
}

impl Claims {
    /// The kubelet's rotation hint: `warnafter` when present, else `exp`.
    ///
    /// For a token whose `exp` the API server extended to a year, this is the token's real
    /// lifetime (`warnafter`), not the year.
    pub fn rotate_hint(&self) -> Option<SystemTime> {
        self.warnafter().or(self.exp)
    }

    /// The `kubernetes.io` `warnafter` claim.
    pub fn warnafter(&self) -> Option<SystemTime> {
        self.kubernetes.as_ref().and_then(|k| k.warnafter)
    }

    /// How the token stands at `now`.
    pub fn freshness_at(&self, now: SystemTime) -> Freshness {
        let Some(exp) = self.exp else {
            return Freshness::Unknown;
        };
        if now >= exp {
            Freshness::Expired
        } else if self.overdue_at().is_some_and(|at| now >= at) {
            Freshness::Overdue
        } else {
            Freshness::Fresh
        }
    }

    /// When the token was issued: `iat`, else `nbf`.
    fn issued(&self) -> Option<SystemTime> {
        self.iat.or(self.nbf)
    }

    /// Where the kubelet rotates the token: 80% of the way from `iat` to `warnafter`, or
    /// to `exp` when there is no `warnafter` (before its jitter of up to 10 s).
    pub(crate) fn rotation_point(&self) -> Option<SystemTime> {
        fraction_of(self.issued()?, self.rotate_hint()?, 4, 5)
    }

    /// From when the token is overdue: past `warnafter` (if any) and past 80% of
    /// `iat..exp` plus a minute (if both are known); `None` when neither is known.
    pub(crate) fn overdue_at(&self) -> Option<SystemTime> {
        let by_lifetime = self
            .issued()
            .zip(self.exp)
            .and_then(|(iat, exp)| fraction_of(iat, exp, 4, 5))
            .and_then(|at| at.checked_add(OVERDUE_GRACE));
        match (self.warnafter(), by_lifetime) {
            (Some(a), Some(b)) => Some(a.max(b)),
            (a, b) => a.or(b),
        }
    }

    /// A one-line summary of the claims that say what the token is and when it goes bad.
    pub(crate) fn summary(&self) -> impl fmt::Display + '_ {
        Summary(self)
    }
}

struct Summary<'a>(&'a Claims);

impl fmt::Display for Summary<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let c = self.0;
        let mut sep = "";
        let mut field = |f: &mut fmt::Formatter<'_>, name: &str, v: &dyn fmt::Display| {
            let r = write!(f, "{sep}{name} {v}");
            sep = ", ";
            r
        };
        if let Some(sub) = &c.sub {
            field(f, "sub", sub)?;
        }
        if let Some(exp) = c.exp {
            field(f, "exp", &Rfc3339(exp))?;
        }
        if let Some(warnafter) = c.warnafter() {
            field(f, "warnafter", &Rfc3339(warnafter))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claims")
            .field("iss", &self.iss)
            .field("sub", &self.sub)
            .field("aud", &self.aud)
            .field("iat", &self.iat.map(Rfc3339))
            .field("nbf", &self.nbf.map(Rfc3339))
            .field("exp", &self.exp.map(Rfc3339))
            .field("kubernetes", &self.kubernetes)
            .finish()
    }
}

impl fmt::Debug for KubernetesClaims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KubernetesClaims")
            .field("namespace", &self.namespace)
            .field("service_account", &self.service_account)
            .field("pod", &self.pod)
            .field("warnafter", &self.warnafter.map(Rfc3339))
            .finish()
    }
}

/// The claims of `token` if it is a JWT (see the module docs), else `None`.
pub(crate) fn decode(token: &str) -> Option<Claims> {
    let mut parts = token.split('.');
    let (header, payload, signature) = (parts.next()?, parts.next()?, parts.next()?);
    if parts.next().is_some() || header.is_empty() || payload.is_empty() {
        return None;
    }
    // The signature is not verified, but it must at least be base64url.
    BASE64URL.decode(signature).ok()?;
    let header = json_object(header)?;
    if !header.get("alg").is_some_and(Value::is_string) {
        return None;
    }
    Some(Claims::from_payload(&json_object(payload)?))
}

fn json_object(part: &str) -> Option<Map<String, Value>> {
    let bytes = BASE64URL.decode(part).ok()?;
    match serde_json::from_slice(&bytes).ok()? {
        Value::Object(map) => Some(map),
        _ => None,
    }
}

impl Claims {
    fn from_payload(p: &Map<String, Value>) -> Self {
        let aud = match p.get("aud") {
            Some(Value::String(s)) => vec![s.clone()],
            Some(Value::Array(a)) => a
                .iter()
                .filter_map(|v| v.as_str().map(str::to_owned))
                .collect(),
            _ => Vec::new(),
        };
        Claims {
            iss: string(p.get("iss")),
            sub: string(p.get("sub")),
            aud,
            iat: date(p.get("iat")),
            nbf: date(p.get("nbf")),
            exp: date(p.get("exp")),
            kubernetes: KubernetesClaims::from_payload(p),
        }
    }
}

impl KubernetesClaims {
    fn from_payload(p: &Map<String, Value>) -> Option<Self> {
        let claims = if let Some(Value::Object(k)) = p.get("kubernetes.io") {
            let name = |key: &str| string(k.get(key).and_then(|v| v.get("name")));
            KubernetesClaims {
                namespace: string(k.get("namespace")),
                service_account: name("serviceaccount"),
                pod: name("pod"),
                warnafter: date(k.get("warnafter")),
            }
        } else {
            // A legacy token from a service-account secret: flat claims, no expiry.
            let legacy = |key: &str| string(p.get(&format!("kubernetes.io/serviceaccount/{key}")));
            KubernetesClaims {
                namespace: legacy("namespace"),
                service_account: legacy("service-account.name"),
                ..KubernetesClaims::default()
            }
        };
        (claims != KubernetesClaims::default()).then_some(claims)
    }
}

fn string(v: Option<&Value>) -> Option<String> {
    v?.as_str().map(str::to_owned)
}

/// A JWT numeric date: seconds since the epoch, possibly fractional or negative.
fn date(v: Option<&Value>) -> Option<SystemTime> {
    let n = v?.as_number()?;
    if let Some(secs) = n.as_u64() {
        return UNIX_EPOCH.checked_add(Duration::from_secs(secs));
    }
    let secs = n.as_f64()?;
    let magnitude = Duration::try_from_secs_f64(secs.abs()).ok()?;
    if secs >= 0.0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    }
}

#[cfg(test)]
pub(crate) mod tests {
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
                claims.iss.as_deref(),
                Some("https://kubernetes.default.svc.cluster.local")
            );
            assert_eq!(
                claims.sub.as_deref(),
                Some("system:serviceaccount:payments:api")
            );
            assert_eq!(claims.aud, ["https://kubernetes.default.svc.cluster.local"]);
            assert_eq!(claims.iat, Some(at(iat)));
            assert_eq!(claims.nbf, Some(at(iat)));
            assert_eq!(claims.exp, Some(at(iat + 3607)));
            let k = claims.kubernetes.as_ref().unwrap();
            assert_eq!(k.namespace.as_deref(), Some("payments"));
            assert_eq!(k.service_account.as_deref(), Some("api"));
            assert_eq!(k.pod.as_deref(), Some("api-7d9c5"));
            assert_eq!(k.warnafter, None);
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
        assert_eq!(claims.warnafter(), Some(at(iat + 3607)));
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
        let k = claims.kubernetes.as_ref().unwrap();
        assert_eq!(k.namespace.as_deref(), Some("kube-system"));
        assert_eq!(k.service_account.as_deref(), Some("builder"));
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
        assert_eq!(claims.aud, ["one"]);
        assert_eq!(
            claims.exp,
            Some(at(1_800_000_000) + Duration::from_millis(750))
        );
        assert_eq!(claims.iat, Some(UNIX_EPOCH - Duration::from_secs(10)));
        assert_eq!(
            (claims.nbf, claims.sub, claims.kubernetes),
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
}
