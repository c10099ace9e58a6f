//! What the store does when a server refuses its token: a generation-aware, rate-limited
//! reload, and the wait of the requests that would carry the refused token.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use super::flight::{Ask, Ticket};
use super::{Counters, OnFailure, TokenStore, wait, word};
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
    ///
    /// While that read runs, requests that would carry the refused token wait for it at
    /// the layer's readiness ([`refusal_settled`](Self::refusal_settled)) rather than meet
    /// a 401 of their own.
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
        Refused::Reading(s.ask(wanted, ask, Some(sent)))
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

    /// When the token of `generation` was refused and the read that may replace it is in
    /// flight: a future that resolves when that read is over (bounded by the store's fetch
    /// timeout, as the read is). `None` when there is nothing to wait for.
    pub(crate) fn refusal_settled(
        &self,
        generation: u64,
    ) -> Option<impl Future<Output = ()> + Send + Sync + 'static> {
        let s = &self.shared;
        if s.word.load(Ordering::Acquire) & word::REFUSED == 0 {
            return None;
        }
        let refusal = lock(&s.flight).refusal?;
        if refusal.generation != generation {
            return None;
        }
        let mut done = s.done.subscribe();
        Some(async move {
            let _ = done.wait_for(|d| d.read >= refusal.read).await;
        })
    }

    /// Before a request that reads the current token at each send (the reqwest
    /// middleware): the refresher started again if it stopped, and the wait for a refused
    /// current token's reload, as the layer does at readiness.
    #[cfg(feature = "reqwest")]
    pub(crate) async fn settle(&self) {
        let word = self.shared.word.load(Ordering::Acquire);
        if word & word::STOPPED != 0 {
            self.revive();
        }
        if let Some(wait) = self.refusal_settled(word & word::GENERATION) {
            wait.await;
        }
    }

    fn newer_than(&self, sent: u64) -> Option<Arc<Token>> {
        Some(self.current()).filter(|t| t.generation() > sent)
    }
}
