//! The engine behind `cairn mount`: archives as a read-only FUSE file system.
//!
//! - [`tree`]: one archive's items as a directory tree in memory, read on first use;
//! - [`cache`]: decrypted chunks, kept up to a byte budget;
//! - [`prefetch`]: workers that read ahead of each open file;
//! - [`fs`]: the file system the kernel talks to.

pub mod cache;
pub mod fs;
pub mod prefetch;
pub mod tree;

pub use fs::{ArchiveFs, Layout, Mounted};
