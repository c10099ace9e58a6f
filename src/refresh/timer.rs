//! The timer: re-read the source every period, with a [spread](spread), and at the
//! moments the current token tells about ([`next_moment`]), recomputed after every read and
//! every rotation.
//!
//! A token a file holds tells them through its claims: just after the kubelet's rotation
//! point (so that a `subPath` mount or a setup without a watcher picks up the new token
//! then), when it becomes overdue, and when it expires. A token whose source gave its
//! dates is fetched at the moment the source asked for, else [before it
//! expires](before_expiry).
//!
//! A failed read, or a source that asks to be fetched again at once, is retried on a
//! backoff ([`FIRST_RETRY`], [`retry_wait`]), never in a loop.

use std::time::{Duration, SystemTime};

use tokio::time::Instant;

use crate::clock::jitter;
use crate::source::Trigger;
use crate::store::{Credential, OnFailure, Recency, WeakStore};

/// The least margin before a source-given expiry.
const MIN_MARGIN: Duration = Duration::from_secs(60);

/// The first retry after a failed read; each next waits twice as long, up to the period.
const FIRST_RETRY: Duration = Duration::from_secs(1);

/// The longest wait between retries of a store without a period.
const MAX_RETRY: Duration = Duration::from_secs(300);

/// The shortest period: a shorter one (zero above all) would read the source in a loop.
pub(crate) const MIN_PERIOD: Duration = Duration::from_secs(1);

/// How far a periodic read is spread past the period, so that stores started together do
/// not read in step: 5% of it, at least a second, at most a quarter of the period.
pub(crate) fn spread(period: Duration) -> Duration {
    (period / 20).max(Duration::from_secs(1)).min(period / 4)
}

/// Re-reads the store's source every `period` (if any), and at the moments the current
/// token tells about, on the store's clock, until the store is dropped.
pub(crate) async fn run<C: Credential>(store: WeakStore<C>, period: Option<Duration>) {
    let period = period.map(|p| p.max(MIN_PERIOD));
    let Some((mut rotations, key, due, clock)) = (store.upgrade()).map(|s| {
        (
            s.subscribe(),
            s.jitter_key(),
            due_at_once(&*s.current()),
            s.clock(),
        )
    }) else {
        return;
    };
    let cap = period.unwrap_or(MAX_RETRY);
    // The next read: after the retry's wait, else after the period and its jitter.
    let timer = key.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    let mut reads = 0_u64;
    let mut tick = move |retry: Option<Duration>| {
        let wait = retry.or_else(|| {
            reads += 1;
            period.map(|p| p + jitter(timer ^ reads, spread(p)))
        });
        wait.map(|wait| Instant::now() + wait)
    };
    // Moments at or before this one were served: a timer that fires a hair early (the
    // wall clock and tokio's clock are not the same clock) must not serve one twice.
    let mut served: Option<SystemTime> = None;
    let mut retry = due.then_some(FIRST_RETRY);
    let mut next_tick = tick(retry);
    loop {
        let Some(current) = store.upgrade().map(|s| s.current()) else {
            return;
        };
        let (now, now_instant) = (clock.now(), Instant::now());
        // The token's next moment, when it comes before the next periodic read.
        let moment = next_moment(&*current, served.map_or(now, |s| s.max(now)))
            // Checked: the dates are the token's word, as far off as a file says.
            .and_then(|at| {
                let wait = at.duration_since(now).unwrap_or_default();
                Some((at, now_instant.checked_add(wait)?))
            })
            .filter(|&(_, wake)| next_tick.is_none_or(|next| wake < next));
        let wake = moment.map(|(_, wake)| wake).or(next_tick);
        // Not held across the wait: the old token is not kept past a rotation.
        drop(current);
        tokio::select! {
            // Without a moment, nothing to wait for but a rotation, which brings new dates.
            () = tokio::time::sleep_until(wake.unwrap_or(now_instant)), if wake.is_some() => {}
            // Another trigger installed a new token: its moments replace the old token's.
            _ = rotations.changed() => continue,
        }
        let outcome = store
            .reload(Trigger::Timer, Recency::AfterNow, OnFailure::Report)
            .await;
        let Some(current) = store.upgrade().map(|s| s.current()) else {
            return;
        };
        retry = match outcome {
            None => return,
            Some(Ok(_)) if !due_at_once(&*current) => None,
            Some(_) => Some(retry.map_or(FIRST_RETRY, |r| r * 2).min(cap)),
        };
        rotations.borrow_and_update();
        if let Some((at, _)) = moment {
            served = Some(at);
        }
        // A full period from this read: a process woken from suspension reads once, not in
        // a burst.
        next_tick = tick(retry.map(|backoff| retry_wait(backoff, &*current, clock.now())));
    }
}

/// Whether the source asked for `token` to be fetched again at once.
fn due_at_once<C: Credential>(token: &C) -> bool {
    token
        .stamp()
        .refresh_at
        .is_some_and(|at| at <= token.loaded_at())
}

/// The wait before the next attempt: the `backoff`, but while the token has not expired no
/// later than halfway to its expiry (a cut that stops at [`FIRST_RETRY`]).
fn retry_wait<C: Credential>(backoff: Duration, token: &C, now: SystemTime) -> Duration {
    match token
        .expires_at()
        .and_then(|exp| exp.duration_since(now).ok())
    {
        Some(left) if !left.is_zero() => backoff.min((left / 2).max(FIRST_RETRY)),
        _ => backoff,
    }
}

/// The first moment strictly after `after` at which `token` should be fetched again.
fn next_moment<C: Credential>(token: &C, after: SystemTime) -> Option<SystemTime> {
    let stamp = token.stamp();
    let moments = match stamp.source_expiry {
        Some(exp) => [
            stamp.refresh_at.or_else(|| before_expiry(token, exp)),
            Some(exp),
            None,
        ],
        None if stamp.refresh_at.is_some() => [stamp.refresh_at, None, None],
        None => {
            let [rotation, overdue] = token.own_moments();
            [rotation, overdue, token.own_expiry()]
        }
    };
    moments.into_iter().flatten().filter(|&at| at > after).min()
}

/// `exp` less a tenth of the token's lifetime (at least [`MIN_MARGIN`]), less a jitter of
/// up to a quarter of that margin drawn for this token; never before half the lifetime.
fn before_expiry<C: Credential>(token: &C, exp: SystemTime) -> Option<SystemTime> {
    let lifetime = exp.duration_since(token.loaded_at()).ok()?;
    let margin = (lifetime / 10).max(MIN_MARGIN);
    let spread = jitter(token.seed(), margin / 4);
    exp.checked_sub(margin + spread)
        .map(|at| at.max(token.loaded_at() + lifetime / 2))
}

#[cfg(test)]
mod tests;
