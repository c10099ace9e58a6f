//! Which rustls crypto provider the TLS stores use ([TLS providers](super#tls-providers)).

use std::sync::Arc;

use rustls::crypto::CryptoProvider;

use super::CertificateError;

/// The provider for a new identity, bundle or client configuration, in the order of
/// [TLS providers](super#tls-providers), and its name for an error (`ring`, `aws-lc-rs`, or
/// [`INSTALLED`]).
pub(crate) fn named() -> Result<(Arc<CryptoProvider>, &'static str), CertificateError> {
    pick(CryptoProvider::get_default(), FEATURE)
}

/// The name of a process default the application installed.
pub(crate) const INSTALLED: &str = "the process default provider";

/// A provider of a feature, and the feature's name.
type Feature = (fn() -> CryptoProvider, &'static str);

/// The provider of the crate's features, if one is on.
#[cfg(feature = "ring")]
const FEATURE: Option<Feature> = Some((rustls::crypto::ring::default_provider, "ring"));
#[cfg(all(feature = "aws-lc-rs", not(feature = "ring")))]
const FEATURE: Option<Feature> = Some((rustls::crypto::aws_lc_rs::default_provider, "aws-lc-rs"));
#[cfg(not(any(feature = "ring", feature = "aws-lc-rs")))]
const FEATURE: Option<Feature> = None;

/// The order of [`named`], on its inputs.
fn pick(
    installed: Option<&Arc<CryptoProvider>>,
    feature: Option<Feature>,
) -> Result<(Arc<CryptoProvider>, &'static str), CertificateError> {
    let installed = installed.map(|installed| (installed.clone(), INSTALLED));
    let feature = || feature.map(|(feature, name)| (Arc::new(feature()), name));
    installed
        .or_else(feature)
        .ok_or(CertificateError::NoCryptoProvider)
}

#[cfg(test)]
mod tests;
