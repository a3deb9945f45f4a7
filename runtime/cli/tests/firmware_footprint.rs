//! `sagessd firmware footprint` and `device info`: what the firmware costs, in DRAM and at boot.

use std::process::Command;

use sagessd_emulator::HwConfig;

/// What `sagessd ARGS` prints on stdout; it must succeed.
fn sagessd(args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(args)
        .output()
        .expect("running sagessd");
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
}

#[test]
fn footprint_total_is_the_firmware_dram_size() {
    let stdout = sagessd(&["firmware", "footprint"]);
    let total: usize = stdout
        .lines()
        .find_map(|l| l.strip_prefix("total"))
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no total line in:\n{stdout}"));
    let expected = HwConfig::cosmos_plus().firmware_dram_bytes().unwrap();
    assert_eq!(total, expected);
    for region in [
        "l2p",
        "p2l",
        "page_buffer_data",
        "lane0.node_table",
        "lane1.neighbours",
        "slot0.nodes",
        "slot3.indices",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(region)),
            "{region} missing from:\n{stdout}"
        );
    }
    assert!(!stdout.contains("slot4."), "Cosmos+ has 4 ISP slots");
    // Sampling time-shares the Cosmos+'s two cores: a lane each.
    assert!(!stdout.contains("lane2."), "Cosmos+ has 2 sampling lanes");
    assert!(
        stdout.contains("each sampling lane costs"),
        "no per-lane cost in:\n{stdout}"
    );
}

/// `device info` boots the firmware four times; the replayed column is what each row's label
/// says was written since the checkpoint, and the erases come after the boot, one per die at
/// most (none after blank flash).
#[test]
fn device_info_reports_boot_times_that_follow_what_was_written() {
    let stdout = sagessd(&["device", "info", "--boot-pages", "64"]);
    assert!(
        stdout.contains("checkpoints of the FTL's tables:"),
        "{stdout}"
    );
    // Each row: label, then read, replayed, boot ms, erased after, erasing after ms.
    let row = |label: &str| -> Vec<f64> {
        let line = stdout
            .lines()
            .find(|l| l.trim_start().starts_with(label))
            .unwrap_or_else(|| panic!("no row {label:?} in:\n{stdout}"));
        let numbers: Vec<f64> = line
            .split_whitespace()
            .rev()
            .take(5)
            .map(|n| n.parse().unwrap_or_else(|_| panic!("{n:?} in {line:?}")))
            .collect();
        numbers.into_iter().rev().collect()
    };
    let blank = row("nothing (formatted)");
    let clean = row("64 pages, then a clean stop");
    let cut = row("64 more pages since it, power cut");
    let twice = row("128 pages since the checkpoint, cut");
    assert_eq!((blank[1], blank[3], blank[4]), (0.0, 0.0, 0.0), "{blank:?}");
    assert_eq!(clean[1], 0.0, "a clean stop replays nothing: {clean:?}");
    assert_eq!(cut[1], 64.0, "{cut:?}");
    assert_eq!(twice[1], 128.0, "{twice:?}");
    // Cosmos+ has 64 dies: one block each is erased to have one ready.
    for r in [&clean, &cut, &twice] {
        assert!(r[3] > 0.0 && r[3] <= 64.0 && r[4] > 0.0, "{r:?}");
    }
    for r in [&blank, &clean, &cut, &twice] {
        assert!(r[0] > 0.0 && r[2] > 0.0, "{r:?}");
    }
}
