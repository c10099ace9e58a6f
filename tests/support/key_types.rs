//! The key types a Kubernetes pod certificate may have (`keyType` of a `podCertificate`
//! projected volume), made at test time: RSA with the `rsa` crate (built optimised), the
//! others with rcgen on aws-lc-rs (ring makes no P-521 key).
//!
//! Self-contained, so that the crate's unit tests can include it with `#[path]`.
#![allow(dead_code, unreachable_pub)]

use rcgen::KeyPair;

/// Every `keyType` of a pod certificate, as the Kubernetes API spells it.
pub const POD_KEY_TYPES: [&str; 6] = [
    "RSA3072",
    "RSA4096",
    "ECDSAP256",
    "ECDSAP384",
    "ECDSAP521",
    "ED25519",
];

/// A new key of `key_type` (one of [`POD_KEY_TYPES`]), its PEM PKCS#8 `PRIVATE KEY` as the
/// kubelet writes it.
pub fn generate(key_type: &str) -> KeyPair {
    let rsa = |bits| {
        use rsa::pkcs8::EncodePrivateKey;
        let key = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, bits).unwrap();
        let pem = key.to_pkcs8_pem(rsa::pkcs8::LineEnding::LF).unwrap();
        KeyPair::from_pem(&pem).unwrap()
    };
    match key_type {
        "RSA3072" => rsa(3072),
        "RSA4096" => rsa(4096),
        "ECDSAP256" => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).unwrap(),
        "ECDSAP384" => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P384_SHA384).unwrap(),
        "ECDSAP521" => KeyPair::generate_for(&rcgen::PKCS_ECDSA_P521_SHA512).unwrap(),
        "ED25519" => KeyPair::generate_for(&rcgen::PKCS_ED25519).unwrap(),
        other => panic!("not a pod certificate key type: {other}"),
    }
}
