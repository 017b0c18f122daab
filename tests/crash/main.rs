//! Crash and power-cut matrices, in process (they set process-wide variables: a binary of their own).

#[path = "../common/mod.rs"]
mod common;

mod reliability_crash;
