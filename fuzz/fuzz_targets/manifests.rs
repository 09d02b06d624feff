#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| meshscope_fuzz::manifests(data));
