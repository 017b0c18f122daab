//! The `cairn` command line over [`cairn_core`]: arguments (clap), settings read once from
//! the environment, profiles, passphrases, hooks, what is said on the terminal, and the thin
//! commands that turn arguments into calls of the core's engines and print what they return.
//!
//! The core's modules are re-exported under their own names (`cairn::store`, `cairn::repo`, …),
//! so that the commands, the tests and the examples name them as before; the core cannot name
//! anything here.

pub use cairn_core::*;

pub mod cli;
pub mod ui;
