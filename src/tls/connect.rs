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

use super::error::UriError;
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
    // `Tagging` above says so by name first).
    let mut tls = HttpsConnectorBuilder::new()
        .with_tls_config(stores.client_config())
        .https_only();
    if let Some(name) = server_name {
        tls = tls.with_server_name_resolver(FixedServerNameResolver::new(name));
    }
    let tls = match serves {
        Serves::Any => tls.enable_all_versions(),
        Serves::Http2 => tls.enable_http2(),
    };
    tls.wrap_connector(http)
}

/// Refuses a URI that is not `https` before anything is dialled, with an error that
/// names it (the request would carry the token the layer above put on it, and the
/// client's certificate stands for TLS), and tags the connections of `inner` with the
/// generations of `stores`.
#[derive(Debug, Clone)]
pub(crate) struct Tagging<C> {
    pub(crate) inner: C,
    /// Shared: hyper-util clones its connector for every request.
    pub(crate) stores: Arc<Stores>,
}

impl<C> Service<Uri> for Tagging<C>
where
    C: Service<Uri>,
    C::Error: Into<BoxError>,
    C::Response: Send + 'static,
    C::Future: Send + 'static,
{
    type Response = Tagged<C::Response>;
    type Error = BoxError;
    // Boxed: once a dial, which a TCP and TLS handshake dwarf.
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx).map_err(Into::into)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        if uri.scheme() != Some(&Scheme::HTTPS) {
            return Box::pin(std::future::ready(Err(std::io::Error::from(
                UriError::NotHttps { uri },
            )
            .into())));
        }
        // Read before the handshake, which reads the credentials after: a connection is
        // never tagged newer than what it presented.
        let generations = self.stores.generations();
        let (dial, stores) = (self.inner.call(uri), self.stores.clone());
        Box::pin(async move {
            let io = dial.await.map_err(Into::into)?;
            let state = Arc::default();
            let dialled = Dialled { generations, state };
            Ok(Tagged {
                io,
                dialled,
                stores,
            })
        })
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
mod tests;
