//! The store conformance suite and SFTP/S3 end to end.

#[path = "../common/mod.rs"]
mod common;

mod remote_e2e;
mod serve;
mod store_conformance;
