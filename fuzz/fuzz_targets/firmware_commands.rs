//! libFuzzer target `firmware_commands`: the body is `sagessd_tests::fuzz::firmware_commands` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::firmware_commands(data));
