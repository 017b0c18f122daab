#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cairn_core::fuzzing::pack_toc(data));
