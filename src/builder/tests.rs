use super::*;
use crate::source::{FileSource, FnSource};

/// Test-only options.
impl<S> StoreBuilder<S> {
    /// The wall clock the store compares token dates to.
    pub(crate) fn clock(self, clock: Clock) -> Self {
        self.with(|p| p.config.clock = clock)
    }
}

#[tokio::test]
async fn two_loads_of_one_file_are_two_stores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let quiet = |p: &std::path::Path| {
        TokenStore::builder(FileSource::new(p))
            .no_watch()
            .no_periodic_refresh()
    };
    let a = quiet(&path).load().await.unwrap();
    let b = quiet(&path).load().await.unwrap();
    assert!(
        !a.0.ptr_eq(&b.0),
        "nothing shares a store behind the user's back"
    );
    assert_eq!((a.status().reads, b.status().reads), (1, 1));
    // A clone is the way to share one.
    let c = a.clone();
    assert!(c.0.ptr_eq(&a.0));
    std::fs::write(&path, "two").unwrap();
    c.reload().await.unwrap();
    assert_eq!(a.current().header_value(), "Bearer two");
    assert_eq!(b.current().header_value(), "Bearer one");
}

#[test]
fn debug_shows_the_source_and_the_options() {
    let shown = format!(
        "{:?}",
        TokenStore::builder(FileSource::new("/var/run/token"))
            .name("api")
            .max_size(123)
            .no_periodic_refresh()
    );
    assert!(shown.starts_with("StoreBuilder"), "{shown}");
    for part in [
        "file /var/run/token",
        "\"api\"",
        "max_size: 123",
        "refresh_interval: None",
        "fetch_timeout: 10s",
    ] {
        assert!(shown.contains(part), "{part} in {shown}");
    }
    let loader = TokenStore::builder(FnSource::new("l", || async {
        Ok::<_, std::io::Error>(Vec::new())
    }));
    let shown = format!("{loader:?}");
    assert!(shown.contains("refresh_interval: Some(60s)"), "{shown}");
    assert!(shown.contains("watch: []"), "{shown}");
}

#[test]
#[should_panic(expected = "refresh_interval(999ms) is under the least interval, 1s")]
fn a_refresh_interval_under_a_second_is_refused() {
    let _ = TokenStore::builder(FileSource::new("/var/run/token"))
        .refresh_interval(Duration::from_millis(999));
}

#[test]
fn a_refresh_interval_of_a_second_or_more_is_taken_as_given() {
    let builder = TokenStore::builder(FileSource::new("/var/run/token"));
    let shown = format!("{:?}", builder.refresh_interval(Duration::from_secs(1)));
    assert!(shown.contains("refresh_interval: Some(1s)"), "{shown}");
}
