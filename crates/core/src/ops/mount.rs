//! The engine behind `cairn mount`: archives as a read-only FUSE file system.
//!
//! - [`tree`]: one archive's items as a directory tree, read on first use: in tree order,
//!   lazily ([`spans`] finds each directory's span of the item stream, [`records`] reads it,
//!   [`lazy`] keeps the listings read), otherwise whole;
//! - [`cache`]: decrypted chunks, kept up to a byte budget;
//! - [`prefetch`]: workers that read ahead of each open file;
//! - [`fs`]: the file system the kernel talks to; [`attr`], what it says a node is.

pub mod attr;
pub mod cache;
pub mod fs;
pub mod lazy;
pub mod prefetch;
pub mod records;
pub mod spans;
pub mod tree;

pub use fs::{ArchiveFs, Layout, Mounted};
