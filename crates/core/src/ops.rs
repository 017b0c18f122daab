//! The engines: one folder per command that does real work, named after it. Each takes typed
//! options and an open [`crate::repo::Repository`]; the command line (`crate::cli::commands`)
//! parses flags, calls one of these, and prints what it returns.
//!
//! - [`create`]: walk, chunk, deduplicate and store a tree as an archive.
//! - [`extract`]: restore an archive (or part of it) to a directory.
//! - [`check`]: verify a repository, and repair what can be repaired.
//! - [`compact`]: reclaim the space of packs that hold chunks no archive uses.
//! - [`prune`]: choose which archives a retention policy keeps.
//! - [`copy`]: copy archives from another repository, re-encrypted under this one's keys.
//! - [`own_dirs`]: cairn's own directories, which create never stores and extract never
//!   touches.

pub mod check;
pub mod compact;
pub mod copy;
pub mod create;
pub mod diff;
pub mod extract;
pub mod mount;
pub mod own_dirs;
pub mod prune;
pub mod rewrite;
pub mod tar;
