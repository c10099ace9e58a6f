//! The connector under an [`HttpsClient`](super::HttpsClient)'s pools: each connection is
//! tagged with the credentials' generations it was dialled under, and one whose handshake
//! ended after they changed is poisoned as it is handed over, so that hyper-util's pool
//! does not reuse it. Each connection also tells its requests' errors what it was made
//! with, and whether the server refused it: a request on it may fail with no more than
//! "channel closed".

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, ready};

use std::time::Duration;

use http::Uri;
use http::uri::Scheme;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_rustls::{FixedServerNameResolver, HttpsConnector, HttpsConnectorBuilder};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::connect::{Connected, Connection};
use pin_project_lite::pin_project;
use rustls::pki_types::ServerName;
use tower_service::Service;

use super::error::RequestError;
use super::refusal::{Blame, blame};
use super::stores::{Generations, Stores};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// What a connector's connections carry.
#[derive(Debug, Clone, Copy)]
pub(crate) enum Serves {
    /// HTTP/1.1 and HTTP/2 as the server chooses by ALPN.
    Any,
    /// HTTP/2 alone (gRPC).
    #[cfg_attr(
        not(feature = "tonic"),
        expect(dead_code, reason = "feature tonic's TlsChannel")
    )]
    Http2,
}

/// The TCP and TLS connector of a client with `stores`: TLS with their current
/// credentials, the server verified as `server_name` (else each URI's host) says, TCP with
/// `TCP_NODELAY` and `connect_timeout`.
pub(crate) fn https_connector(
    stores: &Stores,
    server_name: Option<ServerName<'static>>,
    connect_timeout: Option<Duration>,
    serves: Serves,
) -> HttpsConnector<HttpConnector> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(connect_timeout);
    // A credential never goes out in plain text: an `http` URI is refused (and
    // `HttpsOnly` above says so by name first).
    let tls = HttpsConnectorBuilder::new()
        .with_tls_config(stores.client_config())
        .https_only();
    let tls = match server_name {
        Some(name) => tls.with_server_name_resolver(FixedServerNameResolver::new(name)),
        None => tls,
    };
    let tls = match serves {
        Serves::Any => tls.enable_all_versions(),
        Serves::Http2 => tls.enable_http2(),
    };
    tls.wrap_connector(http)
}

/// Refuses a URI that is not `https` before anything is dialled, with an error that
/// names it: the request would carry the token the layer above put on it, and the
/// client's certificate stands for TLS.
#[derive(Debug, Clone)]
pub(crate) struct HttpsOnly<C>(pub(crate) C);

impl<C> Service<Uri> for HttpsOnly<C>
where
    C: Service<Uri, Error = BoxError>,
    C::Response: Send + 'static,
    C::Future: Send + 'static,
{
    type Response = C::Response;
    type Error = BoxError;
    // Boxed: once a dial, which a TCP and TLS handshake dwarf.
    type Future = Pin<Box<dyn Future<Output = Result<C::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        if uri.scheme() != Some(&Scheme::HTTPS) {
            return Box::pin(std::future::ready(Err(
                RequestError::NotHttps { uri }.into()
            )));
        }
        Box::pin(self.0.call(uri))
    }
}

/// Tags the connections of `inner` with the generations of `stores`.
#[derive(Debug, Clone)]
pub(crate) struct Tagging<C> {
    pub(crate) inner: C,
    /// Shared: hyper-util clones its connector for every request.
    pub(crate) stores: Arc<Stores>,
}

impl<C: Service<Uri>> Service<Uri> for Tagging<C> {
    type Response = Tagged<C::Response>;
    type Error = C::Error;
    type Future = Dialling<C::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // Read before the handshake, which reads the credentials after: a connection is
        // never tagged newer than what it presented.
        let tag = self.stores.generations();
        Dialling {
            fut: self.inner.call(uri),
            tag,
            stores: Some(self.stores.clone()),
        }
    }
}

pin_project! {
    /// A connection being made.
    pub(crate) struct Dialling<F> {
        #[pin]
        fut: F,
        tag: Generations,
        stores: Option<Arc<Stores>>,
    }
}

impl<F: Future<Output = Result<T, E>>, T, E> Future for Dialling<F> {
    type Output = Result<Tagged<T>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        let io = ready!(this.fut.poll(cx))?;
        Poll::Ready(Ok(Tagged {
            io,
            dialled: Dialled {
                generations: *this.tag,
                state: Arc::default(),
            },
            stores: this.stores.take().expect("polled after completion"),
        }))
    }
}

/// What a connection tells about itself, in hyper-util's `Connected::extra` (so in the
/// errors of requests sent on it, and in their responses' extensions).
#[derive(Debug, Clone)]
pub(crate) struct Dialled {
    /// The generations it was made under.
    pub(crate) generations: Generations,
    state: Arc<AtomicU8>,
}

/// A response came back on it.
const ANSWERED: u8 = 1;
/// The server refused the client certificate (an alert read).
const REFUSED: u8 = 2;

/// What a failed connection's history says of a failure on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The server refused the client certificate: an alert was read.
    Refused,
    /// It failed before the server answered anything: over TLS 1.3 the refusal comes
    /// after the client's handshake, and a request can fail writing to the closed
    /// connection before it reads the alert; a server that crashed looks the same.
    Unanswered,
    /// It answered before: whatever ended it, it was not a refusal of its certificate.
    Answered,
}

impl Dialled {
    /// What this connection's history says of a failure on it.
    pub(crate) fn verdict(&self) -> Verdict {
        // "Answered" is marked from the responses, not from reads: the end of the stream
        // reads as `Ok` too, and a server that refused may close without an alert.
        let state = self.state.load(Ordering::Acquire);
        if state & REFUSED != 0 {
            Verdict::Refused
        } else if state & ANSWERED == 0 {
            Verdict::Unanswered
        } else {
            Verdict::Answered
        }
    }

    /// A response came back on this connection: it was not refused.
    pub(crate) fn answered(&self) {
        if self.state.load(Ordering::Relaxed) & ANSWERED == 0 {
            self.state.fetch_or(ANSWERED, Ordering::Release);
        }
    }
}

pin_project! {
    /// A connection and the generations it was dialled under.
    pub(crate) struct Tagged<T> {
        #[pin]
        io: T,
        dialled: Dialled,
        stores: Arc<Stores>,
    }
}

impl<T: Connection> Connection for Tagged<T> {
    fn connected(&self) -> Connected {
        let connected = self.io.connected().extra(self.dialled.clone());
        if self.stores.generations() != self.dialled.generations {
            // Made with credentials that rotated during its handshake: for the request
            // that dialled it only.
            connected.poison();
        }
        connected
    }
}

impl<T: Read> Read for Tagged<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let read = ready!(this.io.poll_read(cx, buf));
        match &read {
            // Over TLS 1.3 the server's verdict on the client certificate comes after the
            // client's handshake, as an alert on the first read; hyper's HTTP/2 connection
            // then ends, and its requests learn only that the channel closed.
            Err(e) if blame(e) == Some(Blame::Identity) => {
                this.dialled.state.fetch_or(REFUSED, Ordering::Release);
            }
            _ => {}
        }
        Poll::Ready(read)
    }
}

impl<T: Write> Write for Tagged<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().io.poll_write_vectored(cx, bufs)
    }
}

#[cfg(test)]
mod tests {
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
}
