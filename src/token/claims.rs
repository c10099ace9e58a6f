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
#[derive(Clone, Default, PartialEq, Eq)]
pub(crate) struct Claims {
    /// `sub`: whom the token is for (`system:serviceaccount:<namespace>:<name>` for a
    /// Kubernetes service account).
    pub(crate) sub: Option<String>,
    /// `iat`: when the token was issued.
    pub(crate) iat: Option<SystemTime>,
    /// `nbf`: the token is not valid before this time.
    pub(crate) nbf: Option<SystemTime>,
    /// `exp`: the token is not valid from this time on.
    pub(crate) exp: Option<SystemTime>,
    /// `kubernetes.io` `warnafter`: when the API server starts to count the token as
    /// stale.
    ///
    /// Set on tokens whose `exp` the API server extended (by default to a year) for clients
    /// that do not reload their token: the token's real lifetime ends here, and the kubelet
    /// rotates it on this schedule, not on `exp`'s.
    pub(crate) warnafter: Option<SystemTime>,
}

/// How a token stands against the dates in its claims, at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
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
    pub(crate) fn is_stale(self) -> bool {
        matches!(self, Freshness::Overdue | Freshness::Expired)
    }
}

impl Claims {
    /// The kubelet's rotation hint: `warnafter` when present, else `exp`.
    ///
    /// For a token whose `exp` the API server extended to a year, this is the token's real
    /// lifetime (`warnafter`), not the year.
    pub(crate) fn rotate_hint(&self) -> Option<SystemTime> {
        self.warnafter.or(self.exp)
    }

    /// How the token stands at `now`.
    pub(crate) fn freshness_at(&self, now: SystemTime) -> Freshness {
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
        match (self.warnafter, by_lifetime) {
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
        if let Some(warnafter) = c.warnafter {
            field(f, "warnafter", &Rfc3339(warnafter))?;
        }
        Ok(())
    }
}

impl fmt::Debug for Claims {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Claims")
            .field("sub", &self.sub)
            .field("iat", &self.iat.map(Rfc3339))
            .field("nbf", &self.nbf.map(Rfc3339))
            .field("exp", &self.exp.map(Rfc3339))
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
    /// The claims this crate uses: who the token is for, and its dates. The others
    /// (`iss`, `aud`, the `kubernetes.io` namespace, service account and pod) are left
    /// unread: nothing here acts on them.
    fn from_payload(p: &Map<String, Value>) -> Self {
        Claims {
            sub: string(p.get("sub")),
            iat: date(p.get("iat")),
            nbf: date(p.get("nbf")),
            exp: date(p.get("exp")),
            warnafter: match p.get("kubernetes.io") {
                Some(Value::Object(k)) => date(k.get("warnafter")),
                _ => None,
            },
        }
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
pub(crate) mod tests;
