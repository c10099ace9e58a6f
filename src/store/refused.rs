//! What the store does when a server refuses its token: a generation-aware, rate-limited
//! reload.

use std::sync::Arc;
use std::time::Instant;

use super::flight::{Ask, Ticket};
use super::{Counters, OnFailure, TokenStore, wait};
use crate::source::Trigger;
use crate::sync::lock;
use crate::token::Token;

/// A read asked for by an unauthorized response.
#[derive(Clone, Copy)]
pub(super) struct UnauthorizedRead {
    at: Instant,
    generation: u64,
    read: u64,
}

/// The store's answer to an unauthorized response.
enum Refused {
    /// A token newer than the refused one is already installed.
    Newer(Arc<Token>),
    /// A read that starts after the response arrived will answer.
    Reading(Ticket),
}

impl TokenStore {
    /// After an unauthorized response to a request sent with generation `sent`: a newer
    /// token if one is installed, else the read that may bring one (started now, joined,
    /// or the one asked for by an earlier 401 to the same token within the rate limit).
    fn refused(&self, sent: u64) -> Refused {
        let s = &self.shared;
        Counters::bump(&s.counters.unauthorized_seen);
        s.telemetry.unauthorized();
        // Reads started before this response arrived may have started before the server
        // revoked the token, and before its successor was written: they do not count.
        let arrived = lock(&s.flight).started;
        if let Some(token) = self.newer_than(sent) {
            return Refused::Newer(token);
        }
        let wanted = {
            let mut last = lock(&s.last_unauthorized_read);
            let now = Instant::now();
            match *last {
                // This generation was refused before, and a read was asked for then, within
                // the rate limit: that read started after the server had revoked the token,
                // so its answer (or a later read's) holds for this response too. A token
                // that is simply wrong costs one read per interval, however many requests.
                Some(r)
                    if r.generation >= sent
                        && now.duration_since(r.at) < s.config.unauthorized_interval =>
                {
                    r.read
                }
                _ => {
                    let read = arrived + 1;
                    *last = Some(UnauthorizedRead {
                        at: now,
                        generation: sent,
                        read,
                    });
                    Counters::bump(&s.counters.unauthorized_reloads);
                    read
                }
            }
        };
        let ask = Ask {
            trigger: Trigger::Unauthorized,
            report: OnFailure::Report,
        };
        Refused::Reading(s.ask(wanted, ask))
    }

    /// After an unauthorized response: a token newer than `sent`, installed already or
    /// read now, or `None` when the source still holds the same token (or was read less
    /// than the rate limit ago). The read is the store's: dropping this future leaves it
    /// running for the requests that follow.
    pub(crate) async fn refresh_after_unauthorized(&self, sent: u64) -> Option<Arc<Token>> {
        match self.refused(sent) {
            Refused::Newer(token) => Some(token),
            Refused::Reading(ticket) => {
                let done = self.shared.done.subscribe();
                wait(done, ticket).await;
                self.newer_than(sent)
            }
        }
    }

    /// After an unauthorized response to a request sent with generation `sent`, without
    /// waiting: starts (or joins) the read that may bring a newer token, for the requests
    /// that follow.
    pub(crate) fn reload_after_unauthorized(&self, sent: u64) {
        let _ = self.refused(sent);
    }

    /// Starts the store's refresher again if it stopped: for a client that reads the
    /// current token at each send (the reqwest middleware), as the layer's slow path does.
    #[cfg(feature = "reqwest")]
    pub(crate) fn revive_if_stopped(&self) {
        use std::sync::atomic::Ordering;
        if self.shared.word.load(Ordering::Acquire) & super::word::STOPPED != 0 {
            self.revive();
        }
    }

    fn newer_than(&self, sent: u64) -> Option<Arc<Token>> {
        Some(self.current()).filter(|t| t.generation() > sent)
    }
}
