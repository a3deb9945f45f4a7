//! Tests of the hardware description: the shipped files, and every check naming its field.

use super::*;

#[test]
fn cosmos_plus_parses_and_validates() {
    let c = HwConfig::cosmos_plus();
    assert_eq!(c.nand.channels, 8);
    assert_eq!(c.nand.ways, 8);
    assert_eq!(c.nand.page_size_bytes, 16384);
    assert_eq!(c.pcie.generation, 2);
    assert_eq!(c.pcie.lanes, 8);
    assert_eq!(c.cores.count, 2);
    assert!(c.nand.geometry().page_count() <= 1 << 24);
    assert!(c.firmware_dram_bytes().unwrap() as u64 <= u64::from(c.dram.capacity_mib) << 20);
    let n = HwConfig::newport();
    assert_eq!(n.device.name, "newport");
    assert!(n.cores.isp_cores > 0 && n.validate().is_ok());
}

/// Every `hw-configs/*.toml` the project ships, in path order (shared with the validation
/// tests).
pub(crate) fn shipped_configs() -> Vec<(std::path::PathBuf, HwConfig)> {
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../hw-configs");
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "toml"))
        .collect();
    paths.sort();
    paths
        .into_iter()
        .map(|p| {
            let c = HwConfig::load(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()));
            (p, c)
        })
        .collect()
}

#[test]
fn every_shipped_config_parses_validates_and_round_trips() {
    let configs = shipped_configs();
    let names: Vec<_> = configs
        .iter()
        .map(|(_, c)| c.device.name.as_str())
        .collect();
    for expected in ["cosmos-plus", "gen4-ssd", "newport", "smartssd-fpga"] {
        assert!(
            names.contains(&expected),
            "{expected} missing from {names:?}"
        );
    }
    for (path, c) in &configs {
        let stem = path.file_stem().unwrap().to_str().unwrap();
        assert_eq!(c.device.name, stem, "device.name matches the file name");
        let text = toml::to_string(c).unwrap();
        assert_eq!(&HwConfig::from_toml_str(&text).unwrap(), c, "{stem}");
        let dram = c.firmware_dram_bytes().unwrap() as u64;
        assert!(dram <= u64::from(c.dram.capacity_mib) << 20, "{stem}");
    }
    let gen4 = &configs
        .iter()
        .find(|(_, c)| c.device.name == "gen4-ssd")
        .unwrap()
        .1;
    assert!(!gen4.firmware.isp, "the commodity SSD has no ISP");
    assert!(HwConfig::cosmos_plus().firmware.isp, "isp defaults to true");
    assert!(
        HwConfig::cosmos_plus().p2p.is_none(),
        "p2p defaults to absent"
    );
    let smartssd = &configs
        .iter()
        .find(|(_, c)| c.device.name == "smartssd-fpga")
        .unwrap()
        .1;
    let p2p = smartssd
        .p2p
        .as_ref()
        .expect("the FPGA CSD has a [p2p] link");
    assert_eq!((p2p.generation, p2p.lanes), (3, 4));
    assert!(smartssd.firmware.isp);
}

#[test]
fn every_shipped_parameter_has_a_source_comment() {
    // Each `key = value` line must follow a comment (its source or reasoning), directly or
    // as part of a commented group of keys.
    let dir = concat!(env!("CARGO_MANIFEST_DIR"), "/../hw-configs");
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_none_or(|x| x != "toml") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let mut commented = false;
        for line in text.lines() {
            let t = line.trim();
            if t.starts_with('#') {
                commented = true;
            } else if t.is_empty() || t.starts_with('[') {
                commented = false;
            } else {
                assert!(commented, "{}: `{t}` has no source comment", path.display());
            }
        }
    }
}

#[test]
fn round_trips_through_toml() {
    let c = HwConfig::cosmos_plus();
    let text = toml::to_string(&c).unwrap();
    assert_eq!(HwConfig::from_toml_str(&text).unwrap(), c);
}

#[test]
fn load_reads_a_file_and_names_a_missing_one() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../hw-configs/cosmos-plus.toml"
    );
    assert_eq!(HwConfig::load(path).unwrap(), HwConfig::cosmos_plus());
    let err = HwConfig::load("/nonexistent/x.toml")
        .unwrap_err()
        .to_string();
    assert!(err.contains("/nonexistent/x.toml"), "{err}");
}

