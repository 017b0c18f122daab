#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cairn_core::fuzzing::key_and_config(data));
