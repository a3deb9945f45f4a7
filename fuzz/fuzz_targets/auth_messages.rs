//! libFuzzer target `auth_messages`: the body is `sagessd_tests::fuzz::auth_messages` (see its documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::auth_messages(data));
