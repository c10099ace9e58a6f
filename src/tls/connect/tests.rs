use std::time::Duration;

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

fn no_proxy() -> Arc<Matcher> {
    Arc::new(Matcher::builder().build())
}

/// `io` tagged as an HTTP/1.1 connection is.
async fn tagged<T>(io: T) -> Tagged<T> {
    let stores = stores().await;
    Tagged {
        io,
        answers: Answers::Bytes,
        dialled: Dialled {
            generations: stores.generations(),
            state: Arc::default(),
        },
        tagging: Tagging::new(
            https_connector(&stores, None, no_proxy(), Serves::Any),
            stores,
        ),
    }
}

/// A connection whose reads give, in turn, what it was made with (bytes, the end of the
/// stream, an error), and whose writes fail with `write_error` once set.
#[derive(Default)]
struct Scripted {
    reads: std::collections::VecDeque<io::Result<&'static [u8]>>,
    write_error: Option<io::ErrorKind>,
}

impl Scripted {
    fn reads(reads: impl IntoIterator<Item = io::Result<&'static [u8]>>) -> Self {
        Scripted {
            reads: reads.into_iter().collect(),
            write_error: None,
        }
    }
}

impl AsyncRead for Scripted {
    fn poll_read(
        mut self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let next = self.reads.pop_front().unwrap_or(Ok(b""));
        Poll::Ready(next.map(|bytes| buf.put_slice(bytes)))
    }
}

impl AsyncWrite for Scripted {
    fn poll_write(
        self: Pin<&mut Self>,
        _: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Poll::Ready(
            self.write_error
                .map_or(Ok(buf.len()), |kind| Err(kind.into())),
        )
    }

    fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(self.write_error.map_or(Ok(()), |kind| Err(kind.into())))
    }

    fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
        Poll::Ready(Ok(()))
    }
}

/// One read: how many bytes it gave, or its error.
async fn read<T: AsyncRead + Unpin>(io: &mut Tagged<T>) -> io::Result<usize> {
    let mut bytes = [0; 16];
    io.read(&mut bytes).await
}

fn alert() -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        rustls::Error::AlertReceived(rustls::AlertDescription::CertificateRequired),
    )
}

/// The generations an error says its connection ended unanswered under.
fn unanswered(error: &io::Error) -> Option<Generations> {
    Unanswered::find(error).map(|u| u.generations)
}

#[tokio::test]
async fn a_connection_is_answered_by_the_first_bytes_the_server_sends() {
    let mut io = tagged(Scripted::reads([Ok(&b"HTTP/1.1 200 OK"[..])])).await;
    assert_eq!(io.dialled.verdict(), Verdict::Unanswered);
    assert_eq!(read(&mut io).await.unwrap(), 15);
    assert_eq!(io.dialled.verdict(), Verdict::Answered);
    // Its clones (in an HTTP/2 connection's requests' errors) share what it learnt.
    assert_eq!(io.dialled.clone().verdict(), Verdict::Answered);
    assert_eq!(io.dialled.state.load(Ordering::Relaxed), ANSWERED);
    // The end of the stream after an answer is the end, as the connection under it says.
    assert_eq!(read(&mut io).await.unwrap(), 0);

    // HTTP/2's: the server's settings come before any answer, and its client marks the
    // first response's.
    let mut io = tagged(Scripted::reads([Ok(&b"settings"[..])])).await;
    io.answers = Answers::Responses;
    assert_eq!(read(&mut io).await.unwrap(), 8);
    assert_eq!(io.dialled.verdict(), Verdict::Unanswered);
    io.dialled.answered();
    assert_eq!(io.dialled.verdict(), Verdict::Answered);

    // A read with no room reads nothing and ends nothing.
    let mut io = tagged(Scripted::reads([Ok(&b""[..])])).await;
    assert_eq!(io.read(&mut []).await.unwrap(), 0);
    assert_eq!(io.dialled.verdict(), Verdict::Unanswered);
}

#[tokio::test]
async fn a_connection_that_ends_before_it_answers_says_so_in_its_error() {
    // The end of the stream: an error of its own, which hyper gives the request.
    let mut io = tagged(Scripted::reads([])).await;
    let err = read(&mut io).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof);
    assert_eq!(unanswered(&err), Some(io.dialled.generations));
    assert!(
        err.source().is_none(),
        "nothing under the end of the stream"
    );
    assert_eq!(io.dialled.verdict(), Verdict::Unanswered);

    // A failure: the same, with the failure as its cause and its kind.
    let reset = io::Error::from(io::ErrorKind::ConnectionReset);
    let mut io = tagged(Scripted::reads([Err(reset)])).await;
    let err = read(&mut io).await.unwrap_err();
    assert_eq!(err.kind(), io::ErrorKind::ConnectionReset);
    assert_eq!(unanswered(&err), Some(io.dialled.generations));
    let cause = err.get_ref().and_then(|e| e.source()).unwrap();
    assert_eq!(
        cause.downcast_ref::<io::Error>().unwrap().kind(),
        io::ErrorKind::ConnectionReset
    );

    // Writes and flushes too, until the server has sent something.
    let mut io = tagged(Scripted::default()).await;
    io.io.write_error = Some(io::ErrorKind::BrokenPipe);
    let err = io.write(b"GET").await.unwrap_err();
    assert_eq!(
        (err.kind(), unanswered(&err)),
        (io::ErrorKind::BrokenPipe, Some(io.dialled.generations))
    );
    let err = io.flush().await.unwrap_err();
    assert!(unanswered(&err).is_some());
    io.io.reads.push_back(Ok(b"HTTP/1.1 200 OK"));
    read(&mut io).await.unwrap();
    let err = io.write(b"GET").await.unwrap_err();
    assert_eq!(
        (err.kind(), unanswered(&err)),
        (io::ErrorKind::BrokenPipe, None)
    );
    assert_eq!(unanswered(&io.flush().await.unwrap_err()), None);
}