/// The shipped text with one `key = value` line of `section` replaced.
fn patched(section: &str, key: &str, value: &str) -> String {
    let mut out = String::new();
    let mut current = String::new();
    let mut replaced = false;
    for line in COSMOS_PLUS_TOML.lines() {
        let t = line.trim_start();
        if t.starts_with('[') {
            current = t.trim_matches(|c| c == '[' || c == ']').to_string();
        }
        let is_key = t
            .split_once('=')
            .is_some_and(|(k, _)| k.trim() == key && !t.starts_with('#'));
        if current == section && is_key {
            out.push_str(&format!("{key} = {value}\n"));
            replaced = true;
        } else {
            out.push_str(line);
            out.push('\n');
        }
    }
    assert!(replaced, "{section}.{key} not found in cosmos-plus.toml");
    out
}

fn rejects(section: &str, key: &str, value: &str, expect: &str) {
    let err = HwConfig::from_toml_str(&patched(section, key, value))
        .expect_err(&format!("{section}.{key} = {value} must be rejected"))
        .to_string();
    let field = format!("{section}.{key}");
    assert!(
        err.contains(&field) || err.contains(key),
        "error for {field} = {value} does not name the field: {err}"
    );
    assert!(err.contains(expect), "error for {field} = {value}: {err}");
}

