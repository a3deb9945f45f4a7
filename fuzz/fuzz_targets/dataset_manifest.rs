//! libFuzzer target `dataset_manifest`: the body is `sagessd_tests::fuzz::dataset_manifest`
//! (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::dataset_manifest(data));
