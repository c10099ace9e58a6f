//! Warnings about a token that the source should have replaced by now.
//!
//! Checked after each read of the source (never on the request path), so that "the file
//! has not changed" is something the store has just seen, not a guess: the token in use is
//! then the newest the source holds. Each warning is logged once per token (generation).

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use tracing::field::display;

use super::credential::Credential;
use crate::clock::Rfc3339;
use crate::token::Freshness;

/// The generations already warned about, one counter per warning, and the generation of
/// a token found stale (overdue or expired) by a read that found nothing newer: a stalled
/// rotator.
#[derive(Debug, Default)]
pub(crate) struct ExpiryWarnings {
    expired: AtomicU64,
    overdue: AtomicU64,
    stalled: AtomicU64,
}

impl ExpiryWarnings {
    /// Warns, once per token, when `token`, just confirmed as the newest the source holds,
    /// has expired or is overdue for rotation at `now`.
    pub(crate) fn check<C: Credential>(
        &self,
        token: &C,
        now: SystemTime,
        source: &dyn fmt::Display,
    ) {
        let generation = token.generation();
        // `fetch_max`: a check of an older token that finishes late cannot re-arm a warning.
        let first = |seen: &AtomicU64| seen.fetch_max(generation, Ordering::AcqRel) < generation;
        let exp = token.expires_at().map(|t| display(Rfc3339(t)));
        let freshness = token.freshness_at(now);
        if freshness.is_stale() {
            self.stalled.fetch_max(generation, Ordering::AcqRel);
        }
        match freshness {
            Freshness::Expired => {
                // An expired token is past overdue too: one warning says it all.
                self.overdue.fetch_max(generation, Ordering::AcqRel);
                if first(&self.expired) {
                    tracing::warn!(
                        %source,
                        %token,
                        exp,
                        "the token in use has expired and its source holds no newer token: \
                         the server will refuse it"
                    );
                }
            }
            Freshness::Overdue if first(&self.overdue) => {
                let overdue = token.overdue_at().map(|t| display(Rfc3339(t)));
                tracing::warn!(
                    %source,
                    %token,
                    exp,
                    overdue,
                    "the token in use is overdue for rotation and its source holds no \
                     newer token (a subPath mount, or a kubelet or writer that stopped?)"
                );
            }
            _ => {}
        }
    }

    /// Since when `token` (the one in use) has been stalled: the point at which it became
    /// overdue, if a check found it stale; `None` for a token never found stale (a newer
    /// token clears the signal by being another generation).
    pub(crate) fn stalled_since<C: Credential>(&self, token: &C) -> Option<SystemTime> {
        if self.stalled.load(Ordering::Acquire) != token.generation() {
            return None;
        }
        token.overdue_at().or(token.expires_at())
    }
}
