//! The watch loop of one store: reload when its file's directory changes.
//!
//! Each store watched has a task that owns its [`Subscription`] to the process-wide
//! [`Registry`](super::registry::Registry) and holds only a weak [`Handle`] to the store,
//! so that it ends with the store. It waits on a coalescing [`Notify`], then reads the file
//! again with a read that starts after the event; a read that fails right after an event
//! (a half-written file) is retried after 10, 50 and 250 ms, or sooner on the next event,
//! and only the last failure is reported.
//!
//! When the directory is removed or renamed away, or cannot be watched at all, the store
//! reports [`WatchState::Degraded`] (the timer keeps working) and the task polls, with a
//! backoff, until the directory can be watched again, then reloads.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;

use super::registry::{GLOBAL, Registry, Subscription, lost_reason};
use crate::source::Trigger;
use crate::store::{Handle, OnFailure, Recency, WatchState};

/// Delays before the retries of a read that failed right after an event; the last retry
/// reports its failure.
const RETRY_DELAYS: [Duration; 3] = [
    Duration::from_millis(10),
    Duration::from_millis(50),
    Duration::from_millis(250),
];

/// First and largest delay between two attempts to watch a directory again.
const REARM_FIRST: Duration = Duration::from_millis(20);
const REARM_MAX: Duration = Duration::from_secs(2);
/// The directory watched for `file`: its parent, canonicalized (the file itself is often a
/// symlink, which must not be followed).
fn directory_of(file: &Path) -> PathBuf {
    let parent = match file.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    };
    std::fs::canonicalize(parent)
        .or_else(|_| std::path::absolute(parent))
        .unwrap_or_else(|_| parent.to_owned())
}

/// Subscribes `handle`'s store to changes of `path`'s directory through the process-wide
/// registry, and returns the loop that reloads it on each change (see the module docs).
pub(crate) fn watch(handle: Handle, path: &Path) -> impl Future<Output = ()> + Send + use<> {
    watch_with(&GLOBAL, handle, path)
}

/// [`watch`] through `registry`.
pub(crate) fn watch_with(
    registry: &Arc<Registry>,
    handle: Handle,
    path: &Path,
) -> impl Future<Output = ()> + Send + use<> {
    let dir = directory_of(path);
    let (sub, armed) = registry.subscribe(dir);
    handle.set_watch_state(match &armed {
        Ok(_) => WatchState::Active,
        Err(reason) => WatchState::Degraded {
            reason: reason.clone(),
        },
    });
    run(handle, sub, armed)
}

/// The store's watch task: reload on each wake-up; while degraded, try to re-arm.
async fn run(store: Handle, sub: Subscription, mut armed: Result<u64, String>) {
    loop {
        armed = match armed {
            // Checked before each wait, not only after a wake-up: the event that marked the
            // directory lost may have been consumed by a retry's wait.
            Ok(epoch) => match sub.registry.armed(&sub.dir) {
                // Another store of this directory re-armed it while this task was busy: the
                // file may have changed while nobody watched.
                Some(now) if now != epoch => {
                    store.set_watch_state(WatchState::Active);
                    if !reload_after_event(&store, &sub.signal).await {
                        return;
                    }
                    Ok(now)
                }
                Some(epoch) => {
                    let woken = tokio::select! {
                        () = sub.signal.notified() => true,
                        () = tokio::time::sleep(sub.registry.verify_every) => false,
                    };
                    if !woken {
                        sub.registry.verify(&sub.dir);
                    } else if sub.registry.armed(&sub.dir).is_some()
                        && !reload_after_event(&store, &sub.signal).await
                    {
                        return;
                    }
                    Ok(epoch)
                }
                None => {
                    sub.registry.disarm(&sub.dir, epoch);
                    let reason = lost_reason(&sub.dir);
                    if store.upgrade().is_none() {
                        return;
                    }
                    store.set_watch_state(WatchState::Degraded {
                        reason: reason.clone(),
                    });
                    Err(reason)
                }
            },
            Err(reason) => match rearm(&store, &sub, reason).await {
                Some(epoch) => {
                    if !reload_after_event(&store, &sub.signal).await {
                        return;
                    }
                    Ok(epoch)
                }
                None => return,
            },
        };
    }
}

/// Waits, with a backoff, until the directory can be watched again; `None` when the store
/// is gone.
async fn rearm(store: &Handle, sub: &Subscription, mut reason: String) -> Option<u64> {
    let mut delay = REARM_FIRST;
    loop {
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(REARM_MAX);
        let exists = sub.dir.is_dir();
        store.upgrade()?;
        if !exists {
            continue;
        }
        match sub.registry.arm(&sub.dir) {
            Ok(epoch) => {
                store.set_watch_state(WatchState::Active);
                return Some(epoch);
            }
            Err(now) if now != reason => {
                store.set_watch_state(WatchState::Degraded {
                    reason: now.clone(),
                });
                reason = now;
            }
            Err(_) => {}
        }
    }
}

/// Reads the file again after an event. A failed read is retried after each delay in
/// [`RETRY_DELAYS`], or sooner when another event comes; only the last failure is reported.
/// Returns `false` when the store is gone.
async fn reload_after_event(store: &Handle, signal: &Notify) -> bool {
    for attempt in 0..=RETRY_DELAYS.len() {
        if let Some(delay) = attempt.checked_sub(1).map(|i| RETRY_DELAYS[i]) {
            tokio::select! {
                biased;
                () = signal.notified() => {}
                () = tokio::time::sleep(delay) => {}
            }
        }
        let report = if attempt == RETRY_DELAYS.len() {
            OnFailure::Report
        } else {
            OnFailure::Quiet
        };
        match store
            .reload(Trigger::Watch, Recency::AfterNow, report)
            .await
        {
            None => return false,
            Some(Ok(_)) => break,
            Some(Err(_)) => {}
        }
    }
    true
}

#[cfg(test)]
mod tests;
