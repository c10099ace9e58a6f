use super::*;

fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    names
}

fn is_timestamp_dir(name: &str) -> bool {
    // ..YYYY_MM_DD_HH_MM_SS.<9 digits>
    let b = name.as_bytes();
    name.len() == 2 + 19 + 1 + 9
        && name.starts_with("..")
        && b[2..].iter().enumerate().all(|(i, c)| match i {
            4 | 7 | 10 | 13 | 16 => *c == b'_',
            19 => *c == b'.',
            _ => c.is_ascii_digit(),
        })
}

#[test]
fn the_layout_matches_the_kubelet_after_each_rotation() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = ProjectedTokenDir::create(tmp.path().join("a/b"), "one\n").unwrap();
    let mut seen = Vec::new();
    for (i, token) in ["one\n", "two", "three"].into_iter().enumerate() {
        if i > 0 {
            vol.rotate(token).unwrap();
        }
        let names = entries(vol.dir());
        assert_eq!(names.len(), 3, "{names:?}");
        // Sorted: "..2" comes before "..d".
        assert!(is_timestamp_dir(&names[0]), "{names:?}");
        assert_eq!(names[1], "..data");
        assert_eq!(names[2], "token");
        assert_eq!(
            fs::read_link(vol.token_path()).unwrap(),
            Path::new("..data/token")
        );
        assert_eq!(
            fs::read_link(vol.dir().join("..data")).unwrap(),
            Path::new(&names[0]),
            "..data is a relative link to the timestamped directory"
        );
        assert_eq!(vol.data_dir().unwrap(), vol.dir().join(&names[0]));
        assert_eq!(fs::read(vol.token_path()).unwrap(), token.as_bytes());
        let file_meta = fs::symlink_metadata(vol.dir().join(&names[0]).join("token")).unwrap();
        assert!(file_meta.is_file());
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let ts_meta = fs::metadata(vol.dir().join(&names[0])).unwrap();
            assert_eq!(ts_meta.permissions().mode() & 0o777, 0o755);
            assert_eq!(file_meta.permissions().mode() & 0o777, 0o644);
        }
        assert_eq!(entries(&vol.dir().join(&names[0])), ["token"]);
        assert!(!seen.contains(&names[0]), "a new directory each time");
        seen.push(names[0].clone());
    }
}

#[cfg(unix)]
#[test]
fn the_visible_symlink_is_created_once() {
    use std::os::unix::fs::MetadataExt;
    let tmp = tempfile::tempdir().unwrap();
    let vol = ProjectedTokenDir::create(tmp.path(), "one").unwrap();
    let inode = fs::symlink_metadata(vol.token_path()).unwrap().ino();
    let started = Instant::now();
    let renamed_at = vol.rotate("two").unwrap();
    // Taken during this rotation, not at some other time.
    assert!(started <= renamed_at && renamed_at <= Instant::now());
    let now = fs::symlink_metadata(vol.token_path()).unwrap().ino();
    assert_eq!(inode, now, "token is never replaced");
    assert!(!tmp.path().join("..data_tmp").exists());
}

#[test]
fn named_files_and_invalid_names() {
    let tmp = tempfile::tempdir().unwrap();
    let vol = ProjectedTokenDir::create_named(tmp.path(), "vault-token", "x").unwrap();
    assert_eq!(vol.token_path(), tmp.path().join("vault-token"));
    assert_eq!(fs::read(vol.token_path()).unwrap(), b"x");
    for bad in ["", "..x", "a/b", "..", "/abs"] {
        let err = ProjectedTokenDir::create_named(tmp.path(), bad, "x").unwrap_err();
        assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad}");
    }
}

#[test]
fn timestamps_are_utc_in_the_go_layout() {
    let at = |secs| UNIX_EPOCH + std::time::Duration::from_secs(secs);
    assert_eq!(timestamp_prefix(at(0)), "..1970_01_01_00_00_00.");
    assert_eq!(
        timestamp_prefix(at(1_795_953_600)),
        "..2026_11_29_12_00_00."
    );
    assert_eq!(timestamp_prefix(at(951_868_799)), "..2000_02_29_23_59_59.");
}
