//! libFuzzer target `sampled_ids`: the body is `sagessd_tests::fuzz::sampled_ids` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::sampled_ids(data));
