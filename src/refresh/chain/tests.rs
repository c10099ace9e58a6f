use super::*;
use std::os::unix::fs::symlink;

/// A canonical temporary directory with `dirs` created in it.
fn tmp(dirs: &[&str]) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let root = tmp.path().canonicalize().unwrap();
    for dir in dirs {
        std::fs::create_dir_all(root.join(dir)).unwrap();
    }
    (tmp, root)
}

fn entry(dir: &Path, name: &str) -> Entry {
    Entry {
        dir: dir.to_owned(),
        name: name.into(),
    }
}

fn entries(path: &Path) -> Vec<Entry> {
    let chain = Start::of(path).resolve();
    assert_eq!(chain.error, None);
    chain.entries
}

#[test]
fn a_plain_file_is_its_name_in_its_canonical_directory() {
    let (_tmp, root) = tmp(&["real"]);
    std::fs::write(root.join("real/token"), "x").unwrap();
    symlink(root.join("real"), root.join("alias")).unwrap();
    let want = vec![entry(&root.join("real"), "token")];
    assert_eq!(entries(&root.join("real/token")), want);
    // The directories above the path as given are resolved, not watched.
    assert_eq!(entries(&root.join("alias/./token")), want);
    // A missing file is watched for, by name.
    assert_eq!(
        entries(&root.join("real/absent")),
        [entry(&root.join("real"), "absent")]
    );
    // A bare name, in the current directory.
    assert_eq!(
        Start::of(Path::new("token")).resolve().entries[0].dir,
        std::env::current_dir().unwrap().canonicalize().unwrap()
    );
}

#[test]
fn links_into_other_directories_are_followed_link_by_link() {
    let (_tmp, root) = tmp(&["app", "vault", "mid"]);
    std::fs::write(root.join("vault/token"), "x").unwrap();
    // An absolute link out of the directory.
    symlink(root.join("vault/token"), root.join("app/token")).unwrap();
    assert_eq!(
        entries(&root.join("app/token")),
        [
            entry(&root.join("app"), "token"),
            entry(&root.join("vault"), "token")
        ]
    );
    // A chain of two, relative targets resolved against each link's own directory.
    symlink("../mid/link", root.join("app/two")).unwrap();
    symlink("../vault/token", root.join("mid/link")).unwrap();
    assert_eq!(
        entries(&root.join("app/two")),
        [
            entry(&root.join("app"), "two"),
            entry(&root.join("mid"), "link"),
            entry(&root.join("vault"), "token"),
        ]
    );
}

#[test]
fn a_directory_link_in_a_target_is_one_more_link() {
    let (_tmp, root) = tmp(&["app", "secrets/v1"]);
    std::fs::write(root.join("secrets/v1/token"), "x").unwrap();
    symlink("v1", root.join("secrets/current")).unwrap();
    symlink(root.join("secrets/current/token"), root.join("app/token")).unwrap();
    assert_eq!(
        entries(&root.join("app/token")),
        [
            entry(&root.join("app"), "token"),
            entry(&root.join("secrets"), "current"),
            entry(&root.join("secrets/v1"), "token"),
        ]
    );
}

#[test]
fn the_kubelets_payload_is_watched_through_its_data_link() {
    let (_tmp, root) = tmp(&["vol/..2026_11_29_12_00_00.123456789"]);
    let vol = root.join("vol");
    std::fs::write(vol.join("..2026_11_29_12_00_00.123456789/token"), "x").unwrap();
    symlink("..2026_11_29_12_00_00.123456789", vol.join("..data")).unwrap();
    symlink("..data/token", vol.join("token")).unwrap();
    // Not the timestamped directory: it is never changed, only replaced through `..data`.
    assert_eq!(
        entries(&vol.join("token")),
        [entry(&vol, "token"), entry(&vol, "..data")]
    );
}

#[test]
fn a_directory_at_the_path_is_watched_for_by_name() {
    // Read errors until a file replaces it; that replacement is an event for this name.
    let (_tmp, root) = tmp(&["app/token"]);
    assert_eq!(
        entries(&root.join("app/token")),
        [entry(&root.join("app"), "token")]
    );
}

#[test]
fn a_missing_part_is_watched_for_in_the_last_directory_that_exists() {
    let (_tmp, root) = tmp(&["app"]);
    symlink(root.join("gone/deeper/token"), root.join("app/token")).unwrap();
    assert_eq!(
        entries(&root.join("app/token")),
        [entry(&root.join("app"), "token"), entry(&root, "gone")]
    );
    // A file where a directory should be.
    std::fs::write(root.join("gone"), "x").unwrap();
    assert_eq!(
        entries(&root.join("app/token")),
        [entry(&root.join("app"), "token"), entry(&root, "gone")]
    );
}

#[test]
fn a_loop_is_an_error_and_its_links_are_still_watched() {
    let (_tmp, root) = tmp(&["d"]);
    let d = root.join("d");
    symlink("a", d.join("token")).unwrap();
    symlink("b", d.join("a")).unwrap();
    symlink("a", d.join("b")).unwrap();
    let chain = Start::of(&d.join("token")).resolve();
    assert_eq!(
        chain.error,
        Some(ChainError::TooManyLinks {
            path: d.join("token"),
            limit: MAX_LINKS
        })
    );
    let message = chain.error.unwrap().to_string();
    assert!(
        message.contains("token") && message.contains("loop"),
        "{message}"
    );
    assert_eq!(
        chain.entries,
        [entry(&d, "token"), entry(&d, "a"), entry(&d, "b")]
    );

    // Forty links are fine, forty-one are not.
    let (_tmp, root) = tmp(&["long"]);
    let long = root.join("long");
    std::fs::write(long.join("end"), "x").unwrap();
    let mut next = "end".to_owned();
    for i in 0..MAX_LINKS {
        symlink(&next, long.join(format!("l{i}"))).unwrap();
        next = format!("l{i}");
    }
    let chain = Start::of(&long.join(&next)).resolve();
    assert_eq!(chain.error, None);
    assert_eq!(chain.entries.len(), MAX_LINKS + 1);
    symlink(&next, long.join("one-more")).unwrap();
    assert!(Start::of(&long.join("one-more")).resolve().error.is_some());
}
