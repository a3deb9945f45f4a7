//! What the CLI's integration tests share.

use std::process::Command;

/// Runs a `--check` command; returns its exit success and stdout. A failed check exits 1 after
/// its table and a `FAIL: ` line; any other failure (a missing tool, a failed build or image)
/// is an error of the run itself, which fails the test here, naming `what`.
pub fn run_check(command: &mut Command, what: &str) -> (bool, String) {
    let out = command.output().expect("running sagessd");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() || stdout.contains("FAIL: "),
        "{what} did not run:\n{stdout}{stderr}"
    );
    (out.status.success(), stdout)
}
