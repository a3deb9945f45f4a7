//! libFuzzer target `subgraph`: the body is `sagessd_tests::fuzz::subgraph` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::subgraph(data));
