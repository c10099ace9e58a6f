//! Helpers shared by the integration tests. Each test binary uses a part of them.
#![allow(dead_code, unreachable_pub)]

pub mod kube_api;
pub mod serve;
pub mod server;
pub mod sim;
pub mod token_request;

use std::path::{Path, PathBuf};

use bearer_reload::{TokenFile, TokenStore};

/// Writes `token` (with the newline `echo` leaves) to `dir/token` and loads it with the
/// watcher and the timer off: only the test, or a 401, reloads it.
pub async fn quiet_store(dir: &Path, token: &str) -> (PathBuf, TokenStore) {
    let path = dir.join("token");
    std::fs::write(&path, format!("{token}\n")).unwrap();
    let store = TokenFile::new(&path)
        .watch(false)
        .refresh_interval(None)
        .load()
        .await
        .unwrap();
    (path, store)
}
