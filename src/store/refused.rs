//! What the store keeps of the refusals of its credential: how sure each was, and the read
//! each asked for, rate-limited by kind ([`Refusals`]). The handles' refusal reloads
//! (`mod.rs`) ask it which read answers a refusal.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use super::status::Counters;
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
pub(super) struct Refusals {
    last: Mutex<RefusalReads>,
}

/// The last read of each kind, as [`Refusals`] holds them.
#[derive(Default)]
struct RefusalReads {
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

impl Refusals {
    /// The number of the read that answers a refusal of generation `sent`: the one asked
    /// for by an earlier refusal of the same certainty to the same token within
    /// `interval`, else the first read to start after `arrived` (the last read started
    /// when the response arrived), counted in `counters` when the refusal is certain.
    pub(super) fn read_for(
        &self,
        certainty: Certainty,
        sent: u64,
        arrived: u64,
        interval: Duration,
        counters: &Counters,
    ) -> u64 {
        let mut reads = lock(&self.last);
        let last = reads.slot(certainty);
        let now = Instant::now();
        match *last {
            // This generation was refused before, and a read was asked for then, within
            // the rate limit: that read started after the server had revoked the token,
            // so its answer (or a later read's) holds for this response too. A token
            // that is simply wrong costs one read per interval, however many requests.
            Some(r) if r.generation >= sent && now.duration_since(r.at) < interval => r.read,
            _ => {
                let read = arrived + 1;
                *last = Some(RefusalRead {
                    at: now,
                    generation: sent,
                    read,
                });
                if certainty == Certainty::Certain {
                    Counters::bump(&counters.unauthorized_reloads);
                }
                read
            }
        }
    }
}
