use std::future::poll_fn;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use tokio::io::{AsyncReadExt, AsyncWriteExt, BufWriter, DuplexStream};

use super::*;
use crate::test_support::pki::Ca;
use crate::tls::RootStore;

async fn stores() -> Stores {
    let pem = Ca::new("kubernetes").pem();
    let source = crate::test_support::pem("ca", pem);
    let roots = RootStore::builder(source).load().await.unwrap();
    Stores {
        identity: None,
        roots,
    }
}

async fn tagged<T>(io: T) -> Tagged<T> {
    let stores = stores().await;
    Tagged {
        io,
        dialled: Dialled {
            generations: stores.generations(),
            state: Arc::default(),
        },
        stores: Arc::new(stores),
    }
}

/// A connection whose next read fails with `error`.
struct Failing(Option<io::Error>);

impl Read for Failing {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        _: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Poll::Ready(self.0.take().map_or(Ok(()), Err))
    }
}

/// Takes every write whole, one slice at a time (hyper's default).
impl Write for Failing {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(Ok(buf.len()))
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

async fn read<T: Read + Unpin>(io: &mut Tagged<T>) -> io::Result<()> {
    let mut bytes = [0; 16];
    let mut buf = hyper::rt::ReadBuf::new(&mut bytes);
    poll_fn(|cx| Pin::new(&mut *io).poll_read(cx, buf.unfilled())).await
}

#[test]
fn a_connection_may_be_refused_until_it_answers() {
    let dialled = Dialled {
        generations: Generations {
            identity: 1,
            roots: 1,
        },
        state: Arc::default(),
    };
    // Failed before the server sent anything: over TLS 1.3, maybe a refusal.
    assert_eq!(dialled.verdict(), Verdict::Unanswered);
    dialled.answered();
    assert_eq!(dialled.verdict(), Verdict::Answered);
    // Its clones (in each response's extensions) share what it learnt.
    let clone = dialled.clone();
    clone.answered();
    assert_eq!(dialled.verdict(), Verdict::Answered);
    assert_eq!(dialled.state.load(Ordering::Relaxed), ANSWERED);
}

#[tokio::test]
async fn a_certificate_alert_read_marks_the_connection_refused_even_after_an_answer() {
    let alert = io::Error::new(
        io::ErrorKind::InvalidData,
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired),
    );
    let mut io = tagged(Failing(Some(alert))).await;
    io.dialled.answered();
    assert_eq!(io.dialled.verdict(), Verdict::Answered);
    let err = read(&mut io).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::InvalidData);
    assert_eq!(io.dialled.verdict(), Verdict::Refused);

    // Any other failure of a connection that answered is no refusal.
    for error in [
        io::Error::from(io::ErrorKind::ConnectionReset),
        io::Error::other(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        )),
    ] {
        let mut io = tagged(Failing(Some(error))).await;
        io.dialled.answered();
        read(&mut io).await.unwrap_err();
        assert_eq!(io.dialled.verdict(), Verdict::Answered);
    }
    // A read that succeeds changes nothing either.
    let mut io = tagged(Failing(None)).await;
    read(&mut io).await.unwrap();
    assert_eq!(io.dialled.verdict(), Verdict::Unanswered);
}

async fn write_all<T: Write + Unpin>(io: &mut Tagged<T>, mut bytes: &[u8]) {
    while !bytes.is_empty() {
        let n = poll_fn(|cx| Pin::new(&mut *io).poll_write(cx, bytes))
            .await
            .unwrap();
        assert!(n > 0);
        bytes = &bytes[n..];
    }
}

async fn read_exact(peer: &mut DuplexStream, n: usize) -> Vec<u8> {
    let mut got = vec![0; n];
    tokio::time::timeout(Duration::from_secs(5), peer.read_exact(&mut got))
        .await
        .expect("the bytes arrive")
        .unwrap();
    got
}

#[tokio::test]
async fn writes_flushes_and_the_shutdown_reach_the_connection_under_it() {
    // Buffered: the bytes reach the peer only when the flush does.
    let (ours, mut peer) = tokio::io::duplex(1024);
    let mut io = tagged(TokioIo::new(BufWriter::new(ours))).await;
    assert!(io.is_write_vectored());
    write_all(&mut io, b"GET / HTTP/1.1\r\n").await;
    let slices = [io::IoSlice::new(b"a: 1\r\n"), io::IoSlice::new(b"\r\n")];
    let n = poll_fn(|cx| Pin::new(&mut io).poll_write_vectored(cx, &slices))
        .await
        .unwrap();
    assert_eq!(n, 8);
    poll_fn(|cx| Pin::new(&mut io).poll_flush(cx))
        .await
        .unwrap();
    assert_eq!(
        read_exact(&mut peer, 24).await,
        b"GET / HTTP/1.1\r\na: 1\r\n\r\n"
    );

    // A connection without vectored writes says so through the tag too.
    assert!(!tagged(Failing(None)).await.is_write_vectored());

    // The shutdown is the peer's end of stream.
    let (ours, mut peer) = tokio::io::duplex(1024);
    let mut io = tagged(TokioIo::new(ours)).await;
    write_all(&mut io, b"bye").await;
    poll_fn(|cx| Pin::new(&mut io).poll_shutdown(cx))
        .await
        .unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), peer.read_to_end(&mut rest))
        .await
        .expect("the end of stream arrives")
        .unwrap();
    assert_eq!(rest, b"bye");
    let _ = peer.shutdown().await;
}

/// A connector that is ready only when told.
#[derive(Clone)]
struct Gate(Arc<std::sync::atomic::AtomicBool>);

impl Service<Uri> for Gate {
    type Response = ();
    type Error = io::Error;
    type Future = std::future::Ready<io::Result<()>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.0.load(Ordering::Relaxed) {
            Poll::Ready(Ok(()))
        } else {
            Poll::Pending
        }
    }

    fn call(&mut self, _: Uri) -> Self::Future {
        std::future::ready(Ok(()))
    }
}

#[tokio::test]
async fn tagging_is_ready_when_the_connector_under_it_is() {
    let open = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut tagging = Tagging {
        inner: Gate(open.clone()),
        stores: Arc::new(stores().await),
    };
    let waker = std::task::Waker::noop();
    let mut cx = Context::from_waker(waker);
    assert!(tagging.poll_ready(&mut cx).is_pending());
    open.store(true, Ordering::Relaxed);
    assert!(matches!(tagging.poll_ready(&mut cx), Poll::Ready(Ok(()))));
}
