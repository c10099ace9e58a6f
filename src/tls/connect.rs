//! The connector of [`HttpsClient`](super::HttpsClient) and `TlsChannel`, and [`Tagging`],
//! which marks each connection with what it was made with and whether the server refused
//! it or it ended unanswered: errors on it may say only "channel closed".

use std::error::Error;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::task::{Context, Poll, ready};

use http::Uri;
use http::uri::Scheme;
use hyper_util::client::legacy::connect::proxy::{SocksV5, Tunnel};
use hyper_util::client::legacy::connect::{Connected, Connection, HttpConnector};
use hyper_util::client::proxy::matcher::Matcher;
use hyper_util::rt::TokioIo;
use pin_project_lite::pin_project;
use rustls::pki_types::ServerName;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tower_service::Service;

use super::error::{Redacted, UriError};
use super::refusal::{Blame, blame};
use super::stores::{Generations, Stores};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

pub(crate) type TlsIo = TlsStream<Wire>;

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

/// The connector of a client with `stores`, through the proxy `proxy` picks for each URI,
/// the server verified as `server_name` (else each URI's host).
pub(crate) fn https_connector(
    stores: &Stores,
    server_name: Option<ServerName<'static>>,
    proxy: Arc<Matcher>,
    serves: Serves,
) -> HttpsConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    let mut config = stores.client_config();
    config.alpn_protocols = match serves {
        Serves::Any => vec![b"h2".to_vec(), b"http/1.1".to_vec()],
        Serves::Http2 => vec![b"h2".to_vec()],
    };
    HttpsConnector {
        http,
        tls: TlsConnector::from(Arc::new(config)),
        server_name,
        proxy,
    }
}

/// Dials TCP (or a proxy tunnel), then TLS with the stores' current credentials. A URI that
/// is not `https` is refused before anything is dialled: its request carries credentials.
#[derive(Clone)]
pub(crate) struct HttpsConnector {
    http: HttpConnector,
    tls: TlsConnector,
    server_name: Option<ServerName<'static>>,
    proxy: Arc<Matcher>,
}

impl HttpsConnector {
    pub(crate) fn dial(&self, uri: Uri) -> impl Future<Output = Result<TlsIo, BoxError>> + use<> {
        let name = self.server_name(&uri);
        let (this, tls) = (self.clone(), self.tls.clone());
        async move {
            let name = name.map_err(io::Error::from)?;
            let wire = this.wire(uri).await?;
            Ok(tls.connect(name, wire).await?)
        }
    }

    /// What TLS to `uri` goes over: TCP to its host, or a tunnel through its proxy.
    async fn wire(mut self, uri: Uri) -> Result<Wire, BoxError> {
        let Some(proxy) = self.proxy.intercept(&uri) else {
            return Ok(Wire::Tcp(self.http.call(uri).await?.into_inner()));
        };
        let via = proxy.uri().clone();
        let io = match via.scheme_str() {
            Some("http") => {
                let mut tunnel = Tunnel::new(via, self.http);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                Wire::Tcp(tunnel.call(uri).await?.into_inner())
            }
            Some("https") => {
                let to_proxy = ProxyTls(self.clone());
                let mut tunnel = Tunnel::new(via, to_proxy);
                if let Some(auth) = proxy.basic_auth() {
                    tunnel = tunnel.with_auth(auth.clone());
                }
                Wire::Tls(Box::new(tunnel.call(uri).await?.into_inner()))
            }
            Some(scheme @ ("socks5" | "socks5h")) => {
                let mut socks = SocksV5::new(via.clone(), self.http).local_dns(scheme == "socks5");
                if let Some((user, password)) = proxy.raw_auth() {
                    socks = socks.with_auth(user.to_owned(), password.to_owned());
                }
                Wire::Tcp(socks.call(uri).await?.into_inner())
            }
            _ => {
                let via = Redacted(&via).to_string();
                return Err(ProxyError::Scheme { proxy: via }.into());
            }
        };
        Ok(io)
    }

    /// The name the server is verified as (and SNI): the one set, else `uri`'s host.
    fn server_name(&self, uri: &Uri) -> Result<ServerName<'static>, UriError> {
        if uri.scheme() != Some(&Scheme::HTTPS) {
            return Err(UriError::NotHttps { uri: uri.clone() });
        }
        if let Some(name) = &self.server_name {
            return Ok(name.clone());
        }
        host_name(uri).ok_or_else(|| UriError::NoHost { uri: uri.clone() })
    }
}

/// `uri`'s host as a server name, without an IPv6 literal's brackets.
fn host_name(uri: &Uri) -> Option<ServerName<'static>> {
    let host = uri.host()?.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(host.to_owned()).ok()
}

