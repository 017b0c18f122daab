//! Engine tests in process: the pack writer, index persistence, fuzz regressions and the golden repository.

#[path = "../common/mod.rs"]
mod common;

mod fuzz_regressions;
mod golden;
mod index_persist;
mod pack_writer;
mod tar_stream;
