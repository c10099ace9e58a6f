//! The suites `.ci/run` runs under each rustls provider (`--features ring,...` and
//! `--features aws-lc-rs,...`): the crate's own TLS, the OAuth 2.0 sources on it, and the
//! process default provider that comes before the feature's. One binary, as `tests/it/`.

#[path = "../support/mod.rs"]
mod support;

#[cfg(feature = "oauth2")]
mod oauth2;
mod provider;
mod tls;
