use super::*;

#[test]
fn a_certificate_and_key_pair_is_watched_and_re_read_as_its_files_are() {
    let files = PemFiles::new("/pki/client.crt", "/pki/client.key");
    let file = FileSource::new("/pki/client.crt");
    // The timer's backstop of a file: 60 s.
    assert_eq!(
        files.default_refresh_interval(),
        Some(Duration::from_secs(60))
    );
    assert_eq!(
        files.default_refresh_interval(),
        file.default_refresh_interval()
    );
    assert_eq!(
        files.paths(),
        [
            PathBuf::from("/pki/client.crt"),
            PathBuf::from("/pki/client.key")
        ]
    );
    assert_eq!(
        files.describe(),
        "certificate /pki/client.crt and key /pki/client.key"
    );
    // Parsed, a source keeps its own backstop.
    let parsed = PemSource::<_, crate::tls::identity::Identity>::new(file);
    assert_eq!(
        parsed.default_refresh_interval(),
        Some(Duration::from_secs(60))
    );
}
