//! cairn: deduplicating, compressing, encrypting backups.
//!
//! The write pipeline, module by module:
//!
//! ```text
//! files ─▶ chunker ─▶ id = HMAC(id key, chunk) ─▶ dedup in index ─▶ blob (lz4 + AES-256-GCM)
//!       ─▶ pack::writer (one pack in flight, store thread) ─▶ store ─▶ index fragment
//! ```
//!
//! - [`store`]: the object store trait and its backends and wrappers.
//! - [`crypto`], [`compress`], [`blob`]: keys, session ciphers, the blob envelope.
//! - [`chunker`]: keyed FastCDC.
//! - [`pack`]: pack format and the pipelined [`pack::writer::PackWriter`].
//! - [`index`]: the chunk index, with pending entries as a type; fragments and persistence.
//! - [`repo`]: opening a repository, its lock, and write sessions (the one commit protocol).
//! - [`lock`]: repository locks safe between clients that share no clock or PID namespace.
//! - [`commands`]: one module per CLI command.

pub mod archive;
pub mod backup;
pub mod blob;
pub mod cache_dir;
pub mod check;
pub mod chunker;
pub mod cli;
pub mod clock;
pub mod commands;
pub mod compact;
pub mod compress;
pub mod crypto;
pub mod error;
pub mod exclude;
pub mod files_cache;
pub mod fsmeta;
#[doc(hidden)]
pub mod fuzzing;
pub mod id;
pub mod index;
pub mod location;
pub mod lock;
pub mod pack;
pub mod parallel;
pub mod passphrase;
pub mod progress;
pub mod prune;
pub mod repo;
pub mod restore;
pub mod settings;
pub mod signals;
pub mod store;
pub mod wire;

pub use error::{Error, Result};
