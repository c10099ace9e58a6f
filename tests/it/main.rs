//! The integration tests, in one binary (each binary costs a link of kube, tonic, reqwest
//! and the rest): a module per suite, each built when the crate's features it needs are on.
//! A test that needs a process of its own (it counts the process's threads, descriptors or
//! watches, installs a process-wide subscriber, recorder or rustls provider, or mounts a
//! filesystem) runs its body in a child process of this binary (`support::alone`).
//!
//! The other binaries: `tests/providers/` (the suites `.ci/run` runs under each rustls
//! provider), `tests/soak.rs` (20 s of load on both cores) and `tests/wiped.rs` (a global
//! allocator).

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "reqwest")]
mod conformance;
#[cfg(feature = "kube")]
mod exec;
mod hung_mount;
#[cfg(feature = "kube")]
mod kube;
#[cfg(all(feature = "kube", feature = "tls"))]
mod kube_tls;
#[cfg(all(feature = "kube", feature = "tls", feature = "metrics"))]
mod kubeconfig;
mod layer;
mod leak;
#[cfg(feature = "metrics")]
mod metrics;
mod oauth2_server_smoke;
mod permission;
#[cfg(feature = "reqwest")]
mod reqwest;
#[cfg(all(feature = "reqwest", feature = "tls"))]
mod reqwest_provider;
mod retry;
mod runtimes;
#[cfg(all(feature = "kube", feature = "reqwest"))]
mod secrecy;
mod stuck;
#[cfg(feature = "kube")]
mod token_request;
#[cfg(feature = "tonic")]
mod tonic;
mod watch;
mod watch_registry;
