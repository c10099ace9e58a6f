//! Executable scripts that tests write and then run as exec plugins. One file, compiled
//! into the crate's own tests (`src/test_support.rs`) and into `tests/support`.
#![allow(dead_code, unreachable_pub)]

use std::io::ErrorKind;
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Set while a script is run to check that it can be: the script leaves at once.
const WARM_UP: &str = "BEARER_RELOAD_TEST_WARM_UP";

/// Writes `body` as an executable `#!/bin/sh` script at `path`, ready to run.
///
/// A process that another test spawns while this write's descriptor is open inherits
/// it until that child execs, and meanwhile running the script fails with `ETXTBSY`
/// ("text file busy", golang/go#22315). So the script is run once here, in a mode that
/// leaves at once, until the kernel lets it run; from then on no descriptor for writing
/// is left anywhere.
pub fn write_script(path: &Path, body: &str) {
    let text = format!("#!/bin/sh\nif [ -n \"${WARM_UP}\" ]; then exit 0; fi\n{body}\n");
    std::fs::write(path, text).unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match Command::new(path).env(WARM_UP, "1").status() {
            Ok(status) => {
                assert!(status.success(), "{}: {status}", path.display());
                return;
            }
            Err(e) if e.kind() == ErrorKind::ExecutableFileBusy && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1));
            }
            Err(e) => panic!("{} cannot run: {e}", path.display()),
        }
    }
}