#[test]
fn every_invalid_field_is_rejected_with_its_name() {
    rejects("device", "name", "\"  \"", "must not be empty");
    rejects("nand", "channels", "0", "greater than 0");
    rejects("nand", "ways", "0", "greater than 0");
    rejects("nand", "dies_per_way", "0", "greater than 0");
    rejects("nand", "blocks_per_die", "0", "greater than 0");
    rejects("nand", "blocks_per_die", "4000000000", "2^32");
    rejects("nand", "pages_per_block", "0", "greater than 0");
    rejects(
        "nand",
        "page_size_bytes",
        "1000",
        "multiple of 512 (got 1000)",
    );
    rejects("nand", "page_size_bytes", "0", "multiple of 512");
    rejects("nand", "t_read_ns", "0", "between 1 and");
    rejects("nand", "t_program_ns", "0", "between 1 and");
    rejects("nand", "t_erase_ns", "20000000000", "between 1 and");
    rejects("nand", "channel_rate_mb_s", "0", "greater than 0");
    rejects("nand", "command_overhead_ns", "20000000000", "at most");
    rejects("pcie", "generation", "0", "between 1 and 5 (got 0)");
    rejects("pcie", "generation", "6", "between 1 and 5 (got 6)");
    rejects("pcie", "lanes", "3", "(got 3)");
    rejects("pcie", "max_payload_bytes", "100", "power of two (got 100)");
    rejects("pcie", "max_payload_bytes", "64", "between 128 and 4096");
    rejects("pcie", "tlp_overhead_bytes", "0", "between 1 and 128");
    rejects("pcie", "dma_read_setup_ns", "20000000000", "at most");
    rejects("pcie", "posted_write_setup_ns", "20000000000", "at most");
    rejects("controller", "doorbell_ns", "20000000000", "at most");
    rejects("controller", "interrupt_ns", "20000000000", "at most");
    rejects("cores", "count", "0", "between 1 and 64");
    rejects("cores", "clock_mhz", "0", "between 1 and");
    rejects("cores", "isp_cores", "2", "between 0 and 1");
    rejects("cores", "cycles_per_command", "2000000000", "at most");
    rejects("cores", "cycles_per_flash_op", "2000000000", "at most");
    rejects("cores", "cycles_per_page_lookup", "2000000000", "at most");
    rejects("cores", "cycles_per_page_scanned", "2000000000", "at most");
    rejects("cores", "cycles_per_row_gathered", "2000000000", "at most");
    rejects("cores", "cycles_per_edge_sampled", "2000000000", "at most");
    rejects("cores", "cycles_per_target", "2000000000", "at most");
    rejects("cores", "cycles_per_node_added", "2000000000", "at most");
    rejects("cores", "cycles_per_destination", "2000000000", "at most");
    rejects("cores", "cycles_per_stale_repeat", "2000000000", "at most");
    rejects("cores", "cycles_per_edge_emitted", "2000000000", "at most");
    rejects("cores", "cycles_per_edge_drawn", "2000000000", "at most");
    rejects("cores", "cycles_per_radix_pass", "2000000000", "at most");
    rejects("cores", "cycles_per_kib_copied", "2000000000", "at most");
    rejects("cores", "cycles_per_sort_key_move", "2000000000", "at most");
    rejects("cores", "cycles_per_block_scanned", "2000000000", "at most");
    rejects("cores", "cycles_per_poll", "2000000000", "at most");
    rejects(
        "cores",
        "cycles_per_parked_command",
        "2000000000",
        "at most",
    );
    rejects(
        "cores",
        "cycles_per_kib_flash_read",
        "2000000000",
        "at most",
    );
    rejects(
        "cores",
        "cycles_per_kib_flash_program",
        "2000000000",
        "at most",
    );
    rejects("dram", "capacity_mib", "0", "greater than 0");
    rejects("dram", "bandwidth_mb_s", "0", "greater than 0");
    rejects("dram", "capacity_mib", "1", "the firmware needs");
    rejects("firmware", "page_buffer_pages", "0", "greater than 0");
    rejects("firmware", "isp_slots", "0", "between 1 and");
    rejects("firmware", "isp_slots", "255", "between 1 and");
    // Cosmos+ has two sampling lanes: 2..=512 pages.
    rejects("firmware", "isp_window_pages", "1", "between 2 and 512");
    rejects("firmware", "isp_window_pages", "513", "between 2 and 512");
    rejects("firmware", "max_targets", "0", "greater than 0");
    rejects("firmware", "max_fanout", "0", "between 1 and 1024");
    rejects("firmware", "max_subgraph_nodes", "0", "greater than 0");
    rejects("firmware", "max_subgraph_edges", "0", "greater than 0");
    rejects("firmware", "max_transfer_bytes", "5000", "power of two");
    rejects("firmware", "max_transfer_bytes", "2048", "power of two");
    rejects(
        "firmware",
        "over_provisioning_percent",
        "50",
        "between 0 and 49",
    );
    rejects("firmware", "page_buffer_pages", "1004", "multiple");
    rejects("firmware", "page_buffer_pages", "8", "between 16 and 32768");
    rejects("firmware", "max_fanout", "2000", "between 1 and 1024");
    rejects("firmware", "max_targets", "3000000", "max_subgraph_nodes");
    rejects("firmware", "max_subgraph_edges", "300000000", "2^28");
    rejects(
        "firmware",
        "max_transfer_bytes",
        "1048576",
        "fewer than 63 flash pages",
    );
    rejects(
        "firmware",
        "block_size_bytes",
        "1000",
        "power of two (got 1000)",
    );
    rejects(
        "firmware",
        "block_size_bytes",
        "256",
        "between 512 and 16384",
    );
    rejects(
        "firmware",
        "block_size_bytes",
        "32768",
        "between 512 and 16384",
    );
}

#[test]
fn unknown_missing_and_mistyped_fields_are_named() {
    let unknown = COSMOS_PLUS_TOML.replace("[nand]", "[nand]\nt_read_us = 5");
    let err = HwConfig::from_toml_str(&unknown).unwrap_err().to_string();
    assert!(err.contains("t_read_us"), "{err}");

    let unknown_section = format!("{COSMOS_PLUS_TOML}\n[gpu]\ncount = 1\n");
    let err = HwConfig::from_toml_str(&unknown_section)
        .unwrap_err()
        .to_string();
    assert!(err.contains("gpu"), "{err}");

    let missing: String = COSMOS_PLUS_TOML
        .lines()
        .filter(|l| !l.trim_start().starts_with("t_erase_ns"))
        .map(|l| format!("{l}\n"))
        .collect();
    let err = HwConfig::from_toml_str(&missing).unwrap_err().to_string();
    assert!(err.contains("t_erase_ns"), "{err}");

    let err = HwConfig::from_toml_str(&patched("pcie", "lanes", "\"eight\""))
        .unwrap_err()
        .to_string();
    assert!(err.contains("lanes"), "{err}");
}
