//! Packs: many blobs in one immutable object named by the sha256 of its bytes.

pub mod format;
pub mod writer;