#[tokio::test]
async fn a_certificate_alert_read_marks_the_connection_refused_even_after_an_answer() {
    for answered in [false, true] {
        let mut reads = vec![Err(alert())];
        if answered {
            reads.insert(0, Ok(&b"HTTP/1.1 200 OK"[..]));
        }
        let mut io = tagged(Scripted::reads(reads)).await;
        if answered {
            read(&mut io).await.unwrap();
        }
        // The alert goes up as it came, for the request's error to show.
        let err = read(&mut io).await.unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData);
        assert_eq!(blame(&err), Some(Blame::Identity));
        assert_eq!(unanswered(&err), None);
        assert_eq!(io.dialled.verdict(), Verdict::Refused);
    }

    // Any other failure of a connection that answered is no refusal, and goes up as it came.
    for error in [
        io::Error::from(io::ErrorKind::ConnectionReset),
        io::Error::other(rustls::Error::InvalidCertificate(
            rustls::CertificateError::UnknownIssuer,
        )),
    ] {
        let kind = error.kind();
        let mut io = tagged(Scripted::reads([Ok(&b"x"[..]), Err(error)])).await;
        read(&mut io).await.unwrap();
        let err = read(&mut io).await.unwrap_err();
        assert_eq!((err.kind(), unanswered(&err)), (kind, None));
        assert_eq!(io.dialled.verdict(), Verdict::Answered);
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
    let mut io = tagged(BufWriter::new(ours)).await;
    io.write_all(b"GET / HTTP/1.1\r\n").await.unwrap();
    let slices = [io::IoSlice::new(b"a: 1\r\n"), io::IoSlice::new(b"\r\n")];
    assert_eq!(io.is_write_vectored(), io.io.is_write_vectored());
    let n = io.write_vectored(&slices).await.unwrap();
    assert_eq!(n, 8);
    io.flush().await.unwrap();
    assert_eq!(
        read_exact(&mut peer, 24).await,
        b"GET / HTTP/1.1\r\na: 1\r\n\r\n"
    );

    // The shutdown is the peer's end of stream.
    let (ours, mut peer) = tokio::io::duplex(1024);
    let mut io = tagged(ours).await;
    io.write_all(b"bye").await.unwrap();
    io.shutdown().await.unwrap();
    let mut rest = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), peer.read_to_end(&mut rest))
        .await
        .expect("the end of stream arrives")
        .unwrap();
    assert_eq!(rest, b"bye");
    let _ = peer.shutdown().await;
}

#[tokio::test]
async fn the_server_is_verified_as_the_name_set_else_the_uri_s_host() {
    let stores = stores().await;
    let connector = https_connector(&stores, None, no_proxy(), Serves::Any);
    let name = |uri: &str| connector.server_name(&uri.parse().unwrap());
    assert_eq!(
        name("https://kubernetes.default.svc/api").unwrap().to_str(),
        "kubernetes.default.svc"
    );
    // An IPv6 literal without the URI's brackets: an address, verified as one.
    let ip = name("https://[fd00::1]:6443/").unwrap();
    assert!(matches!(ip, ServerName::IpAddress(_)), "{ip:?}");
    assert_eq!(ip.to_str(), "fd00::1");
    assert!(matches!(
        name("https://10.96.0.1/").unwrap(),
        ServerName::IpAddress(_)
    ));
    // Refused before anything is dialled, naming the URI.
    let err = name("http://10.96.0.1/api").unwrap_err();
    assert!(matches!(err, UriError::NotHttps { .. }), "{err}");
    assert!(
        err.to_string()
            .starts_with("http://10.96.0.1/api is not an https:// URI"),
        "{err}"
    );
    let err = name("https://:8443/").unwrap_err();
    assert_eq!(err.to_string(), "https://:8443/ names no host");

    // The name set wins over the URI's host, and an `http` URI is refused all the same.
    let fixed = ServerName::try_from("apiserver.internal").unwrap();
    let connector = https_connector(&stores, Some(fixed), no_proxy(), Serves::Any);
    let name = |uri: &str| connector.server_name(&uri.parse().unwrap());
    assert_eq!(
        name("https://10.96.0.1/").unwrap().to_str(),
        "apiserver.internal"
    );
    assert!(matches!(
        name("http://10.96.0.1/"),
        Err(UriError::NotHttps { .. })
    ));
}

#[tokio::test]
async fn a_proxy_of_a_scheme_it_cannot_go_through_is_an_error_without_its_password() {
    let stores = stores().await;
    let proxy = Matcher::builder()
        .all("socks4://jane:s3cret@127.0.0.1:1")
        .build();
    let connector = https_connector(&stores, None, Arc::new(proxy), Serves::Any);
    let err = match connector.dial("https://10.96.0.1/".parse().unwrap()).await {
        Ok(_) => panic!("dialled through a socks4 proxy"),
        Err(err) => err.to_string(),
    };
    assert_eq!(
        err,
        "proxy socks4://127.0.0.1:1/: only http://, https://, socks5:// and socks5h:// \
         proxies are supported"
    );
}
