use super::*;
use crate::test_support::pki::Ca;

use hyper_util::client::legacy::connect::{Connected, Connection};
use hyper_util::rt::TokioIo;
use tokio::io::DuplexStream;

/// A connection whose first read fails, as a TLS 1.3 client's does with the server's
/// alert when the server refused its certificate after the handshake.
struct HangsUp(TokioIo<DuplexStream>);

impl hyper::rt::Read for HangsUp {
    fn poll_read(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: hyper::rt::ReadBufCursor<'_>,
    ) -> Poll<std::io::Result<()>> {
        Poll::Ready(Err(std::io::Error::other("alert")))
    }
}

impl hyper::rt::Write for HangsUp {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.0).poll_write(cx, buf)
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.0).poll_shutdown(cx)
    }
}

impl Connection for HangsUp {
    fn connected(&self) -> Connected {
        Connected::new()
    }
}

type Dial = Pin<Box<dyn Future<Output = std::io::Result<HangsUp>> + Send>>;

async fn send(dial: fn() -> Dial) -> Outcome {
    let connector = tower::service_fn(move |_: http::Uri| dial());
    let client = Client::builder(TokioExecutor::new())
        .http2_only(true)
        .build::<_, Empty<Bytes>>(connector);
    let request = Request::get("http://localhost/")
        .body(Empty::new())
        .unwrap();
    client.request(request).await
}

/// A closed handshake is the one error without connection info that may be a
/// refusal (seen in `tests/providers/tls.rs`, where the server's alert races hyper's HTTP/2
/// handshake); a dial that failed, or a request cancelled on a connection hyper-util
/// had pooled, is not one.
#[tokio::test]
async fn a_failed_dial_or_a_pooled_connections_failure_is_no_closed_handshake() {
    // The server still there: the request is pooled, then cancelled.
    let outcome = send(|| {
        Box::pin(async {
            let (ours, theirs) = tokio::io::duplex(1024);
            tokio::spawn(async move {
                let _open = theirs;
                std::future::pending::<()>().await
            });
            Ok(HangsUp(TokioIo::new(ours)))
        })
    })
    .await;
    let error = outcome.as_ref().unwrap_err();
    assert!(error.connect_info().is_some(), "{error:?}");
    assert!(!closed_before_pooled(error));

    // Gone already: hyper's handshake fails writing, an I/O error, not a closed channel.
    let outcome = send(|| {
        Box::pin(async {
            let (ours, _) = tokio::io::duplex(1024);
            Ok(HangsUp(TokioIo::new(ours)))
        })
    })
    .await;
    let error = outcome.as_ref().unwrap_err();
    assert!(error.connect_info().is_none(), "{error:?}");
    assert!(!closed_before_pooled(error));

    let outcome = send(|| {
        Box::pin(async { Err(std::io::Error::from(std::io::ErrorKind::ConnectionRefused)) })
    })
    .await;
    let error = outcome.as_ref().unwrap_err();
    assert!(error.is_connect() && !closed_before_pooled(error));
    assert!(refusal(&outcome).is_none());
}

#[tokio::test]
async fn debug_shows_the_credentials_and_the_generations_of_the_pool_in_use() {
    let pem = Ca::new("kubernetes").pem();
    let source = crate::test_support::pem("ca", pem);
    let roots = RootStore::builder(source).load().await.unwrap();
    let client = HttpsClient::<Empty<Bytes>>::new(roots);
    let shown = format!("{client:?}");
    assert!(
        shown.starts_with("HttpsClient { identity: None, roots: RootStore { source: \"loader ca\""),
        "{shown}"
    );
    assert!(
        shown.ends_with("generations: Generations { identity: 0, roots: 1 }, .. }"),
        "{shown}"
    );
}

/// A rotation makes one new pool, whichever store rotated; a clone that sees the same
/// generations late, or older ones, takes the current pool and makes none (every pool is
/// a new set of connections).
#[tokio::test]
async fn a_pool_is_made_for_newer_generations_only() {
    let pem = Ca::new("kubernetes").pem();
    let roots = RootStore::builder(crate::test_support::pem("ca", pem))
        .load()
        .await
        .unwrap();
    let client = HttpsClient::<Empty<Bytes>>::new(roots);
    let generations = |identity, roots| Generations { identity, roots };
    let pool_for = |identity, roots| client.shared.pool_for(generations(identity, roots));
    let first = client.shared.pool_now();
    assert_eq!(first.generations, generations(0, 1));
    assert!(Arc::ptr_eq(&pool_for(0, 1), &first), "the same generations");
    assert!(Arc::ptr_eq(&pool_for(0, 0), &first), "older generations");

    let bundle = pool_for(0, 2);
    assert!(!Arc::ptr_eq(&bundle, &first), "a newer bundle");
    assert_eq!(bundle.generations, generations(0, 2));
    let identity = pool_for(1, 2);
    assert!(!Arc::ptr_eq(&identity, &bundle), "a newer identity");
    assert_eq!(identity.generations, generations(1, 2));
}
