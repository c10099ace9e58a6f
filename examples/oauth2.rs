//! The OAuth 2.0 source against oidc-provider. (Being written.)
fn main() {}
