//! Token reload through a `kube::Client` whose TLS is kube's `rustls-tls` with `aws-lc-rs`:
//! the application's kube chose its TLS, and a client built by
//! `bearer_reload::kube::Credentials` keeps it.
//!
//! The server offers only the post-quantum key exchange `X25519MLKEM768`, which aws-lc-rs
//! has and ring has not: a request answered at all went out over aws-lc-rs.

use std::convert::Infallible;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bearer_reload::kube::Credentials;
use bearer_reload::testing::ProjectedTokenDir;
use http::{Request, Response, StatusCode};
use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, IsCa, KeyPair};
use rustls::crypto::aws_lc_rs;
use rustls::pki_types::{CertificateDer, PrivatePkcs8KeyDer};

const DEADLINE: Duration = Duration::from_secs(10);

/// The token the server accepts, and the tokens it received, in order.
#[derive(Default)]
struct Tokens {
    accepted: String,
    seen: Vec<String>,
}

/// An HTTPS server for 127.0.0.1 that answers 200 to the accepted bearer token and 401 to
/// any other. Returns its address and its CA, PEM.
async fn serve(tokens: Arc<Mutex<Tokens>>) -> (std::net::SocketAddr, String) {
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = ca.self_signed(&ca_key).unwrap();
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .unwrap()
        .signed_by(&key, &ca, &ca_key)
        .unwrap();

    let provider = rustls::crypto::CryptoProvider {
        kx_groups: vec![aws_lc_rs::kx_group::X25519MLKEM768],
        ..aws_lc_rs::default_provider()
    };
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(provider))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(
            vec![CertificateDer::from(cert.der().to_vec())],
            PrivatePkcs8KeyDer::from(key.serialize_der()).into(),
        )
        .unwrap();
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));

    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        loop {
            let (tcp, _) = listener.accept().await.unwrap();
            let (acceptor, tokens) = (acceptor.clone(), tokens.clone());
            tokio::spawn(async move {
                // A handshake with no common key exchange ends here: the client sees it fail.
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let answer = move |request: Request<Incoming>| {
                    let tokens = tokens.clone();
                    async move {
                        let token = request
                            .headers()
                            .get(http::header::AUTHORIZATION)
                            .and_then(|v| v.to_str().ok())
                            .and_then(|v| v.strip_prefix("Bearer "))
                            .unwrap_or_default()
                            .to_owned();
                        let mut tokens = tokens.lock().unwrap();
                        let status = if token == tokens.accepted {
                            StatusCode::OK
                        } else {
                            StatusCode::UNAUTHORIZED
                        };
                        tokens.seen.push(token);
                        let body = if status == StatusCode::OK {
                            r#"{"kind":"Status","status":"Success"}"#
                        } else {
                            r#"{"kind":"Status","status":"Failure","code":401,"reason":"Unauthorized"}"#
                        };
                        Ok::<_, Infallible>(
                            Response::builder()
                                .status(status)
                                .header(http::header::CONTENT_TYPE, "application/json")
                                .body(Full::new(Bytes::from_static(body.as_bytes())))
                                .unwrap(),
                        )
                    }
                };
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), hyper::service::service_fn(answer))
                    .await;
            });
        }
    });
    (addr, ca.pem())
}

/// One GET through `client`: the status the server answered with.
async fn get(client: &kube::Client) -> Result<String, kube::Error> {
    let request = Request::get("/version").body(Vec::new()).unwrap();
    tokio::time::timeout(DEADLINE, client.request_text(request))
        .await
        .expect("deadline")
}

#[tokio::test]
async fn a_token_reloads_through_kube_over_rustls_with_aws_lc_rs() {
    let tokens = Arc::new(Mutex::new(Tokens {
        accepted: "token-one".to_owned(),
        seen: Vec::new(),
    }));
    let (addr, ca_pem) = serve(tokens.clone()).await;
    let dir = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(dir.path().join("serviceaccount"), "token-one").unwrap();

    let mut config = kube::Config::new(format!("https://{addr}").parse().unwrap());
    config.root_cert = Some(vec![der_of(&ca_pem)]);
    config.auth_info.token_file = Some(volume.token_path().display().to_string());
    let store = Credentials::token_store_builder(&config)
        .unwrap()
        .expect("a token file")
        // Only the 401 reloads: the test decides when the new token is read.
        .no_watch()
        .no_periodic_refresh()
        .load()
        .await
        .unwrap();
    let client = Credentials::from(store.clone()).client(config).unwrap();

    get(&client).await.unwrap();
    assert_eq!(tokens.lock().unwrap().seen, ["token-one"]);

    // The kubelet rotates the token and the server refuses the old one from now on.
    volume.rotate("token-two").unwrap();
    tokens.lock().unwrap().accepted = "token-two".to_owned();
    get(&client).await.unwrap();
    assert_eq!(
        tokens.lock().unwrap().seen,
        ["token-one", "token-one", "token-two"],
        "the 401 reloads the token and the request goes again with the new one"
    );
    assert_eq!(store.status().unauthorized_reloads, 1);
}

/// The server's choice is what proves the client's provider: a client without
/// `X25519MLKEM768` (as ring's is) gets no answer from it.
#[tokio::test]
async fn the_server_answers_no_client_without_the_post_quantum_exchange() {
    let tokens = Arc::new(Mutex::new(Tokens::default()));
    let (addr, ca_pem) = serve(tokens).await;
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from(der_of(&ca_pem))).unwrap();
    let connect = |kx_groups| {
        let provider = rustls::crypto::CryptoProvider {
            kx_groups,
            ..aws_lc_rs::default_provider()
        };
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(provider))
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots.clone())
            .with_no_client_auth();
        async move {
            let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
            let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
            tokio::time::timeout(
                DEADLINE,
                tokio_rustls::TlsConnector::from(Arc::new(config)).connect(name, tcp),
            )
            .await
            .expect("deadline")
        }
    };
    connect(vec![aws_lc_rs::kx_group::X25519MLKEM768])
        .await
        .expect("the post-quantum exchange is served");
    let err = connect(vec![
        aws_lc_rs::kx_group::X25519,
        aws_lc_rs::kx_group::SECP256R1,
    ])
    .await
    .expect_err("no common key exchange");
    assert_eq!(
        err.get_ref()
            .and_then(|e| e.downcast_ref::<rustls::Error>()),
        Some(&rustls::Error::AlertReceived(
            rustls::AlertDescription::HandshakeFailure
        )),
        "{err}"
    );
}

/// The DER of the one certificate in `pem`, as kube keeps a CA.
fn der_of(pem: &str) -> Vec<u8> {
    use rustls::pki_types::pem::PemObject;
    CertificateDer::from_pem_slice(pem.as_bytes())
        .unwrap()
        .to_vec()
}
