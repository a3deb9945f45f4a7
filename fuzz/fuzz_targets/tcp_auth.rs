//! libFuzzer target `tcp_auth`: the body is `sagessd_tests::fuzz::tcp_auth` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::tcp_auth(data));
