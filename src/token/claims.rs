//! The claims of a JWT, read without verifying its signature.
//!
//! The server verifies the token; the claims, none of them secret, only say what the token
//! is, when it goes bad, and when the kubelet is due to rotate it. A claim of the wrong
//! type is treated as absent, so one odd claim does not hide the others.

use std::fmt;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::alphabet::URL_SAFE;
use base64::engine::{DecodePaddingMode, GeneralPurpose, GeneralPurposeConfig};
use serde_json::{Map, Value};

use crate::clock::{Rfc3339, four_fifths};

/// base64url, with or without padding.
const BASE64URL: GeneralPurpose = GeneralPurpose::new(
    &URL_SAFE,
    GeneralPurposeConfig::new()
        .with_decode_padding_mode(DecodePaddingMode::Indifferent)
        .with_decode_allow_trailing_bits(true),
);

/// How long after its rotation point a token counts as overdue: the kubelet's jitter and
/// a sync period's worth of slack.
const OVERDUE_GRACE: Duration = Duration::from_secs(60);

/// The claims of a JWT that say who it is for and when it is valid.
#[derive(Clone, PartialEq, Eq)]
pub(crate) struct Claims {
    /// `sub`: whom the token is for.
    pub(crate) sub: Option<String>,
    /// `iat`: when the token was issued.
    pub(crate) iat: Option<SystemTime>,
    /// `nbf`: the token is not valid before this time.
    pub(crate) nbf: Option<SystemTime>,
    /// `exp`: the token is not valid from this time on.
    pub(crate) exp: Option<SystemTime>,
    /// `kubernetes.io` `warnafter`: set on tokens whose `exp` the API server extended (to
    /// a year) for clients that do not reload them: their real lifetime ends here.
    pub(crate) warnafter: Option<SystemTime>,
}

/// How a token stands against the dates in its claims, at some time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Freshness {
    /// The token carries no expiry (an opaque or bootstrap token, a JWT without `exp`).
    Unknown,
    /// Within its lifetime, and not overdue.
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
    pub(crate) fn rotate_hint(&self) -> Option<SystemTime> {
        self.warnafter.or(self.exp)
    }

    pub(crate) fn freshness_at(&self, now: SystemTime) -> Freshness {
        match self.exp {
            None => Freshness::Unknown,
            Some(exp) if now >= exp => Freshness::Expired,
            _ if self.overdue_at().is_some_and(|at| now >= at) => Freshness::Overdue,
            _ => Freshness::Fresh,
        }
    }

    /// When the token was issued: `iat`, else `nbf`.
    fn issued(&self) -> Option<SystemTime> {
        self.iat.or(self.nbf)
    }

    /// Where the kubelet rotates the token: 80% of the way from `iat` to `warnafter`, or
    /// to `exp` when there is no `warnafter` (before its jitter of up to 10 s).
    pub(crate) fn rotation_point(&self) -> Option<SystemTime> {
        four_fifths(self.issued()?, self.rotate_hint()?)
    }

    /// From when the token is overdue: see [`Freshness::Overdue`].
    pub(crate) fn overdue_at(&self) -> Option<SystemTime> {
        let by_lifetime = (self.issued().zip(self.exp))
            .and_then(|(iat, exp)| four_fifths(iat, exp)?.checked_add(OVERDUE_GRACE));
        // `None` orders first: the later of the two, or whichever is known.
        self.warnafter.max(by_lifetime)
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

/// The claims of `token` if it is a JWT: three dot-separated base64url parts, the first a
/// JSON object with an `alg`, the second a JSON object.
pub(crate) fn decode(token: &str) -> Option<Claims> {
    let [header, payload, signature] =
        <[&str; 3]>::try_from(token.split('.').collect::<Vec<_>>()).ok()?;
    // The signature is not verified, but it must at least be base64url.
    BASE64URL.decode(signature).ok()?;
    json_object(header)?.get("alg")?.as_str()?;
    // Only who the token is for and its dates: nothing here acts on the others.
    let p = json_object(payload)?;
    Some(Claims {
        sub: p.get("sub").and_then(Value::as_str).map(str::to_owned),
        iat: date(p.get("iat")),
        nbf: date(p.get("nbf")),
        exp: date(p.get("exp")),
        warnafter: date(p.get("kubernetes.io").and_then(|k| k.get("warnafter"))),
    })
}

/// A base64url part that decodes to a JSON object.
fn json_object(part: &str) -> Option<Map<String, Value>> {
    serde_json::from_slice(&BASE64URL.decode(part).ok()?).ok()
}

/// A JWT numeric date: seconds since the epoch, possibly fractional or negative.
fn date(v: Option<&Value>) -> Option<SystemTime> {
    let secs = v?.as_f64()?;
    let magnitude = Duration::try_from_secs_f64(secs.abs()).ok()?;
    if secs >= 0.0 {
        UNIX_EPOCH.checked_add(magnitude)
    } else {
        UNIX_EPOCH.checked_sub(magnitude)
    }
}

#[cfg(test)]
pub(crate) mod tests;