/// A proxy the crate cannot go through.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyError {
    /// Not `http`, `https`, `socks5` or `socks5h`.
    #[error(
        "proxy {proxy}: only http://, https://, socks5:// and socks5h:// proxies are supported"
    )]
    Scheme {
        /// The proxy, without its credentials.
        proxy: String,
    },
    /// An `https://` proxy whose host is no name its certificate can be verified for.
    #[error("proxy {proxy} names no host")]
    NoHost {
        /// The proxy, without its credentials.
        proxy: String,
    },
}

/// TLS to an `https://` proxy, for the tunnel through it: verified with the client's own
/// CA bundle and presenting its identity, as kube's client does.
#[derive(Clone)]
struct ProxyTls(HttpsConnector);

impl Service<Uri> for ProxyTls {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, proxy: Uri) -> Self::Future {
        let (mut http, tls) = (self.0.http.clone(), self.0.tls.clone());
        Box::pin(async move {
            let name = host_name(&proxy).ok_or_else(|| {
                let proxy = Redacted(&proxy).to_string();
                ProxyError::NoHost { proxy }
            })?;
            let tcp = http.call(proxy).await?.into_inner();
            Ok(TokioIo::new(tls.connect(name, tcp).await?))
        })
    }
}

/// What TLS goes over: TCP (to the server or a proxy), or TLS to an `https://` proxy.
pub(crate) enum Wire {
    Tcp(TcpStream),
    Tls(Box<TlsStream<TcpStream>>),
}

impl Wire {
    fn connected(&self) -> Connected {
        match self {
            Wire::Tcp(tcp) => tcp.connected(),
            Wire::Tls(tls) => tls.get_ref().0.connected(),
        }
    }
}

impl AsyncRead for Wire {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(io) => Pin::new(io).poll_read(cx, buf),
            Wire::Tls(io) => Pin::new(io).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Wire {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Wire::Tcp(io) => Pin::new(io).poll_write(cx, buf),
            Wire::Tls(io) => Pin::new(io).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(io) => Pin::new(io).poll_flush(cx),
            Wire::Tls(io) => Pin::new(io).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Wire::Tcp(io) => Pin::new(io).poll_shutdown(cx),
            Wire::Tls(io) => Pin::new(io).poll_shutdown(cx),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Wire::Tcp(io) => Pin::new(io).poll_write_vectored(cx, bufs),
            Wire::Tls(io) => Pin::new(io).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        match self {
            Wire::Tcp(io) => io.is_write_vectored(),
            Wire::Tls(io) => io.is_write_vectored(),
        }
    }
}

/// An [`HttpsConnector`] that tags its connections with the generations of its stores.
#[derive(Clone)]
pub(crate) struct Tagging {
    /// Shared: hyper-util clones its connector for every request.
    shared: Arc<(HttpsConnector, Stores)>,
}

impl Tagging {
    pub(crate) fn new(connector: HttpsConnector, stores: Stores) -> Self {
        let shared = Arc::new((connector, stores));
        Self { shared }
    }
}

impl Service<Uri> for Tagging {
    type Response = TokioIo<Tagged<TlsIo>>;
    type Error = BoxError;
    // Boxed: once a dial, which a TCP and TLS handshake dwarf.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        // Read before the handshake, which reads the credentials after: a connection is
        // never tagged newer than what it presented.
        let generations = self.shared.1.generations();
        let (dial, tagging) = (self.shared.0.dial(uri), self.clone());
        Box::pin(async move {
            let io = dial.await?;
            let answers = match io.get_ref().1.alpn_protocol() {
                Some(b"h2") => Answers::Responses,
                _ => Answers::Bytes,
            };
            let state = Arc::default();
            let dialled = Dialled { generations, state };
            Ok(TokioIo::new(Tagged {
                io,
                dialled,
                answers,
                tagging,
            }))
        })
    }
}

/// What a connection tells its requests' errors: through [`Unanswered`], and for HTTP/2
/// (whose errors keep no cause) through hyper-util's `Connected::extra`.
#[derive(Debug, Clone)]
pub(crate) struct Dialled {
    pub(crate) generations: Generations,
    state: Arc<AtomicU8>,
}

/// The server answered over it.
const ANSWERED: u8 = 1;
/// The server refused the client certificate (an alert read).
const REFUSED: u8 = 2;

/// What a failed connection's history says of a failure on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// The server refused the client certificate: an alert was read.
    Refused,
    /// Ended before the server answered: a TLS 1.3 refusal, its alert unread, or a crash.
    Unanswered,
    /// The server answered: whatever ended the connection was not a refusal.
    Answered,
}

