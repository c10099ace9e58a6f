//! Certificates made at test time with rcgen: a CA, the client and server certificates it
//! issues, with the validity a test asks for.
//!
//! Self-contained, so that the crate's unit tests and the examples can include it with
//! `#[path = "../tests/support/pki.rs"] mod pki;`.
#![allow(dead_code, unreachable_pub)]

use std::time::{Duration, SystemTime};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

/// A certificate authority.
pub struct Ca {
    key: KeyPair,
    cert: rcgen::Certificate,
    /// The PEM of the intermediates from this authority up to its root, itself first;
    /// empty for a root.
    chain_pem: String,
}

/// A certificate an authority issued, and its key.
#[derive(Clone)]
pub struct Issued {
    pub cert_pem: String,
    /// The intermediates between the certificate and the root, nearest first (empty when
    /// a root issued it).
    pub chain_pem: String,
    pub key_pem: String,
    pub cert_der: Vec<u8>,
    pub key_der: Vec<u8>,
}

impl Issued {
    /// The certificate and its key in one PEM, as the kubelet writes
    /// `kubelet-client-<date>.pem`.
    pub fn combined(&self) -> String {
        format!("{}{}", self.cert_pem, self.key_pem)
    }

    /// The key, then the chain leaf first, in one PEM: a pod certificate's
    /// `credentialBundlePath` file as the kubelet writes it.
    pub fn credential_bundle(&self) -> String {
        format!("{}{}{}", self.key_pem, self.cert_pem, self.chain_pem)
    }

    /// The chain, leaf first: a pod certificate's `certificateChainPath` file.
    pub fn chain(&self) -> String {
        format!("{}{}", self.cert_pem, self.chain_pem)
    }

    /// The SHA-256 of the certificate, as `openssl x509 -fingerprint -sha256` prints it.
    pub fn fingerprint(&self) -> String {
        fingerprint(&self.cert_der)
    }
}

/// `AB:CD:...` of the SHA-256 of `der`.
pub fn fingerprint(der: &[u8]) -> String {
    use sha2::Digest as _;
    sha2::Sha256::digest(der)
        .iter()
        .map(|b| format!("{b:02X}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `at` as rcgen takes it.
fn time(at: SystemTime) -> time::OffsetDateTime {
    time::OffsetDateTime::from(at)
}

impl Ca {
    /// A self-signed CA named `name`, valid from an hour ago for ten years.
    pub fn new(name: &str) -> Self {
        let now = SystemTime::now();
        let ten_years = Duration::from_secs(10 * 365 * 86_400);
        Self::valid(name, now - Duration::from_secs(3600), now + ten_years)
    }

    /// A self-signed CA named `name`, valid from `not_before` to `not_after`.
    pub fn valid(name: &str, not_before: SystemTime, not_after: SystemTime) -> Self {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        params.not_before = time(not_before);
        params.not_after = time(not_after);
        let cert = params.self_signed(&key).unwrap();
        Self {
            key,
            cert,
            chain_pem: String::new(),
        }
    }

    /// An intermediate authority named `name` that this one signed, valid from an hour
    /// ago for a year.
    pub fn intermediate(&self, name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        params.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let now = SystemTime::now();
        params.not_before = time(now - Duration::from_secs(3600));
        params.not_after = time(now + Duration::from_secs(365 * 86_400));
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        let chain_pem = format!("{}{}", cert.pem(), self.chain_pem);
        Ca {
            key,
            cert,
            chain_pem,
        }
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    pub fn der(&self) -> Vec<u8> {
        self.cert.der().to_vec()
    }

    /// A client certificate for `common_name` (and organization `system:nodes`), valid
    /// from a minute ago for `lifetime`.
    pub fn client(&self, common_name: &str, lifetime: Duration) -> Issued {
        let now = SystemTime::now();
        self.client_valid(common_name, now - Duration::from_secs(60), now + lifetime)
    }

    /// A client certificate for `common_name` valid from `not_before` to `not_after`.
    pub fn client_valid(
        &self,
        common_name: &str,
        not_before: SystemTime,
        not_after: SystemTime,
    ) -> Issued {
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params
            .distinguished_name
            .push(DnType::OrganizationName, "system:nodes");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = time(not_before);
        params.not_after = time(not_after);
        self.issue(params, KeyPair::generate().unwrap())
    }

    /// A client certificate for `common_name` on `key` (of any type rcgen makes), valid
    /// from a minute ago for `lifetime`.
    pub fn client_with_key(&self, common_name: &str, lifetime: Duration, key: KeyPair) -> Issued {
        let now = SystemTime::now();
        let mut params = CertificateParams::new(Vec::<String>::new()).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, common_name);
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        params.not_before = time(now - Duration::from_secs(60));
        params.not_after = time(now + lifetime);
        self.issue(params, key)
    }

    /// A server certificate for `127.0.0.1` and `localhost`, valid for a year.
    pub fn server(&self) -> Issued {
        let mut params =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        params
            .distinguished_name
            .push(DnType::CommonName, "bearer-reload test server");
        params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let now = SystemTime::now();
        params.not_before = time(now - Duration::from_secs(3600));
        params.not_after = time(now + Duration::from_secs(365 * 86_400));
        self.issue(params, KeyPair::generate().unwrap())
    }

    fn issue(&self, params: CertificateParams, key: KeyPair) -> Issued {
        let cert = params.signed_by(&key, &self.cert, &self.key).unwrap();
        Issued {
            cert_pem: cert.pem(),
            chain_pem: self.chain_pem.clone(),
            key_pem: key.serialize_pem(),
            cert_der: cert.der().to_vec(),
            key_der: key.serialize_der(),
        }
    }
}

/// A CA bundle of `count` self-signed roots of about `each` bytes of PEM apiece (padded with
/// DNS names): a system bundle (Debian's: 140 roots, about 220 KB), or a corporate one past
/// 1 MB. One key signs them all, to keep it quick.
pub fn bundle(count: usize, each: usize) -> String {
    let key = KeyPair::generate().unwrap();
    // A bare root is about 560 bytes of PEM; a DNS name of 40 bytes adds about 57.
    let names = each.saturating_sub(560) / 57;
    let mut pem = String::with_capacity(count * each);
    for i in 0..count {
        let sans: Vec<String> = (0..names)
            .map(|j| format!("root-{i:04}-name-{j:04}.bundle.example.test"))
            .collect();
        let mut params = CertificateParams::new(sans).unwrap();
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params
            .distinguished_name
            .push(DnType::CommonName, format!("root {i}"));
        pem.push_str(&params.self_signed(&key).unwrap().pem());
    }
    pem
}
