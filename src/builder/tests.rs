use super::*;
use crate::source::{FileSource, FnSource};

#[tokio::test]
async fn two_loads_of_one_file_are_two_stores() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let quiet = |p: &std::path::Path| {
        TokenStore::builder(FileSource::new(p))
            .no_watch()
            .refresh_interval(None)
    };
    let a = quiet(&path).load().await.unwrap();
    let b = quiet(&path).load().await.unwrap();
    assert!(
        !a.ptr_eq(&b),
        "nothing shares a store behind the user's back"
    );
    assert_eq!((a.status().reads, b.status().reads), (1, 1));
    // A clone is the way to share one.
    let c = a.clone();
    assert!(c.ptr_eq(&a));
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
            .refresh_interval(None)
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