impl Dialled {
    pub(crate) fn verdict(&self) -> Verdict {
        let state = self.state.load(Ordering::Acquire);
        if state & REFUSED != 0 {
            Verdict::Refused
        } else if state & ANSWERED == 0 {
            Verdict::Unanswered
        } else {
            Verdict::Answered
        }
    }

    /// The server answered over this connection: it was not refused.
    pub(crate) fn answered(&self) {
        if self.state.load(Ordering::Relaxed) & ANSWERED == 0 {
            self.state.fetch_or(ANSWERED, Ordering::Release);
        }
    }

    fn has_answered(&self) -> bool {
        self.state.load(Ordering::Acquire) & ANSWERED != 0
    }

    /// The error a failed read or write gives hyper: a certificate alert as it is, marking
    /// the connection refused; any other before the server answered as [`Unanswered`].
    fn failed(&self, error: io::Error) -> io::Error {
        if blame(&error) == Some(Blame::Identity) {
            self.state.fetch_or(REFUSED, Ordering::Release);
            error
        } else if self.has_answered() {
            error
        } else {
            self.unanswered(Some(error))
        }
    }

    /// What a read at the end of the stream gives hyper: [`Unanswered`] before an answer.
    fn ended(&self) -> io::Result<()> {
        if self.has_answered() {
            Ok(())
        } else {
            Err(self.unanswered(None))
        }
    }

    fn unanswered(&self, source: Option<io::Error>) -> io::Error {
        let kind = source
            .as_ref()
            .map_or(io::ErrorKind::UnexpectedEof, io::Error::kind);
        let generations = self.generations;
        io::Error::new(
            kind,
            Unanswered {
                generations,
                source,
            },
        )
    }
}

/// A connection ended before the server answered: HTTP/1.1's request errors hold it.
#[derive(Debug, thiserror::Error)]
#[error("the connection ended before the server answered")]
pub(crate) struct Unanswered {
    pub(crate) generations: Generations,
    /// What ended it; none for the end of the stream.
    #[source]
    source: Option<io::Error>,
}

impl Unanswered {
    /// The one among `error`'s causes.
    pub(crate) fn find<'a>(error: &'a (dyn Error + 'static)) -> Option<&'a Unanswered> {
        let mut next = Some(error);
        while let Some(e) = next {
            // An `io::Error`'s `source()` skips the error it wraps.
            if let Some(found) = e
                .downcast_ref::<io::Error>()
                .and_then(io::Error::get_ref)
                .and_then(|inner| inner.downcast_ref::<Unanswered>())
            {
                return Some(found);
            }
            next = e.source();
        }
        None
    }
}

pin_project! {
    /// A connection and the generations it was dialled under.
    pub(crate) struct Tagged<T> {
        #[pin]
        io: T,
        dialled: Dialled,
        answers: Answers,
        // Its stores, to see whether they rotated during the handshake.
        tagging: Tagging,
    }
}

/// What marks a connection answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Answers {
    /// HTTP/1.1: the first bytes the server sends, a response's.
    Bytes,
    /// HTTP/2: the first response (the server's settings come first, before any answer).
    Responses,
}

impl Connection for Tagged<TlsIo> {
    fn connected(&self) -> Connected {
        let mut connected = self.io.get_ref().0.connected();
        if self.answers == Answers::Responses {
            // HTTP/2's requests learn only that the channel closed: tell them from here.
            connected = connected.negotiated_h2().extra(self.dialled.clone());
        }
        if self.tagging.shared.1.generations() != self.dialled.generations {
            // Made with credentials that rotated during its handshake: not to be reused.
            connected.poison();
        }
        connected
    }
}

impl<T: AsyncRead> AsyncRead for Tagged<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let filled = buf.filled().len();
        let read = ready!(this.io.poll_read(cx, buf));
        Poll::Ready(match read {
            Ok(()) if buf.filled().len() > filled => {
                if *this.answers == Answers::Bytes {
                    this.dialled.answered();
                }
                Ok(())
            }
            // The end of the stream, or a read with no room.
            Ok(()) if buf.remaining() == 0 => Ok(()),
            Ok(()) => this.dialled.ended(),
            Err(e) => Err(this.dialled.failed(e)),
        })
    }
}

impl<T: AsyncWrite> AsyncWrite for Tagged<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        this.io
            .poll_write(cx, buf)
            .map_err(|e| this.dialled.failed(e))
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        this.io.poll_flush(cx).map_err(|e| this.dialled.failed(e))
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
        let this = self.project();
        this.io
            .poll_write_vectored(cx, bufs)
            .map_err(|e| this.dialled.failed(e))
    }
}

#[cfg(test)]
mod tests;
