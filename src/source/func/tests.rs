use super::*;

#[test]
fn debug_shows_the_name() {
    let source = FnSource::new("vault", || async { Ok::<_, std::io::Error>(Vec::new()) });
    assert_eq!(format!("{source:?}"), r#"FnSource { name: "vault", .. }"#);
}

#[test]
fn a_loader_is_called_again_every_minute_by_default() {
    // Like a file: nothing says when its token expires.
    let source = FnSource::new("vault", || async { Ok::<_, std::io::Error>(Vec::new()) });
    assert_eq!(
        source.default_refresh_interval(),
        Some(std::time::Duration::from_secs(60))
    );
}

#[tokio::test]
async fn the_closures_own_error_is_the_fetchs() {
    #[derive(Debug, thiserror::Error)]
    #[error("vault is sealed")]
    struct Sealed;
    let source = FnSource::new("vault", || async { Err::<Vec<u8>, _>(Sealed) });
    let err = source.fetch(FetchContext::default()).await.unwrap_err();
    assert!(err.downcast_ref::<Sealed>().is_some());
    assert_eq!(err.to_string(), "vault is sealed");
}
