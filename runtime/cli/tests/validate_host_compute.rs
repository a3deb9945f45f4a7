//! `sagessd validate host-compute`: the shipped `[host]` sampling costs are what this
//! machine's host sampler measures today (instructions under valgrind's callgrind, repeatable),
//! and a description whose cost is wrong is caught. The command measures the release build, so
//! the test builds it first (`common::release_sagessd_without_train`), the same build the suite's
//! QEMU guest uses (valgrind: `scripts/setup.sh` installs it).

use std::path::PathBuf;
use std::process::Command;

mod common;

/// Runs `validate host-compute --check --runs 1 ARGS` with `exe`; returns its exit success and
/// stdout.
fn check(exe: &PathBuf, args: &[&str]) -> (bool, String) {
    common::run_check(
        Command::new(exe)
            .args(["validate", "host-compute", "--check", "--runs", "1"])
            .args(args),
        "validate host-compute",
    )
}

#[test]
fn the_shipped_host_costs_are_current_and_a_wrong_one_is_caught() {
    // A debug build refuses: its instructions are not the shipped sampler's.
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["validate", "host-compute"])
        .output()
        .expect("running sagessd");
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("release build"));

    let exe = common::release_sagessd_without_train();
    let (ok, stdout) = check(&exe, &[]);
    assert!(ok, "{stdout}");
    assert!(stdout.contains("OK: "), "{stdout}");

    // A description whose [host] doubles the per-edge cost: the check names it.
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    let mut text = std::fs::read_to_string(format!("{root}/hw-configs/cosmos-plus.toml")).unwrap();
    let mut host = sagessd_emulator::host_stack::HostStackConfig::default();
    host.edge_sampled_ns *= 2;
    text.push_str("\n[host]\n");
    text.push_str(&toml::to_string(&host).unwrap());
    let dir =
        std::env::temp_dir().join(format!("sagessd-host-compute-test-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wrong.toml");
    std::fs::write(&path, text).unwrap();
    let (ok, stdout) = check(&exe, &["--config", path.to_str().unwrap()]);
    assert!(!ok, "{stdout}");
    let fail = stdout.lines().find(|l| l.starts_with("FAIL: ")).unwrap();
    assert!(fail.contains("host.edge_sampled_ns"), "{fail}");
    assert!(!fail.contains("host.node_ns"), "{fail}");
    std::fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn a_build_without_train_says_so_when_asked_to_train() {
    let exe = common::release_sagessd_without_train();
    let out = Command::new(&exe)
        .args(["train", "--dataset", "cora", "--epochs", "1"])
        .output()
        .expect("running sagessd");
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("built without the `train` feature"),
        "{stderr}"
    );
}
