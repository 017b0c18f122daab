//! Packs: many blobs in one immutable object named by the hash of its bytes (SHA-256 or
//! keyed BLAKE3, by the repository's cipher suite).

pub mod format;
pub mod writer;
