//! [`KeyType`]: what a private key is, read from its DER, so that a key the crypto
//! provider cannot sign with is refused with its type named.

use std::borrow::Cow;
use std::fmt;

use rustls::pki_types::PrivateKeyDer;
use x509_parser::asn1_rs::{Any, Class, FromDer, Oid, Tag};

/// The type of a private key: its algorithm, and its curve or size.
///
/// In [`CertificateError::UnsupportedKey`](super::CertificateError::UnsupportedKey), for a
/// key the crypto provider cannot sign with. The key types a Kubernetes pod certificate may
/// have (`keyType` of a `podCertificate` projected volume) are `Rsa { bits: 3072 }`,
/// `Rsa { bits: 4096 }`, `EcdsaP256`, `EcdsaP384`, `EcdsaP521` and `Ed25519`.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub(crate) enum KeyType {
    /// RSA, with its modulus's size.
    Rsa {
        /// The modulus's size in bits.
        bits: usize,
    },
    /// ECDSA on NIST P-256.
    EcdsaP256,
    /// ECDSA on NIST P-384.
    EcdsaP384,
    /// ECDSA on NIST P-521.
    EcdsaP521,
    /// Ed25519.
    Ed25519,
    /// Ed448.
    Ed448,
    /// ML-DSA (FIPS 204) of the parameter set named: 44, 65 or 87.
    MlDsa {
        /// The parameter set.
        parameter_set: u16,
    },
    /// Another type: what the key's DER says of it (an algorithm's or a curve's OID), or
    /// that it says nothing this crate reads.
    Other {
        /// What is known of it.
        description: String,
    },
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            KeyType::Rsa { bits } => write!(f, "RSA {bits}"),
            KeyType::EcdsaP256 => f.write_str("ECDSA P-256"),
            KeyType::EcdsaP384 => f.write_str("ECDSA P-384"),
            KeyType::EcdsaP521 => f.write_str("ECDSA P-521"),
            KeyType::Ed25519 => f.write_str("Ed25519"),
            KeyType::Ed448 => f.write_str("Ed448"),
            KeyType::MlDsa { parameter_set } => write!(f, "ML-DSA-{parameter_set}"),
            KeyType::Other { description } => f.write_str(description),
        }
    }
}

impl KeyType {
    /// The type of `key`, from its DER: PKCS#8 (`PRIVATE KEY`), PKCS#1 (`RSA PRIVATE KEY`)
    /// or SEC1 (`EC PRIVATE KEY`). Never fails: DER it cannot read is
    /// [`Other`](Self::Other).
    pub(crate) fn of(key: &PrivateKeyDer<'_>) -> KeyType {
        let read = match key {
            PrivateKeyDer::Pkcs8(key) => pkcs8(key.secret_pkcs8_der()),
            PrivateKeyDer::Pkcs1(key) => pkcs1(key.secret_pkcs1_der()),
            PrivateKeyDer::Sec1(key) => sec1(key.secret_sec1_der()),
            _ => None,
        };
        read.unwrap_or_else(|| KeyType::Other {
            description: "a key of a type not read".to_owned(),
        })
    }

    /// What to do about a key of this type that `provider` cannot sign with, after a
    /// colon; empty when nothing would help.
    pub(crate) fn remedy(&self, provider: &str) -> &'static str {
        match self {
            KeyType::EcdsaP521 if provider != "aws-lc-rs" => {
                ": aws-lc-rs can (enable feature `aws-lc-rs` of bearer-reload with its default \
                 features off, or install aws-lc-rs as rustls's process default provider)"
            }
            KeyType::Rsa { bits } if *bits < 2048 => ": RSA keys need 2048 bits or more",
            _ => "",
        }
    }
}

