//! What the store does when a server refuses its credential: a generation-aware,
//! rate-limited reload.

use std::sync::Arc;
use std::time::Instant;

use super::flight::{Ask, Ticket};
use super::{Counters, Credential, OnFailure, Store, wait};
use crate::source::Trigger;
use crate::sync::lock;

/// How sure a refusal is that the server refused the credential.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Certainty {
    /// The server said so: a 401, a certificate alert; or our verifier refused the
    /// server's certificate.
    Certain,
    /// A connection that ended without an answer, as one whose certificate the server
    /// refused after a TLS 1.3 handshake may: or for any other reason.
    #[cfg_attr(not(feature = "tls"), allow(dead_code))]
    Possible,
}

/// A read asked for by a refusal.
#[derive(Clone, Copy)]
struct RefusalRead {
    at: Instant,
    generation: u64,
    read: u64,
}

/// The last read asked for by each kind of refusal: each is rate-limited on its own, so
/// that a possible refusal (a connection that closed, which may have happened before the
/// rotation was written) never spends the read that a certain one of the same
/// generation needs.
#[derive(Default)]
pub(super) struct RefusalReads {
    certain: Option<RefusalRead>,
    possible: Option<RefusalRead>,
}

impl RefusalReads {
    fn slot(&mut self, certainty: Certainty) -> &mut Option<RefusalRead> {
        match certainty {
            Certainty::Certain => &mut self.certain,
            Certainty::Possible => &mut self.possible,
        }
    }
}

/// The store's answer to an unauthorized response.
enum Refused<C> {
    /// A token newer than the refused one is already installed.
    Newer(Arc<C>),
    /// A read that starts after the response arrived will answer.
    Reading(Ticket),
}

impl<C: Credential> Store<C> {
    /// After a refusal of a request sent with generation `sent`: a newer token if one is
    /// installed, else the read that may bring one (started now, joined, or the one asked
    /// for by an earlier refusal of the same certainty to the same token within the rate
    /// limit). Only certain refusals count as unauthorized responses in the status.
    fn refused(&self, sent: u64, certainty: Certainty) -> Refused<C> {
        let s = &self.shared;
        if certainty == Certainty::Certain {
            Counters::bump(&s.counters.unauthorized_seen);
            s.telemetry.unauthorized();
        }
        // Reads started before this response arrived may have started before the server
        // revoked the token, and before its successor was written: they do not count.
        let arrived = lock(&s.flight).started;
        if let Some(token) = self.newer_than(sent) {
            return Refused::Newer(token);
        }
        let wanted = {
            let mut reads = lock(&s.last_refusal_reads);
            let last = reads.slot(certainty);
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
                    *last = Some(RefusalRead {
                        at: now,
                        generation: sent,
                        read,
                    });
                    if certainty == Certainty::Certain {
                        Counters::bump(&s.counters.unauthorized_reloads);
                    }
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

    /// After a refusal: a token newer than `sent`, installed already or read now, or
    /// `None` when the source still holds the same token (or was read less than the rate
    /// limit ago). The read is the store's: dropping this future leaves it running for the
    /// requests that follow.
    pub(crate) async fn refresh_after_refusal(
        &self,
        sent: u64,
        certainty: Certainty,
    ) -> Option<Arc<C>> {
        match self.refused(sent, certainty) {
            Refused::Newer(token) => Some(token),
            Refused::Reading(ticket) => {
                let done = self.shared.done.subscribe();
                wait(done, ticket).await;
                self.newer_than(sent)
            }
        }
    }

    /// After a refusal of a request sent with generation `sent`, without waiting: starts
    /// (or joins) the read that may bring a newer token, for the requests that follow.
    pub(crate) fn reload_after_refusal(&self, sent: u64, certainty: Certainty) {
        let _ = self.refused(sent, certainty);
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

    fn newer_than(&self, sent: u64) -> Option<Arc<C>> {
        Some(self.current()).filter(|t| t.generation() > sent)
    }
}
