//! Helpers shared by the integration tests. Each test binary uses a part of them.
#![allow(dead_code, unreachable_pub)]

pub mod kube_api;
pub mod server;
