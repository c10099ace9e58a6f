//! The metrics an operator scrapes: a Prometheus exporter installed in this process, a
//! store going through a kubelet rotation and a revoking server, and the exposition read
//! back over HTTP and parsed. In a process of its own (`support::alone`): the recorder is
//! process-wide.

use crate::support;

use std::net::SocketAddr;
use std::time::Duration;

use bearer_reload::BearerLayer;
use bearer_reload::testing::ProjectedTokenDir;
use bytes::Bytes;
use http::{Request, StatusCode, header::AUTHORIZATION};
use http_body_util::Empty;
use metrics_exporter_prometheus::PrometheusBuilder;
use support::prometheus::{Exposition, scrape};
use support::server::{AuthServer, http1_client};
use tower::{Layer, ServiceExt};

const DEADLINE: Duration = Duration::from_secs(15);

/// Scrapes until `cond` holds for the exposition, failing after [`DEADLINE`].
async fn scrape_until(
    addr: SocketAddr,
    what: &str,
    cond: impl Fn(&Exposition) -> bool,
) -> Exposition {
    let deadline = tokio::time::Instant::now() + DEADLINE;
    loop {
        let exposition = scrape(addr).await;
        if cond(&exposition) {
            return exposition;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "never saw {what} in:\n{}",
            exposition.text
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_operator_scrapes_every_metric_moving_through_a_rotation() {
    if !support::alone::in_own_process(
        module_path!(),
        "an_operator_scrapes_every_metric_moving_through_a_rotation",
    ) {
        return;
    }
    let addr: SocketAddr = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap()
    };
    PrometheusBuilder::new()
        .with_http_listener(addr)
        .install()
        .expect("the exporter starts");

    let tmp = tempfile::tempdir().unwrap();
    let volume = ProjectedTokenDir::create(tmp.path().join("sa"), "first-token").unwrap();
    let store = support::file(volume.token_path())
        .name("payments")
        .load()
        .await
        .unwrap();
    let server = AuthServer::start("first-token").await;
    let client = BearerLayer::new(store.clone())
        .retry_unauthorized()
        .layer(http1_client::<Empty<Bytes>>());
    let get = || Request::get(server.url("/")).body(Empty::new()).unwrap();

    let s = |name: &str, labels: &str| format!("{name}{{source=\"payments\"{labels}}}");
    let first = scrape_until(addr, "the store's first metrics", |e| {
        e.get(&s("bearer_reload_generation", "")) == Some(1.0)
    })
    .await;
    assert_eq!(
        first.get(&s("bearer_reload_watch_state", ",state=\"active\"")),
        Some(1.0)
    );
    assert_eq!(
        first.get(&s("bearer_reload_rotation_stalled", "")),
        Some(0.0)
    );
    assert_eq!(
        first.get(&s(
            "bearer_reload_reloads_total",
            ",trigger=\"load\",result=\"unchanged\""
        )),
        Some(1.0)
    );

    // A revoking rotation: the request in flight meets the 401 and is retried; the
    // watcher and the 401 share the read that installs the new token.
    server.accept_only("second-token");
    volume.rotate("second-token").unwrap();
    let res = client.clone().oneshot(get()).await.unwrap();
    assert_eq!(res.status(), StatusCode::OK);
    let mut own = get();
    own.headers_mut()
        .insert(AUTHORIZATION, "Bearer someone-elses".parse().unwrap());
    let res = client.oneshot(own).await.unwrap();
    assert_eq!(res.status(), StatusCode::UNAUTHORIZED);

    let after = scrape_until(addr, "generation 2", |e| {
        e.get(&s("bearer_reload_generation", "")) == Some(2.0)
    })
    .await;
    let rotated: f64 = after
        .starting_with("bearer_reload_reloads_total{source=\"payments\"")
        .filter(|(k, _)| k.contains("result=\"rotated\""))
        .map(|(_, v)| v)
        .sum();
    assert_eq!(
        rotated, 1.0,
        "one read installed the new token:\n{}",
        after.text
    );
    assert_eq!(
        after.get(&s("bearer_reload_requests_kept_authorization_total", "")),
        Some(1.0)
    );
    let unauthorized = after
        .get(&s("bearer_reload_unauthorized_total", ""))
        .unwrap_or(0.0);
    let retried = after
        .get(&s("bearer_reload_retries_total", ",result=\"succeeded\""))
        .unwrap_or(0.0);
    // The watcher may have been first: then the request carried the new token already.
    assert_eq!(unauthorized, retried, "{}", after.text);
    assert!(
        after
            .text
            .contains("# TYPE bearer_reload_token_issued_timestamp_seconds gauge")
    );
    // Every series is described, for the exporter's HELP lines.
    assert!(
        after.text.contains(
            "# HELP bearer_reload_reloads_total Reads of the token source, by trigger and result."
        ),
        "{}",
        after.text
    );

    // The dates are Unix timestamps, set by the reads: the source changed at the rotation,
    // a moment ago on the system clock.
    let changed = after
        .get(&s("bearer_reload_source_changed_timestamp_seconds", ""))
        .expect("the source-changed timestamp");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();
    assert!((now - 60.0..=now).contains(&changed), "{changed} vs {now}");

    // Nothing in the exposition is a token.
    let text = scrape(addr).await.text;
    assert!(
        !text.contains("first-token") && !text.contains("second-token"),
        "{text}"
    );
}
