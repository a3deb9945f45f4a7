//! Unit tests: the C header against the Rust definitions, and the pure parts of the library.
//!
//! The header check compiles `tests/c/abi_check.c` with the host C compiler (`$CC`, else `cc`),
//! runs it, and compares every value it prints with the Rust constants and layouts below; it
//! also checks that every `#define SAGESSD_*` of the header is compared, so nothing can be added
//! to one side only. The full API is exercised from C by `tests/c_api.rs`.

use std::collections::BTreeMap;
use std::mem::{offset_of, size_of};
use std::path::{Path, PathBuf};
use std::process::Command;

use sagessd_abi::nvme::{admin_opcode, io_opcode};
use sagessd_firmware::ConfigError;

use crate::types::*;

fn manifest_dir() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn header() -> PathBuf {
    manifest_dir().join("../include/sagessd_fw.h")
}

/// The host C compiler, or `None` (the test then says it is skipped).
fn cc() -> Option<String> {
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let ok = Command::new(&cc)
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(cc)
}

/// A fresh scratch directory for this test's files.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("sagessd-ffi-{name}-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("creating a scratch directory");
    dir
}

/// Every value the header must define, and every layout it must have, from the Rust side.
fn expected() -> BTreeMap<String, i64> {
    let mut m: BTreeMap<String, i64> = BTreeMap::new();
    let mut put = |k: &str, v: i64| {
        assert!(m.insert(k.to_string(), v).is_none(), "{k} listed twice");
    };
    put("SAGESSD_FW_ABI_VERSION", ABI_VERSION.into());
    put(
        "SAGESSD_FW_SPARE_BYTES",
        sagessd_firmware::hal::SPARE_BYTES as i64,
    );
    put("SAGESSD_OK", OK.into());
    put("SAGESSD_COMPLETED", COMPLETED.into());
    put("SAGESSD_PENDING", PENDING.into());
    put("SAGESSD_ERR_BUSY", ERR_BUSY.into());
    put("SAGESSD_ERR_ARGUMENT", ERR_ARGUMENT.into());
    put("SAGESSD_ERR_STATE", ERR_STATE.into());
    put("SAGESSD_ERR_QUEUE_FULL", ERR_QUEUE_FULL.into());
    put("SAGESSD_ERR_CONFIG", ERR_CONFIG.into());
    for (error, name) in CONFIG_ERRORS {
        put(
            &format!("SAGESSD_ERR_CONFIG_{name}"),
            config_error_code(error).into(),
        );
    }
    put("SAGESSD_MAX_COMMANDS", MAX_COMMANDS.into());
    put("SAGESSD_FLASH_QUEUE_DEPTH", FLASH_QUEUE_DEPTH.into());
    put("SAGESSD_SQE_BYTES", SQE_BYTES.into());
    put("SAGESSD_CQE_BYTES", CQE_BYTES.into());
    put("SAGESSD_DRAM_ALIGN", DRAM_ALIGN.into());
    put("SAGESSD_ADMIN_IDENTIFY", admin_opcode::IDENTIFY.into());
    put("SAGESSD_IO_FLUSH", io_opcode::FLUSH.into());
    put("SAGESSD_IO_WRITE", io_opcode::WRITE.into());
    put("SAGESSD_IO_READ", io_opcode::READ.into());
    put("SAGESSD_IO_DSM", io_opcode::DATASET_MANAGEMENT.into());
    put("SAGESSD_IO_GRAPH_ATTACH", io_opcode::GRAPH_ATTACH.into());
    put("SAGESSD_IO_NS_SUBMIT", io_opcode::NS_SUBMIT.into());
    put("SAGESSD_IO_NS_COLLECT", io_opcode::NS_COLLECT.into());
    // The firmware serves namespace 1 only (firmware/src/dispatch.rs `NSID`).
    put("SAGESSD_NSID", 1);
    put("SAGESSD_FLASH_READ", FLASH_READ.into());
    put("SAGESSD_FLASH_PROGRAM", FLASH_PROGRAM.into());
    put("SAGESSD_FLASH_ERASE", FLASH_ERASE.into());
    put("SAGESSD_FLASH_SUBMIT_STARTED", FLASH_SUBMIT_STARTED.into());
    put("SAGESSD_FLASH_SUBMIT_BUSY", FLASH_SUBMIT_BUSY.into());
    put("SAGESSD_FLASH_OK", FLASH_OK.into());
    put("SAGESSD_FLASH_MEDIA", FLASH_MEDIA.into());

    let mut layout = |k: &str, v: usize| put(k, v as i64);
    layout("sizeof(sagessd_geometry)", size_of::<SagessdGeometry>());
    layout(
        "offsetof(sagessd_geometry.channels)",
        offset_of!(SagessdGeometry, channels),
    );
    layout(
        "offsetof(sagessd_geometry.ways)",
        offset_of!(SagessdGeometry, ways),
    );
    layout(
        "offsetof(sagessd_geometry.dies_per_way)",
        offset_of!(SagessdGeometry, dies_per_way),
    );
    layout(
        "offsetof(sagessd_geometry.blocks_per_die)",
        offset_of!(SagessdGeometry, blocks_per_die),
    );
    layout(
        "offsetof(sagessd_geometry.pages_per_block)",
        offset_of!(SagessdGeometry, pages_per_block),
    );
    layout(
        "offsetof(sagessd_geometry.page_size_bytes)",
        offset_of!(SagessdGeometry, page_size_bytes),
    );
    layout("sizeof(sagessd_config)", size_of::<SagessdConfig>());
    layout(
        "offsetof(sagessd_config.block_size_log2)",
        offset_of!(SagessdConfig, block_size_log2),
    );
    layout(
        "offsetof(sagessd_config.over_provisioning_percent)",
        offset_of!(SagessdConfig, over_provisioning_percent),
    );
    layout(
        "offsetof(sagessd_config.isp_slots)",
        offset_of!(SagessdConfig, isp_slots),
    );
    layout(
        "offsetof(sagessd_config.reserved0)",
        offset_of!(SagessdConfig, reserved0),
    );
    layout(
        "offsetof(sagessd_config.page_buffer_pages)",
        offset_of!(SagessdConfig, page_buffer_pages),
    );
    layout(
        "offsetof(sagessd_config.max_targets)",
        offset_of!(SagessdConfig, max_targets),
    );
    layout(
        "offsetof(sagessd_config.max_fanout)",
        offset_of!(SagessdConfig, max_fanout),
    );
    layout(
        "offsetof(sagessd_config.reserved1)",
        offset_of!(SagessdConfig, reserved1),
    );
    layout(
        "offsetof(sagessd_config.max_subgraph_nodes)",
        offset_of!(SagessdConfig, max_subgraph_nodes),
    );
    layout(
        "offsetof(sagessd_config.max_subgraph_edges)",
        offset_of!(SagessdConfig, max_subgraph_edges),
    );
    layout(
        "offsetof(sagessd_config.max_transfer_bytes)",
        offset_of!(SagessdConfig, max_transfer_bytes),
    );
    layout(
        "offsetof(sagessd_config.max_feature_bytes)",
        offset_of!(SagessdConfig, max_feature_bytes),
    );
    layout("sizeof(sagessd_flash_ops)", size_of::<SagessdFlashOps>());
    layout(
        "offsetof(sagessd_flash_ops.submit)",
        offset_of!(SagessdFlashOps, submit),
    );
    layout(
        "offsetof(sagessd_flash_ops.ctx)",
        offset_of!(SagessdFlashOps, ctx),
    );
    layout("sizeof(sagessd_completion)", size_of::<SagessdCompletion>());
    layout(
        "offsetof(sagessd_completion.sq_id)",
        offset_of!(SagessdCompletion, sq_id),
    );
    layout(
        "offsetof(sagessd_completion.cid)",
        offset_of!(SagessdCompletion, cid),
    );
    layout(
        "offsetof(sagessd_completion.cqe)",
        offset_of!(SagessdCompletion, cqe),
    );
    m
}

