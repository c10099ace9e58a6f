//! The stack of a client whose TLS credentials rotate (feature `tls`): kube's own stack,
//! layer for layer, over this crate's [`HttpsClient`] instead of kube's hyper client.

use std::time::Duration;

use ::kube::client::retry::RetryPolicy;
use ::kube::client::{Body, ClientBuilder, ConfigExt};
use ::kube::{Client, Config};
use http::{HeaderMap, Request, Response};
use hyper::body::Incoming;
use hyper_util::client::proxy::matcher::Matcher;
use rustls::pki_types::ServerName;
use tower::ServiceBuilder;
use tower::retry::RetryLayer;
use tower_http::classify::ServerErrorsFailureClass;
use tower_http::trace::TraceLayer;
use tracing::Span;

use super::{Credentials, Error};
use crate::layer::BearerLayer;
use crate::tls::HttpsClient;
use crate::tls::client::Timeouts;
use crate::tls::error::Redacted;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// kube's stack, layer for layer as the module docs' table says, over an [`HttpsClient`].
pub(super) fn client(config: Config, credentials: Credentials) -> Result<Client, Error> {
    let roots = credentials.roots.ok_or(Error::NoRoots)?;
    let timeouts = Timeouts {
        connect: config.connect_timeout,
        read: config.read_timeout,
        write: config.write_timeout,
        reset_reader_on_write: config.reset_reader_on_write,
    };
    let mut https = HttpsClient::<Body>::new(roots)
        .proxy(proxy(&config)?)
        .timeouts(timeouts);
    if let Some(identity) = credentials.identity {
        https = https.identity(identity);
    }
    if let Some(name) = &config.tls_server_name {
        let name = ServerName::try_from(name.clone())
            .map_err(|_| Error::ServerName { name: name.clone() })?;
        https = https.server_name(name);
    }
    #[cfg(feature = "gzip")]
    let decompression = tower_http::decompression::DecompressionLayer::new()
        .no_br()
        .no_deflate()
        .no_zstd()
        .gzip(!config.disable_compression);
    #[cfg(not(feature = "gzip"))]
    let decompression = tower::layer::util::Identity::new();
    let retry = (config.default_retry).then(|| RetryLayer::new(RetryPolicy::server_retry()));
    let bearer = (credentials.token).map(|t| BearerLayer::new(t).retry_unauthorized());
    let stack = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .layer(decompression)
        .option_layer(retry)
        .option_layer(bearer)
        .map_err(Into::<BoxError>::into)
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        // kube's own span, events and error logs.
        .layer(
            TraceLayer::new_for_http()
                .make_span_with(|req: &Request<Body>| {
                    tracing::debug_span!(
                        "HTTP",
                        http.method = %req.method(),
                        http.url = %req.uri(),
                        http.status_code = tracing::field::Empty,
                        otel.name = req.extensions().get::<&'static str>().unwrap_or(&"HTTP"),
                        otel.kind = "client",
                        otel.status_code = tracing::field::Empty,
                    )
                })
                .on_request(|_: &Request<Body>, _: &Span| tracing::debug!("requesting"))
                .on_response(|res: &Response<Incoming>, _: Duration, span: &Span| {
                    let status = res.status();
                    span.record("http.status_code", status.as_u16());
                    if status.is_client_error() || status.is_server_error() {
                        span.record("otel.status_code", "ERROR");
                    }
                })
                .on_body_chunk(())
                .on_eos(|_: Option<&HeaderMap>, _: Duration, _: &Span| {
                    tracing::debug!("stream closed")
                })
                .on_failure(
                    |class: ServerErrorsFailureClass, _: Duration, span: &Span| {
                        span.record("otel.status_code", "ERROR");
                        match class {
                            ServerErrorsFailureClass::StatusCode(status) => {
                                span.record("http.status_code", status.as_u16());
                                tracing::error!("failed with status {status}")
                            }
                            ServerErrorsFailureClass::Error(error) => {
                                tracing::error!("failed with error {error}")
                            }
                        }
                    },
                ),
        )
        .map_err(Into::<BoxError>::into)
        .service(https);
    Ok(ClientBuilder::new(stack, config.default_namespace).build())
}

/// The proxy kube's client would go through: the config's `proxy_url`, else none.
fn proxy(config: &Config) -> Result<Matcher, Error> {
    let Some(url) = &config.proxy_url else {
        return Ok(Matcher::builder().build());
    };
    match url.scheme_str() {
        Some("http" | "https" | "socks5" | "socks5h") => {
            Ok(Matcher::builder().all(url.to_string()).build())
        }
        _ => Err(Error::UnsupportedProxyScheme {
            proxy: Redacted(url).to_string(),
        }),
    }
}
