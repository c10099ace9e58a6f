//! The directory watcher (placeholder until the watcher lands).

use std::path::Path;

use crate::store::TokenStore;

pub(crate) fn start(_store: &TokenStore, _path: &Path) {}
