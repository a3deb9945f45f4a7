//! libFuzzer target `tcp_pdus`: the body is `sagessd_tests::fuzz::tcp_pdus` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::tcp_pdus(data));
