//! Scrapes a Prometheus exposition over HTTP and parses it: `name{labels}` → value.
//!
//! Included by `tests/metrics.rs` and by `examples/metrics.rs`
//! (`#[path = "../tests/support/prometheus.rs"]`).
#![allow(dead_code, unreachable_pub)]

use std::collections::BTreeMap;
use std::net::SocketAddr;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// One scrape: every sample, keyed `name{label="value",...}` exactly as exposed, and the
/// text itself.
pub struct Exposition {
    pub samples: BTreeMap<String, f64>,
    pub text: String,
}

impl Exposition {
    /// The value of `key`, if exposed.
    pub fn get(&self, key: &str) -> Option<f64> {
        self.samples.get(key).copied()
    }

    /// The samples whose name starts with `prefix`.
    pub fn starting_with<'a>(
        &'a self,
        prefix: &'a str,
    ) -> impl Iterator<Item = (&'a String, &'a f64)> {
        self.samples
            .iter()
            .filter(move |(k, _)| k.starts_with(prefix))
    }
}

/// GETs `http://addr/metrics` and parses the text format.
pub async fn scrape(addr: SocketAddr) -> Exposition {
    let client: Client<_, Empty<Bytes>> = Client::builder(TokioExecutor::new()).build_http();
    let res = client
        .get(format!("http://{addr}/metrics").parse().unwrap())
        .await
        .expect("the exporter answers");
    assert!(res.status().is_success(), "{}", res.status());
    let body = res.into_body().collect().await.unwrap().to_bytes();
    let text = String::from_utf8(body.to_vec()).expect("the exposition is UTF-8");
    Exposition {
        samples: parse(&text),
        text,
    }
}

/// Parses the Prometheus text format: comments skipped, `name{labels} value [timestamp]`.
pub fn parse(text: &str) -> BTreeMap<String, f64> {
    let mut samples = BTreeMap::new();
    for line in text
        .lines()
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
    {
        // Label values may hold spaces: the value follows the closing brace, if any.
        let split = line
            .rfind('}')
            .map_or_else(|| line.find(' '), |i| Some(i + 1));
        let Some(at) = split else { continue };
        let (key, rest) = line.split_at(at);
        let value = rest.split_whitespace().next().unwrap_or("");
        let value = match value {
            "+Inf" => f64::INFINITY,
            "-Inf" => f64::NEG_INFINITY,
            v => v.parse().unwrap_or_else(|_| panic!("not a sample: {line}")),
        };
        samples.insert(key.to_owned(), value);
    }
    samples
}
