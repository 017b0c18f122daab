#![no_main]
libfuzzer_sys::fuzz_target!(|data: &[u8]| cairn::fuzzing::pack_toc(data));
