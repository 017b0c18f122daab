#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cairn::fuzzing::key_and_config(data));