/// `PrivateKeyInfo ::= SEQUENCE { version, privateKeyAlgorithm AlgorithmIdentifier,
/// privateKey OCTET STRING, ... }` (RFC 5208, RFC 5958).
fn pkcs8(der: &[u8]) -> Option<KeyType> {
    let info = sequence(der)?;
    let algorithm = sequence_of(info.get(1)?)?;
    let private_key = info.get(2)?;
    Some(match oid(algorithm.first()?)?.as_str() {
        // rsaEncryption, RSASSA-PSS: the key is PKCS#1's.
        "1.2.840.113549.1.1.1" | "1.2.840.113549.1.1.10" => pkcs1(private_key.data)?,
        // id-ecPublicKey: the curve is the parameter, else the key's own (SEC1's).
        "1.2.840.10045.2.1" => match algorithm.get(1).and_then(oid) {
            Some(curve) => named_curve(&curve),
            None => sec1(private_key.data)?,
        },
        "1.3.101.112" => KeyType::Ed25519,
        "1.3.101.113" => KeyType::Ed448,
        "2.16.840.1.101.3.4.3.17" => KeyType::MlDsa { parameter_set: 44 },
        "2.16.840.1.101.3.4.3.18" => KeyType::MlDsa { parameter_set: 65 },
        "2.16.840.1.101.3.4.3.19" => KeyType::MlDsa { parameter_set: 87 },
        other => KeyType::Other {
            description: format!("a key of algorithm {other}"),
        },
    })
}

/// `RSAPrivateKey ::= SEQUENCE { version, modulus INTEGER, ... }` (RFC 8017).
fn pkcs1(der: &[u8]) -> Option<KeyType> {
    let key = sequence(der)?;
    let modulus = key.get(1).filter(|m| m.header.tag() == Tag::Integer)?;
    Some(KeyType::Rsa {
        bits: bits(modulus.data),
    })
}

/// `ECPrivateKey ::= SEQUENCE { version, privateKey OCTET STRING, [0] ECParameters
/// OPTIONAL, [1] publicKey OPTIONAL }` (RFC 5915): the curve named in `[0]`, else told by
/// the private key's length.
fn sec1(der: &[u8]) -> Option<KeyType> {
    let key = sequence(der)?;
    let parameters = key
        .iter()
        .find(|e| e.header.class() == Class::ContextSpecific && e.header.tag() == Tag(0))
        .and_then(|e| Any::from_der(e.data).ok())
        .and_then(|(_, curve)| oid(&curve));
    if let Some(curve) = parameters {
        return Some(named_curve(&curve));
    }
    let private_key = key.get(1).filter(|k| k.header.tag() == Tag::OctetString)?;
    Some(match private_key.data.len() {
        32 => KeyType::EcdsaP256,
        48 => KeyType::EcdsaP384,
        65 | 66 => KeyType::EcdsaP521,
        n => KeyType::Other {
            description: format!("an EC key of {n} bytes on a curve not named"),
        },
    })
}

fn named_curve(oid: &str) -> KeyType {
    match oid {
        "1.2.840.10045.3.1.7" => KeyType::EcdsaP256,
        "1.3.132.0.34" => KeyType::EcdsaP384,
        "1.3.132.0.35" => KeyType::EcdsaP521,
        other => KeyType::Other {
            description: format!("an EC key on curve {other}"),
        },
    }
}

/// The elements of the DER `SEQUENCE` that `der` starts with.
fn sequence(der: &[u8]) -> Option<Vec<Any<'_>>> {
    let (_, any) = Any::from_der(der).ok()?;
    sequence_of(&any)
}

/// The elements of `any`, when it is a `SEQUENCE`.
fn sequence_of<'a>(any: &Any<'a>) -> Option<Vec<Any<'a>>> {
    if any.header.tag() != Tag::Sequence {
        return None;
    }
    let mut rest = any.data;
    let mut elements = Vec::new();
    while !rest.is_empty() {
        let (after, element) = Any::from_der(rest).ok()?;
        elements.push(element);
        rest = after;
    }
    Some(elements)
}

/// The dotted form of an `OBJECT IDENTIFIER`.
fn oid(any: &Any<'_>) -> Option<String> {
    (any.header.tag() == Tag::Oid).then(|| Oid::new(Cow::Borrowed(any.data)).to_id_string())
}

/// The size in bits of a positive `INTEGER`'s content (big-endian, maybe a leading zero).
fn bits(integer: &[u8]) -> usize {
    let start = integer
        .iter()
        .position(|&b| b != 0)
        .unwrap_or(integer.len());
    match integer.get(start..) {
        Some([first, rest @ ..]) => {
            rest.len().saturating_mul(8) + (8 - first.leading_zeros() as usize)
        }
        _ => 0,
    }
}

#[cfg(test)]
mod tests {
    use rustls::pki_types::pem::PemObject;

    use super::*;

    fn of_pem(pem: &str) -> KeyType {
        KeyType::of(&PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap())
    }

