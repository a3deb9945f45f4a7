//! libFuzzer target `npy`: the body is `sagessd_tests::fuzz::npy` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::npy(data));
