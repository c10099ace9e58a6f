//! This test binary run again, for one test: a test that needs a process of its own (it
//! counts the process's threads, descriptors or inotify watches, installs something
//! process-wide, mounts a filesystem) shares its binary with others and runs its body in
//! a child process, alone.

use std::process::Command;

/// The env variable that names the test a child process runs alone ([`in_own_process`]).
const ALONE: &str = "BEARER_RELOAD_ALONE";

/// The name the test harness knows test `name` of module `module` (its `module_path!()`)
/// by, as `--exact` takes it: the path without the binary's name, `leak::a_test`.
pub fn test_name(module: &str, name: &str) -> String {
    match module.split_once("::") {
        Some((_, path)) => format!("{path}::{name}"),
        None => name.to_owned(),
    }
}

/// How many tests of this binary, ignored ones too, `--exact test` selects: 1, or the name
/// is wrong and the child would run none.
pub fn listed(test: &str) -> usize {
    let out = Command::new(std::env::current_exe().unwrap())
        .args([test, "--exact", "--list", "--format", "terse"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{out:?}");
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.ends_with(": test"))
        .count()
}

/// Whether this process is the one test `name` of `module` (its `module_path!()`) runs its
/// body in: true in a child process that runs it alone. Otherwise this runs this test
/// binary again for that test alone, shows its output, checks that it ran exactly that one
/// test and that it passed, and returns false: the test is done.
///
/// ```ignore
/// #[test]
/// fn counts_the_threads() {
///     if !support::alone::in_own_process(module_path!(), "counts_the_threads") {
///         return;
///     }
///     // The test's body, alone in its process.
/// }
/// ```
pub fn in_own_process(module: &str, name: &str) -> bool {
    let test = test_name(module, name);
    if std::env::var_os(ALONE).is_some_and(|v| v == test.as_str()) {
        return true;
    }
    let out = Command::new(std::env::current_exe().unwrap())
        .args([&test, "--exact", "--nocapture"])
        .env(ALONE, &test)
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    print!("{stdout}");
    eprint!("{stderr}");
    assert!(out.status.success(), "{test} failed in its own process");
    assert!(
        stdout.lines().any(|l| l == "running 1 test")
            && stdout.contains("test result: ok. 1 passed;"),
        "{test}: not exactly one test ran in its own process"
    );
    false
}
