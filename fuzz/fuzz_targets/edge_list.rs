//! libFuzzer target `edge_list`: the body is `sagessd_tests::fuzz::edge_list` (see its
//! documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::edge_list(data));
