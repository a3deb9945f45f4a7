//! libFuzzer target `graph_descriptor`: the body is `sagessd_tests::fuzz::graph_descriptor` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::graph_descriptor(data));
