//! What the CLI's integration tests share.

use std::path::PathBuf;
use std::process::Command;

/// Where the build without libtorch goes: its own target folder, so that it never replaces the
/// training build in `target/release` (the suite's `scripts/test.sh` builds the same one there).
pub const NO_TRAIN_TARGET_DIR: &str = "target/no-train";

/// Builds the release `sagessd` without the `train` feature (no libtorch) into
/// [`NO_TRAIN_TARGET_DIR`] and returns its path.
#[allow(
    dead_code,
    reason = "only the tests that run the build without libtorch call it"
)]
pub fn release_sagessd_without_train() -> PathBuf {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .current_dir(root)
        .args([
            "build",
            "--quiet",
            "--release",
            "-p",
            "sagessd-cli",
            "--no-default-features",
        ])
        .args(["--target-dir", NO_TRAIN_TARGET_DIR])
        .status()
        .expect("running cargo");
    assert!(
        status.success(),
        "building the release sagessd without train failed"
    );
    PathBuf::from(root)
        .join(NO_TRAIN_TARGET_DIR)
        .join("release/sagessd")
}

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
