//! Servers that stall: one that takes TCP connections and never speaks TLS (a load
//! balancer whose backend hangs), one that reads a request over TLS and never answers.

use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};
use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;

use super::pki::Issued;

/// A stalled server on a loopback port, which holds every connection it takes until it
/// is dropped.
pub struct Stalled {
    port: u16,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Stalled {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Stalled {
    /// Accepts TCP and never sends a byte.
    pub async fn before_tls() -> Self {
        Self::serve(None).await
    }

    /// Completes the TLS handshake as `server` (choosing no protocol by ALPN, as a server
    /// of HTTP/1.1 alone may), reads the request, and never answers.
    pub async fn after_request(server: &Issued) -> Self {
        Self::serve(Some(server)).await
    }

    async fn serve(server: Option<&Issued>) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let acceptor = server.map(|server| {
            let provider = Arc::new(rustls::crypto::ring::default_provider());
            let config = rustls::ServerConfig::builder_with_provider(provider)
                .with_safe_default_protocol_versions()
                .unwrap()
                .with_no_client_auth()
                .with_single_cert(
                    vec![CertificateDer::from(server.cert_der.clone())],
                    PrivatePkcs8KeyDer::from(server.key_der.clone()).into(),
                )
                .unwrap();
            tokio_rustls::TlsAcceptor::from(Arc::new(config))
        });
        let task = tokio::spawn(async move {
            let mut held = tokio::task::JoinSet::new();
            while let Ok((tcp, _)) = listener.accept().await {
                let acceptor = acceptor.clone();
                held.spawn(async move {
                    let Some(acceptor) = acceptor else {
                        return std::future::pending::<()>().await;
                    };
                    // A client certificate or none: the server asks for none.
                    if let Ok(mut tls) = acceptor.accept(tcp).await {
                        let mut buf = [0; 4096];
                        while matches!(tls.read(&mut buf).await, Ok(n) if n > 0) {}
                    }
                });
            }
        });
        Self { port, task }
    }

    /// `https://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("https://127.0.0.1:{}", self.port)
    }
}