    fn rcgen(alg: &'static rcgen::SignatureAlgorithm) -> rcgen::KeyPair {
        rcgen::KeyPair::generate_for(alg).unwrap()
    }

    #[test]
    fn every_pod_certificate_key_type_is_named_from_its_pkcs8() {
        use crate::test_support::key_types::{POD_KEY_TYPES, generate};
        let names = [
            "RSA 3072",
            "RSA 4096",
            "ECDSA P-256",
            "ECDSA P-384",
            "ECDSA P-521",
            "Ed25519",
        ];
        for (key_type, name) in POD_KEY_TYPES.into_iter().zip(names) {
            let pem = generate(key_type).serialize_pem();
            assert!(pem.starts_with("-----BEGIN PRIVATE KEY-----"), "{key_type}");
            assert_eq!(of_pem(&pem).to_string(), name);
        }
    }

    #[test]
    fn pkcs1_and_sec1_keys_are_named_too() {
        use rsa::pkcs1::EncodeRsaPrivateKey;
        let rsa = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 1024).unwrap();
        let der = rsa.to_pkcs1_der().unwrap();
        let key = PrivateKeyDer::Pkcs1(der.as_bytes().to_vec().into());
        assert_eq!(KeyType::of(&key), KeyType::Rsa { bits: 1024 });
        // A PKCS#8 EC key holds SEC1's ECPrivateKey without the curve (the algorithm names
        // it): the length of the private key tells.
        for (alg, want) in [
            (&rcgen::PKCS_ECDSA_P256_SHA256, KeyType::EcdsaP256),
            (&rcgen::PKCS_ECDSA_P384_SHA384, KeyType::EcdsaP384),
            (&rcgen::PKCS_ECDSA_P521_SHA512, KeyType::EcdsaP521),
        ] {
            let pkcs8 = rcgen(alg).serialize_der();
            let info = sequence(&pkcs8).unwrap();
            let sec1 = info[2].data.to_vec();
            assert_eq!(KeyType::of(&PrivateKeyDer::Sec1(sec1.into())), want);
        }
    }

    #[test]
    fn what_is_not_read_is_other_and_never_a_panic() {
        for der in [
            &[][..],
            &[0x30],
            &[0x30, 0x03, 0x02, 0x01],
            &[0x30, 0x00],
            &[0x04, 0x01, 0x00],
            &[0x30, 0x05, 0x02, 0x01, 0x00, 0x30, 0x00],
        ] {
            for key in [
                PrivateKeyDer::Pkcs8(der.to_vec().into()),
                PrivateKeyDer::Pkcs1(der.to_vec().into()),
                PrivateKeyDer::Sec1(der.to_vec().into()),
            ] {
                assert!(
                    matches!(KeyType::of(&key), KeyType::Other { .. }),
                    "{der:?}"
                );
            }
        }
        // A DSA key's algorithm (1.2.840.10040.4.1), by its OID.
        let dsa = [
            0x30, 0x12, 0x02, 0x01, 0x00, 0x30, 0x09, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x38,
            0x04, 0x01, 0x04, 0x02, 0x02, 0x00,
        ];
        let key = PrivateKeyDer::Pkcs8(dsa.to_vec().into());
        assert_eq!(
            KeyType::of(&key).to_string(),
            "a key of algorithm 1.2.840.10040.4.1"
        );
    }

    #[test]
    fn the_remedy_names_aws_lc_rs_for_p521_unless_it_is_the_provider() {
        let p521 = KeyType::EcdsaP521;
        assert!(p521.remedy("ring").contains("feature `aws-lc-rs`"));
        assert!(
            p521.remedy(crate::tls::provider::INSTALLED)
                .contains("aws-lc-rs can")
        );
        assert_eq!(p521.remedy("aws-lc-rs"), "");
        assert_eq!(KeyType::Ed448.remedy("ring"), "");
        assert!(
            KeyType::Rsa { bits: 1024 }
                .remedy("aws-lc-rs")
                .contains("2048")
        );
        assert_eq!(KeyType::Rsa { bits: 3072 }.remedy("ring"), "");
    }

    #[test]
    fn bits_count_from_the_first_set_bit() {
        assert_eq!(bits(&[0x00, 0x80, 0x00]), 16);
        assert_eq!(bits(&[0x01, 0xff]), 9);
        assert_eq!(bits(&[0x00]), 0);
        assert_eq!(bits(&[]), 0);
    }
}
