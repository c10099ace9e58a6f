use rustls::pki_types::pem::PemObject;

use super::*;

fn of_pem(pem: &str) -> String {
    key_type(&PrivateKeyDer::from_pem_slice(pem.as_bytes()).unwrap())
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
        assert_eq!(of_pem(&pem), name);
    }
}

#[test]
fn pkcs1_and_sec1_keys_are_named_too() {
    use rsa::pkcs1::EncodeRsaPrivateKey;
    let rsa = rsa::RsaPrivateKey::new(&mut rsa::rand_core::OsRng, 1024).unwrap();
    let der = rsa.to_pkcs1_der().unwrap();
    let key = PrivateKeyDer::Pkcs1(der.as_bytes().to_vec().into());
    assert_eq!(key_type(&key), "RSA 1024");
    // A PKCS#8 EC key holds SEC1's ECPrivateKey without the curve (the algorithm names
    // it): the length of the private key tells.
    for (alg, want) in [
        (&rcgen::PKCS_ECDSA_P256_SHA256, P256),
        (&rcgen::PKCS_ECDSA_P384_SHA384, P384),
        (&rcgen::PKCS_ECDSA_P521_SHA512, P521),
    ] {
        let pkcs8 = rcgen(alg).serialize_der();
        let info = sequence(&pkcs8).unwrap();
        let sec1 = info[2].data.to_vec();
        assert_eq!(key_type(&PrivateKeyDer::Sec1(sec1.into())), want);
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
            assert_eq!(key_type(&key), "a key of a type not read", "{der:?}");
        }
    }
    // A DSA key's algorithm (1.2.840.10040.4.1), by its OID.
    let dsa = [
        0x30, 0x12, 0x02, 0x01, 0x00, 0x30, 0x09, 0x06, 0x07, 0x2a, 0x86, 0x48, 0xce, 0x38, 0x04,
        0x01, 0x04, 0x02, 0x02, 0x00,
    ];
    let key = PrivateKeyDer::Pkcs8(dsa.to_vec().into());
    assert_eq!(key_type(&key), "a key of algorithm 1.2.840.10040.4.1");
}

#[test]
fn the_remedy_names_aws_lc_rs_for_p521_unless_it_is_the_provider() {
    assert!(remedy(P521, "ring").contains("feature `aws-lc-rs`"));
    assert!(remedy(P521, crate::tls::provider::INSTALLED).contains("aws-lc-rs can"));
    assert_eq!(remedy(P521, "aws-lc-rs"), "");
    assert_eq!(remedy("Ed448", "ring"), "");
    assert!(remedy("RSA 1024", "aws-lc-rs").contains("2048"));
    assert_eq!(remedy("RSA 3072", "ring"), "");
    assert_eq!(remedy("RSA 2048", "ring"), "");
    assert!(remedy("RSA 2047", "ring").contains("2048"));
}

/// A SEC1 key that names its curve in `[0]` is named by it, not by its length, whatever
/// order its optional parts come in.
#[test]
fn a_sec1_key_is_named_by_the_curve_it_names() {
    // secp256k1 (1.3.132.0.10): a 32-byte key, as P-256's.
    let curve = [0xa0, 0x07, 0x06, 0x05, 0x2b, 0x81, 0x04, 0x00, 0x0a];
    let public_key = [0xa1, 0x04, 0x03, 0x02, 0x00, 0x04];
    let key = |optional: &[&[u8]]| {
        let mut content = vec![0x02, 0x01, 0x01, 0x04, 0x20];
        content.extend([0x11; 32]);
        for part in optional {
            content.extend_from_slice(part);
        }
        let mut der = vec![0x30, u8::try_from(content.len()).unwrap()];
        der.extend(content);
        key_type(&PrivateKeyDer::Sec1(der.into()))
    };
    let named = "an EC key on curve 1.3.132.0.10";
    assert_eq!(key(&[&curve]), named);
    assert_eq!(key(&[&curve, &public_key]), named);
    assert_eq!(key(&[&public_key, &curve]), named);
    assert_eq!(key(&[&public_key]), P256, "no curve named: by the length");
}

#[test]
fn bits_count_from_the_first_set_bit() {
    assert_eq!(bits(&[0x00, 0x80, 0x00]), 16);
    assert_eq!(bits(&[0x01, 0xff]), 9);
    assert_eq!(bits(&[0x00]), 0);
    assert_eq!(bits(&[]), 0);
}
