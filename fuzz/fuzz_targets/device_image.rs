//! libFuzzer target `device_image`: the body is `sagessd_tests::fuzz::device_image` (see its
//! documentation).
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| sagessd_tests::fuzz::device_image(data));
