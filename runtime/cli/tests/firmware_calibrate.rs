//! `sagessd firmware calibrate`: the shipped descriptions' measured `[cores]` costs are what
//! the firmware measures today, a mean of half the arena placements moves none by more than
//! 3 % when the other half replace them (the halves spread), every held-out check is predicted
//! within 10 %, the check minibatch costs at most 100 M cycles, and a description whose cost
//! is wrong is caught;
//! `sagessd firmware profile` attributes a workload's cycles to the code. Each calibration
//! boots the calibration image under QEMU sixteen times (the arena's placements, 3–5 minutes
//! on two cores; a run identical to an earlier one is read back instead) and builds it first
//! (cargo, gcc-arm-none-eabi, qemu-system-arm: `scripts/setup.sh` installs them). Cosmos+ runs
//! on an emulated Cortex-A9 (ARMv7), the Newport-class description on a Cortex-A53 (AArch64).

use std::process::Command;

mod common;

/// Runs `sagessd firmware calibrate --check ARGS`; returns its exit success and stdout.
fn calibrate_check(args: &[&str]) -> (bool, String) {
    common::run_check(
        Command::new(env!("CARGO_BIN_EXE_sagessd"))
            .args(["firmware", "calibrate", "--check"])
            .args(args),
        "calibration",
    )
}

#[test]
fn the_shipped_costs_are_current_and_a_wrong_one_is_caught() {
    let root = concat!(env!("CARGO_MANIFEST_DIR"), "/../..");
    for description in ["cosmos-plus", "newport"] {
        let path = format!("{root}/hw-configs/{description}.toml");
        let (ok, stdout) = calibrate_check(&["--config", &path]);
        assert!(ok, "{description}:\n{stdout}");
        assert!(stdout.contains("OK: every measured cost"), "{stdout}");
        // "check NAME: the firmware measured M Mcycles; its fitted costs predict P (+E %); ..."
        let checks: Vec<&str> = stdout.lines().filter(|l| l.starts_with("check ")).collect();
        assert!(
            checks.len() >= 4,
            "{description}: the held-out checks:\n{stdout}"
        );
        for line in checks.iter().filter(|l| l.contains("predict")) {
            let error: f64 = line
                .split_once("predict ")
                .and_then(|(_, r)| r.split_once('('))
                .and_then(|(_, r)| r.split_once(' '))
                .and_then(|(p, _)| p.parse().ok())
                .unwrap_or_else(|| panic!("no prediction error in {line:?}"));
            assert!(error.abs() <= 10.0, "{description}: {line}");
        }
        // Each fitted cost's "halves" (its fits on the mean of every other arena placement and
        // on the mean of the rest) within 3 %: a mean of eight placements moves no unit by more
        // than that when eight others replace them (the mean of all sixteen moves less).
        let rows: Vec<&str> = stdout
            .lines()
            .skip_while(|l| !l.starts_with("[cores] cost"))
            .skip(1)
            .take_while(|l| l.starts_with("cycles_per_"))
            .filter(|l| !l.ends_with("not measured"))
            .collect();
        assert!(rows.len() >= 10, "{description}: the cost rows:\n{stdout}");
        for row in rows {
            let halves: f64 = row
                .split_whitespace()
                .last()
                .and_then(|h| h.strip_suffix('%'))
                .and_then(|h| h.parse().ok())
                .unwrap_or_else(|| panic!("no halves spread in {row:?}"));
            assert!(halves <= 3.0, "{description}: {row}");
        }
        // "check minibatch (...): X Mcycles a minibatch on the firmware ..."
        let line = checks
            .iter()
            .find(|l| l.starts_with("check minibatch"))
            .unwrap_or_else(|| panic!("no check minibatch line:\n{stdout}"));
        let cycles: f64 = line
            .split_once("): ")
            .and_then(|(_, r)| r.split_once(' '))
            .and_then(|(m, _)| m.parse().ok())
            .unwrap_or_else(|| panic!("no cycles in {line:?}"));
        assert!(cycles <= 100.0, "{description}: {line}");
    }
    // Double one measured cost: the check must name it.
    let text = std::fs::read_to_string(format!("{root}/hw-configs/cosmos-plus.toml")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with("cycles_per_edge_sampled = "))
        .expect("cosmos-plus.toml prices sampled edges");
    let cost: u64 = line["cycles_per_edge_sampled = ".len()..].parse().unwrap();
    let wrong = text.replace(line, &format!("cycles_per_edge_sampled = {}", 2 * cost));
    let dir = std::env::temp_dir().join(format!("sagessd-calibrate-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("wrong.toml");
    std::fs::write(&path, wrong).unwrap();
    let (ok, stdout) = calibrate_check(&["--config", path.to_str().unwrap()]);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!ok, "a doubled cost passed --check:\n{stdout}");
    let fail = stdout.lines().find(|l| l.starts_with("FAIL: ")).unwrap();
    assert!(
        fail.contains(&format!("cycles_per_edge_sampled = {}", 2 * cost)),
        "{fail}"
    );
    assert!(
        !fail.contains("cycles_per_edge_drawn"),
        "only the doubled cost is stale: {fail}"
    );
}

#[test]
fn a_profile_names_where_a_workload_spends_and_adds_up_to_it() {
    let (ok, stdout) = common::run_check(
        Command::new(env!("CARGO_BIN_EXE_sagessd")).args([
            "firmware",
            "profile",
            "--workload",
            "idle_polls",
            "--top",
            "3",
        ]),
        "profile",
    );
    assert!(ok, "{stdout}");
    // "share    cum   Mcycles ..." then rows; the last row sums the others.
    let rows: Vec<&str> = stdout
        .lines()
        .skip_while(|l| !l.trim_start().starts_with("share"))
        .skip(1)
        .collect();
    assert_eq!(rows.len(), 4, "three rows and the rest:\n{stdout}");
    // An idle firmware's polls are spent in its poll loop (dispatch.rs).
    assert!(rows[0].contains("firmware/src/dispatch.rs"), "{stdout}");
    let cumulative: f64 = rows[3]
        .split_whitespace()
        .nth(1)
        .and_then(|c| c.trim_end_matches('%').parse().ok())
        .unwrap_or_else(|| panic!("no cumulative share in {:?}", rows[3]));
    assert!(
        (cumulative - 100.0).abs() < 0.05,
        "the groups add up to the workload: {stdout}"
    );
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["firmware", "profile", "--workload", "no_such"])
        .output()
        .expect("running sagessd");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains("no calibration workload is called \"no_such\"")
            && stderr.contains("check_minibatch"),
        "{stderr}"
    );
}
