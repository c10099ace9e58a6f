use super::*;

#[test]
fn the_chain_shows_each_cause_once_after_the_source() {
    let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
    let err = LoadError::Fetch {
        origin: "file /run/token".into(),
        error: Arc::new(crate::source::FileError::Read {
            path: "/run/token".into(),
            source: io,
        }),
    };
    assert_eq!(
        Chain(&err).to_string(),
        "cannot fetch from file /run/token: cannot read the file: gone"
    );
    let invalid = LoadError::Invalid {
        origin: "loader l".into(),
        source: TokenError::Empty,
    };
    assert_eq!(
        Chain(&invalid).to_string(),
        "invalid token from loader l: token is empty"
    );
}

#[tokio::test]
async fn an_anyhow_chain_names_the_path_first_and_each_cause_once() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("token");
    let load = || crate::test_support::file(&path).no_watch().load();
    let err = anyhow::Error::new(load().await.unwrap_err());
    assert_eq!(
        format!("{err:#}"),
        format!(
            "cannot fetch from file {}: cannot read the file: No such file or \
             directory (os error 2)",
            path.display()
        )
    );
    std::fs::write(&path, "a\x07b").unwrap();
    let err = anyhow::Error::new(load().await.unwrap_err());
    assert_eq!(
        format!("{err:#}"),
        format!(
            "invalid token from file {}: token has a byte that is not visible ASCII at \
             offset 1",
            path.display()
        )
    );
    // The cause is the source error itself, for code that looks for it.
    assert!(err.chain().any(|e| e.is::<TokenError>()));
}
