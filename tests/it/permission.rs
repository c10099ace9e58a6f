//! Permission denied on a token file is a real `EACCES` here, even when the tests run as root
//! (as in CI and most containers, where root reads any file): the scenario then runs in a
//! child process as `nobody`.

use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::Path;
use std::process::Command;

use crate::support;

use bearer_reload::source::FileError;
use support::quiet_store;

const CHILD: &str = "BEARER_RELOAD_PERMISSION_CHILD";
const TEST: &str = "an_unreadable_file_is_an_error_naming_the_path_and_the_last_token_stays";
const NOBODY: u32 = 65534;

fn uid() -> u32 {
    std::fs::metadata("/proc/self").unwrap().uid()
}

#[test]
fn an_unreadable_file_is_an_error_naming_the_path_and_the_last_token_stays() {
    if let Some(dir) = std::env::var_os(CHILD) {
        scenario(Path::new(&dir));
        println!("permission scenario ran as uid {}", uid());
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    if uid() != 0 {
        scenario(dir.path());
        return;
    }
    // As root: a copy of this test binary, in a directory `nobody` owns, runs the scenario
    // as `nobody` (setpriv is util-linux's, on every Debian-based machine).
    std::os::unix::fs::chown(dir.path(), Some(NOBODY), Some(NOBODY)).unwrap();
    let exe = dir.path().join("permission-test");
    std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = Command::new("setpriv")
        .args([
            &format!("--reuid={NOBODY}"),
            &format!("--regid={NOBODY}"),
            "--clear-groups",
            "--",
        ])
        .arg(&exe)
        .args(["--exact", &support::alone::test_name(module_path!(), TEST)])
        .args(["--nocapture", "--test-threads=1"])
        .env(CHILD, dir.path())
        .output()
        .expect("setpriv runs the scenario as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains(&format!("permission scenario ran as uid {NOBODY}")),
        "{stdout}"
    );
}

fn scenario(dir: &Path) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let (path, store) = quiet_store(dir, "good").await;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o000)).unwrap();

        // Later: the reload fails, names the path and the problem, and the token stays.
        let err = store.reload().await.unwrap_err();
        let source = err.downcast_ref::<FileError>();
        assert!(matches!(source, Some(FileError::Read { .. })), "{err:?}");
        let msg = support::chain(&err);
        assert_eq!(
            msg,
            format!(
                "cannot fetch from file {}: cannot read the file: Permission denied \
                 (os error 13)",
                path.display()
            )
        );
        assert_eq!(store.current().header_value(), "Bearer good");
        let reported = store.status().last_error.expect("the failure is reported");
        assert_eq!(support::chain(&reported), msg);

        // At start: no store, an error naming the path.
        let err = support::file(&path).load().await.unwrap_err();
        assert_eq!(support::chain(&err), msg);

        // Readable again: the next reload clears the error.
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
        store.reload().await.unwrap();
        assert!(store.status().last_error.is_none());
    });
}
