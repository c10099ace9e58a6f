use super::*;

#[tokio::test]
async fn loads_of_one_file_with_the_same_options_share_one_store() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let quiet = |p: &Path| TokenFile::new(p).watch(false).refresh_interval(None);
    let a = quiet(&path).load().await.unwrap();
    // Another spelling of the same path: the same store, no second read.
    let b = quiet(&dir.path().join(".").join("token"))
        .load()
        .await
        .unwrap();
    assert!(a.ptr_eq(&b));
    assert_eq!(a.status().reads, 1);
    std::fs::write(&path, "two").unwrap();
    b.reload().await.unwrap();
    assert_eq!(a.current().header_value(), "Bearer two");
    // Other options, another store.
    let c = quiet(&path).max_size(100).load().await.unwrap();
    assert!(!c.ptr_eq(&a));
    // Once every clone is dropped, a load builds a new store.
    let handle = a.downgrade();
    drop((a, b));
    assert!(handle.upgrade().is_none());
    let d = quiet(&path).load().await.unwrap();
    assert_eq!(d.status().reads, 1, "a fresh store");
    // Closures are never shared.
    let loader = || TokenLoader::new("l", || async { Ok::<_, std::io::Error>(b"x".to_vec()) });
    let (e, f) = (
        loader().load().await.unwrap(),
        loader().load().await.unwrap(),
    );
    assert!(!e.ptr_eq(&f));
}

#[test]
fn debug_shows_the_source_and_the_options() {
    let shown = format!(
        "{:?}",
        TokenFile::new("/var/run/token")
            .name("api")
            .max_size(123)
            .refresh_interval(None)
    );
    assert!(shown.starts_with("StoreBuilder"), "{shown}");
    for part in [
        "/var/run/token",
        "\"api\"",
        "max_size: 123",
        "refresh_interval: Some(None)",
    ] {
        assert!(shown.contains(part), "{part} in {shown}");
    }
}

#[test]
fn a_refresher_shows_its_name_only() {
    assert_eq!(format!("{:?}", Refresher::idle()), "Refresher { .. }");
}

#[tokio::test]
async fn a_second_load_of_a_shared_source_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    std::fs::write(&path, "one").unwrap();
    let quiet = || TokenFile::new(&path).watch(false).refresh_interval(None);
    let first = quiet().load().await.unwrap();
    // The file is now empty, which a read would refuse: the second load does not read it,
    // it gets the live store.
    std::fs::write(&path, "").unwrap();
    let second = quiet().load().await.unwrap();
    assert!(first.ptr_eq(&second));
    assert_eq!(second.current().header_value(), "Bearer one");
}
