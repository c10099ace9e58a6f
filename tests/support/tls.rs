//! A CA and a server certificate for 127.0.0.1, made at start with rcgen, and the rustls
//! (ring) configurations of a server and a client that trusts the CA.
//!
//! Self-contained, so that examples can include it with
//! `#[path = "../tests/support/tls.rs"] mod tls;`.
#![allow(dead_code, unreachable_pub)]

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

/// Installs ring as rustls's process-wide provider, for the TLS of kube, tonic and reqwest,
/// which take the process default: with every feature on, rustls has both ring and
/// aws-lc-rs and picks neither by itself. (This crate's own TLS needs none.)
pub fn install_ring() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// A CA and a server certificate it signed for `127.0.0.1` and `localhost`.
pub struct TestCa {
    ca_der: Vec<u8>,
    ca_pem: String,
    cert_der: Vec<u8>,
    cert_pem: String,
    key_der: Vec<u8>,
    key_pem: String,
}

impl TestCa {
    pub fn new() -> Self {
        let ca_key = KeyPair::generate().unwrap();
        let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
        ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        ca.distinguished_name
            .push(DnType::CommonName, "bearer-reload test CA");
        ca.key_usages = vec![
            KeyUsagePurpose::KeyCertSign,
            KeyUsagePurpose::CrlSign,
            KeyUsagePurpose::DigitalSignature,
        ];
        let ca_cert = ca.self_signed(&ca_key).unwrap();

        let key = KeyPair::generate().unwrap();
        let mut server =
            CertificateParams::new(vec!["127.0.0.1".to_owned(), "localhost".to_owned()]).unwrap();
        server
            .distinguished_name
            .push(DnType::CommonName, "bearer-reload test server");
        server.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
        let cert = server.signed_by(&key, &ca_cert, &ca_key).unwrap();
        Self {
            ca_der: ca_cert.der().to_vec(),
            ca_pem: ca_cert.pem(),
            cert_der: cert.der().to_vec(),
            cert_pem: cert.pem(),
            key_der: key.serialize_der(),
            key_pem: key.serialize_pem(),
        }
    }

    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    pub fn cert_pem(&self) -> &str {
        &self.cert_pem
    }

    pub fn key_pem(&self) -> &str {
        &self.key_pem
    }

    /// A server configuration (ring) offering h2 and http/1.1.
    pub fn server_config(&self) -> rustls::ServerConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(self.cert_der.clone())],
                PrivatePkcs8KeyDer::from(self.key_der.clone()).into(),
            )
            .unwrap();
        config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
        config
    }

    pub fn acceptor(&self) -> tokio_rustls::TlsAcceptor {
        tokio_rustls::TlsAcceptor::from(Arc::new(self.server_config()))
    }

    /// A client configuration (ring) that trusts only this CA.
    pub fn client_config(&self) -> rustls::ClientConfig {
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut roots = rustls::RootCertStore::empty();
        roots
            .add(CertificateDer::from(self.ca_der.clone()))
            .unwrap();
        rustls::ClientConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth()
    }
}

impl Default for TestCa {
    fn default() -> Self {
        Self::new()
    }
}
