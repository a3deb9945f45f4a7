//! `sagessd firmware footprint`: the table adds up to the DRAM the emulator gives the firmware.

use std::process::Command;

use sagessd_emulator::HwConfig;

#[test]
fn footprint_total_is_the_firmware_dram_size() {
    let out = Command::new(env!("CARGO_BIN_EXE_sagessd"))
        .args(["firmware", "footprint"])
        .output()
        .expect("running sagessd");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
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
        "node_hash",
        "slot0.nodes",
        "slot3.indices",
    ] {
        assert!(
            stdout.lines().any(|l| l.starts_with(region)),
            "{region} missing from:\n{stdout}"
        );
    }
    assert!(!stdout.contains("slot4."), "Cosmos+ has 4 ISP slots");
}
