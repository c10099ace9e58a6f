//! A private key's type, read from its DER, to name a key the provider cannot sign with.

use std::borrow::Cow;

use rustls::pki_types::PrivateKeyDer;
use x509_parser::asn1_rs::{Any, Class, DerParser, FromDer, Oid, SequenceIterator, Tag};

/// The type of `key` as an error names it (`RSA 4096`, `ECDSA P-256`, `Ed25519`,
/// `ML-DSA-65`, or an OID), from PKCS#8, PKCS#1 or SEC1 DER; never fails: DER it cannot
/// read is "a key of a type not read".
pub(crate) fn key_type(key: &PrivateKeyDer<'_>) -> String {
    let read = match key {
        PrivateKeyDer::Pkcs8(key) => pkcs8(key.secret_pkcs8_der()),
        PrivateKeyDer::Pkcs1(key) => pkcs1(key.secret_pkcs1_der()),
        PrivateKeyDer::Sec1(key) => sec1(key.secret_sec1_der()),
        _ => None,
    };
    read.unwrap_or_else(|| "a key of a type not read".to_owned())
}

/// What to do about a key of `key_type` that `provider` cannot sign with, after a colon;
/// empty when nothing would help.
pub(crate) fn remedy(key_type: &str, provider: &str) -> &'static str {
    let rsa_bits = key_type
        .strip_prefix("RSA ")
        .and_then(|b| b.parse::<usize>().ok());
    match key_type {
        P521 if provider != "aws-lc-rs" => {
            ": aws-lc-rs can (enable feature `aws-lc-rs` of bearer-reload with its default \
             features off, or install aws-lc-rs as rustls's process default provider)"
        }
        _ if rsa_bits.is_some_and(|bits| bits < 2048) => ": RSA keys need 2048 bits or more",
        _ => "",
    }
}

const P256: &str = "ECDSA P-256";
const P384: &str = "ECDSA P-384";
const P521: &str = "ECDSA P-521";

/// `PrivateKeyInfo ::= SEQUENCE { version, privateKeyAlgorithm AlgorithmIdentifier,
/// privateKey OCTET STRING, ... }` (RFC 5208, RFC 5958).
fn pkcs8(der: &[u8]) -> Option<String> {
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
        "1.3.101.112" => "Ed25519".to_owned(),
        "1.3.101.113" => "Ed448".to_owned(),
        "2.16.840.1.101.3.4.3.17" => "ML-DSA-44".to_owned(),
        "2.16.840.1.101.3.4.3.18" => "ML-DSA-65".to_owned(),
        "2.16.840.1.101.3.4.3.19" => "ML-DSA-87".to_owned(),
        other => format!("a key of algorithm {other}"),
    })
}

/// `RSAPrivateKey ::= SEQUENCE { version, modulus INTEGER, ... }` (RFC 8017).
fn pkcs1(der: &[u8]) -> Option<String> {
    let key = sequence(der)?;
    let modulus = key.get(1).filter(|m| m.header.tag() == Tag::Integer)?;
    Some(format!("RSA {}", bits(modulus.data)))
}

/// `ECPrivateKey ::= SEQUENCE { version, privateKey OCTET STRING, [0] ECParameters
/// OPTIONAL, ... }` (RFC 5915): the curve named in `[0]`, else the key's length.
fn sec1(der: &[u8]) -> Option<String> {
    let key = sequence(der)?;
    let parameters = key
        .iter()
        .find(|e| e.header.class() == Class::ContextSpecific && e.header.tag() == Tag(0));
    if let Some(curve) = parameters.and_then(|e| oid(&Any::from_der(e.data).ok()?.1)) {
        return Some(named_curve(&curve));
    }
    let private_key = key.get(1).filter(|k| k.header.tag() == Tag::OctetString)?;
    Some(match private_key.data.len() {
        32 => P256.to_owned(),
        48 => P384.to_owned(),
        65 | 66 => P521.to_owned(),
        n => format!("an EC key of {n} bytes on a curve not named"),
    })
}

fn named_curve(oid: &str) -> String {
    match oid {
        "1.2.840.10045.3.1.7" => P256.to_owned(),
        "1.3.132.0.34" => P384.to_owned(),
        "1.3.132.0.35" => P521.to_owned(),
        other => format!("an EC key on curve {other}"),
    }
}

/// The elements of the DER `SEQUENCE` that `der` starts with.
fn sequence(der: &[u8]) -> Option<Vec<Any<'_>>> {
    sequence_of(&Any::from_der(der).ok()?.1)
}

/// The elements of `any`, when it is a `SEQUENCE`.
fn sequence_of<'a>(any: &Any<'a>) -> Option<Vec<Any<'a>>> {
    any.header.assert_tag(Tag::Sequence).ok()?;
    let elements = SequenceIterator::<Any<'a>, DerParser>::new(any.data);
    elements.collect::<Result<_, _>>().ok()
}

/// The dotted form of an `OBJECT IDENTIFIER`.
fn oid(any: &Any<'_>) -> Option<String> {
    (any.header.tag() == Tag::Oid).then(|| Oid::new(Cow::Borrowed(any.data)).to_id_string())
}

/// The size in bits of a positive `INTEGER`'s content (big-endian, maybe a leading zero).
fn bits(integer: &[u8]) -> usize {
    let zeros = integer.iter().take_while(|&&b| b == 0).count();
    match &integer[zeros..] {
        [first, rest @ ..] => rest.len().saturating_mul(8) + (8 - first.leading_zeros() as usize),
        [] => 0,
    }
}

#[cfg(test)]
mod tests;
