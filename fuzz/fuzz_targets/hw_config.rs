//! libFuzzer target `hw_config`: the body is `sagessd_tests::fuzz::hw_config` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::hw_config(data));
