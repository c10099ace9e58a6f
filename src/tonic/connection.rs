//! [`Connection`]: one generation's HTTP/2 connection, dialled on demand, one at a time.

use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use http::Uri;
use hyper::client::conn::http2::{Builder, SendRequest};
use hyper_util::rt::TokioIo;

use crate::source::BoxError;
use crate::sync::lock;
use crate::tls::connect::HttpsConnector;
use crate::tls::stores::Generations;

/// Spawns hyper's tasks (the connection's, and two for each call) on tokio, boxed: tokio
/// moves a future several times on its way into its task, and a call's are large.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Spawn;

impl<F> hyper::rt::Executor<F> for Spawn
where
    F: std::future::Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        tokio::spawn(Box::pin(fut));
    }
}

/// How a connection is made: TCP, the TLS handshake with the credentials current at that
/// moment, HTTP/2's; all of it within `connect_timeout`.
#[derive(Clone)]
pub(crate) struct Dial {
    pub(crate) connector: HttpsConnector,
    pub(crate) http2: Builder<Spawn>,
    pub(crate) origin: Uri,
    pub(crate) connect_timeout: Option<Duration>,
}

impl Dial {
    /// A new connection's sender; its task ends with its last sender and stream, or fails.
    async fn connect<B>(&self) -> Result<SendRequest<B>, BoxError>
    where
        B: http_body::Body + Send + Unpin + 'static,
        B::Data: Send,
        B::Error: Into<BoxError>,
    {
        let io = self.connector.dial(self.origin.clone()).await?;
        if io.get_ref().1.alpn_protocol() != Some(b"h2") {
            return Err(NotHttp2.into());
        }
        // Boxed: hyper spawns a task per call whose future is an enum that can also be
        // the connection's, and a TLS stream held inline would make each as large.
        let (sender, connection) = self.http2.handshake(Box::new(TokioIo::new(io))).await?;
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!(%error, "gRPC connection ended");
            }
        });
        Ok(sender)
    }
}

/// The server did not choose HTTP/2 by ALPN, the one protocol a channel offers.
#[derive(Debug, thiserror::Error)]
#[error("the server did not choose HTTP/2 (ALPN h2), which gRPC needs")]
struct NotHttp2;

#[derive(Debug, thiserror::Error)]
#[error("no connection within {0:?}")]
struct TimedOut(Duration);

/// One generation's connection: the calls that start under `generations` go out on it.
pub(crate) struct Connection<B> {
    pub(crate) generations: Generations,
    /// The dials finished so far, and the last one's outcome: its sender, or its error.
    last: Mutex<(u64, Option<Outcome<B>>)>,
    /// Held while dialling: one dial at a time.
    dialling: tokio::sync::Mutex<()>,
}

type Outcome<B> = Result<SendRequest<B>, Arc<io::Error>>;

impl<B> Connection<B> {
    pub(crate) fn new(generations: Generations) -> Self {
        Self {
            generations,
            last: Mutex::new((0, None)),
            dialling: tokio::sync::Mutex::new(()),
        }
    }

    pub(crate) fn open(&self) -> Option<SendRequest<B>> {
        match &lock(&self.last).1 {
            Some(Ok(sender)) if !sender.is_closed() => Some(sender.clone()),
            _ => None,
        }
    }
}

impl<B> Connection<B>
where
    B: http_body::Body + Send + Unpin + 'static,
    B::Data: Send,
    B::Error: Into<BoxError>,
{
    /// The open connection's sender, or a new connection's. Callers that waited on a dial
    /// that failed get its error; a caller that comes after it dials again.
    ///
    /// # Errors
    ///
    /// Why the connection could not be made (its TCP connect, TLS or HTTP/2 handshake).
    pub(crate) async fn sender(&self, dial: &Dial) -> Outcome<B> {
        if let Some(sender) = self.open() {
            return Ok(sender);
        }
        let seen = lock(&self.last).0;
        let _dialling = self.dialling.lock().await;
        match &*lock(&self.last) {
            (_, Some(Ok(sender))) if !sender.is_closed() => return Ok(sender.clone()),
            (dials, Some(Err(failed))) if *dials > seen => return Err(failed.clone()),
            _ => {}
        }
        // Bounded: callers wait on this dial, and a server that takes TCP and never
        // speaks TLS would hold them for ever.
        let outcome = match dial.connect_timeout {
            Some(limit) => match tokio::time::timeout(limit, dial.connect()).await {
                Ok(outcome) => outcome,
                Err(_) => Err(TimedOut(limit).into()),
            },
            None => dial.connect().await,
        };
        let outcome = outcome.map_err(|e| Arc::new(io::Error::other(e)));
        let mut last = lock(&self.last);
        *last = (last.0 + 1, Some(outcome.clone()));
        outcome
    }
}
