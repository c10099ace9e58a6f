//! Small synchronisation helpers shared by the modules.

use std::sync::{Mutex, MutexGuard};

/// Locks a std mutex, ignoring poisoning: the data behind these locks stays consistent
/// whatever a panicking holder did (plain values replaced whole).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