/// Runs `cmd`, panicking with its output if it fails; returns its stdout.
fn run(cmd: &mut Command) -> String {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("running {cmd:?}: {e}"));
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\n{}{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).expect("UTF-8 output")
}

#[test]
fn header_matches_the_rust_definitions() {
    let Some(cc) = cc() else {
        eprintln!(
            "SKIPPED header_matches_the_rust_definitions: no C compiler (set CC or install cc)"
        );
        return;
    };
    let dir = scratch("abi-check");
    let exe = dir.join("abi_check");
    let include = manifest_dir().join("../include");
    run(Command::new(&cc)
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror", "-pedantic", "-I"])
        .arg(&include)
        .arg(manifest_dir().join("tests/c/abi_check.c"))
        .arg("-o")
        .arg(&exe));
    let printed: BTreeMap<String, i64> = run(&mut Command::new(&exe))
        .lines()
        .map(|line| {
            let (k, v) = line.rsplit_once(' ').expect("NAME VALUE");
            (k.to_string(), v.parse().expect("a number"))
        })
        .collect();
    let expected = expected();
    for (k, v) in &expected {
        assert_eq!(printed.get(k), Some(v), "{k}: header vs Rust");
    }
    for k in printed.keys() {
        assert!(expected.contains_key(k), "{k} is printed but not checked");
    }
    // Every value the header defines is compared above.
    let text = std::fs::read_to_string(header()).expect("reading the header");
    let defined: Vec<&str> = text
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("#define "))
        .filter_map(|l| l.split_whitespace().next())
        .filter(|name| !name.contains('(') && *name != "SAGESSD_FW_H")
        .collect();
    for name in &defined {
        assert!(
            expected.contains_key(*name),
            "the header defines {name}, which the test does not compare"
        );
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn header_compiles_as_c99_and_cpp() {
    let Some(cc) = cc() else {
        eprintln!("SKIPPED header_compiles_as_c99_and_cpp: no C compiler");
        return;
    };
    let include = format!("-I{}", manifest_dir().join("../include").display());
    let source = "#include \"sagessd_fw.h\"\nint main(void) { return (int)SAGESSD_OK; }\n";
    let dir = scratch("header-modes");
    for (lang, std) in [
        ("c", "-std=c99"),
        ("c", "-std=c17"),
        ("c++", "-std=c++98"),
        ("c++", "-std=c++11"),
    ] {
        let file = dir.join(format!("use_{}.{lang}", &std[5..]));
        std::fs::write(&file, source).expect("writing a test source");
        let mut cmd = Command::new(&cc);
        cmd.args(["-x", lang, std, "-Wall", "-Wextra", "-Werror", "-pedantic"])
            .arg("-fsyntax-only")
            .arg(&include)
            .arg(&file);
        // A host `cc` without a C++ front end only skips the C++ case.
        if lang == "c++" && !cmd.output().is_ok_and(|o| o.status.success()) {
            let probe = Command::new(&cc)
                .args(["-x", "c++", "-fsyntax-only", "-"])
                .stdin(std::process::Stdio::null())
                .output();
            if !probe.is_ok_and(|o| o.status.success()) {
                eprintln!("SKIPPED the C++ case: {cc} has no C++ front end");
                continue;
            }
        }
        run(&mut cmd);
    }
    std::fs::remove_dir_all(&dir).ok();
}

#[test]
fn config_error_codes_are_stable_and_listed_in_order() {
    for (n, (error, _)) in CONFIG_ERRORS.iter().enumerate() {
        assert_eq!(
            config_error_code(*error),
            ERR_CONFIG - n as i32,
            "{error:?}"
        );
    }
    assert_eq!(config_error_code(ConfigError::Geometry), -16);
    assert_eq!(config_error_code(ConfigError::DramLayoutOverflow), -28);
}

#[test]
fn reserved_config_fields_must_be_zero() {
    let c = SagessdConfig {
        block_size_log2: 12,
        over_provisioning_percent: 7,
        isp_slots: 2,
        page_buffer_pages: 512,
        max_targets: 4096,
        max_fanout: 64,
        max_subgraph_nodes: 1 << 20,
        max_subgraph_edges: 1 << 22,
        max_transfer_bytes: 128 * 1024,
        ..SagessdConfig::default()
    };
    // The default but for hyperbatches, which the board's C configuration does not take.
    let mut want = sagessd_firmware::FirmwareConfig::default();
    want.limits.max_minibatches = 1;
    assert_eq!(c.to_firmware(), Some(want));
    assert_eq!(SagessdConfig { reserved0: 1, ..c }.to_firmware(), None);
    assert_eq!(SagessdConfig { reserved1: 1, ..c }.to_firmware(), None);
}

#[test]
fn the_firmware_slot_is_about_as_big_as_the_footprint_report_says() {
    // The crate docs and the header quote "about 35 KiB on the Cortex-A9"; the host (64-bit)
    // build is somewhat larger. If this fails, update the figures there.
    let bytes = crate::FIRMWARE_STATE_BYTES;
    assert!((24 * 1024..=64 * 1024).contains(&bytes), "{bytes} bytes");
}
