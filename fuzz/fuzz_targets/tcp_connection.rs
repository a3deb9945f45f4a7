//! libFuzzer target `tcp_connection`: the body is `sagessd_tests::fuzz::tcp_connection` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::tcp_connection(data));
