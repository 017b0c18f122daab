//! cairn: deduplicating, compressing, encrypting backups.
//!
//! The write pipeline:
//!
//! ```text
//! files ─▶ chunker ─▶ id = HMAC(id key, chunk) ─▶ dedup in index ─▶ blob (lz4 + AES-256-GCM)
//!       ─▶ pack::writer (one pack in flight, store thread) ─▶ store ─▶ index fragment ─▶ archive
//! ```
//!
//! The modules by layer, lowest first; each imports only from its own layer and the ones
//! before it (`docs/design.md`, "Where things live"):
//!
//! - Storage interface: [`store`] (the trait, backends, wrappers).
//! - Primitives: [`error`], [`wire`] (binary encoding), [`id`], [`clock`], [`text`], [`compress`],
//!   [`crypto`] (keys, KDF, session ciphers), [`chunker`] (keyed FastCDC), [`parallel`],
//!   [`progress`].
//! - Blobs: [`blob`] (the encrypted envelope).
//! - Index: [`index`] (chunk id → pack location; fragments and persistence).
//! - Packs: [`pack`] (format and the pipelined [`pack::writer::PackWriter`], which fills the
//!   index).
//! - Repository: [`location`], [`cache_dir`], [`lock`] (safe between clients that share no
//!   clock or PID namespace), [`signals`], [`repo`] (open, config, keys, the index reconciled
//!   with the packs, the write session and its one commit protocol).
//! - Archives: [`archive`] (metadata and item streams), [`files_cache`], [`fsmeta`],
//!   [`exclude`].
//! - Engines: [`ops`] (`create`, `extract`, `check`, `compact`, `prune`).
//! - Command line: [`settings`] (the `CAIRN_*` environment, read once), [`cli`],
//!   [`commands`] (one thin module per command), [`passphrase`].

/// A line on stderr, like `eprintln!`, but a stderr that cannot be written (a closed pipe,
/// a full disk behind a redirection) is ignored rather than a panic: a message must never
/// turn a command that did its work into a crash.
#[macro_export]
macro_rules! say {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod archive;
pub mod blob;
pub mod cache_dir;
pub mod chunker;
pub mod cli;
pub mod clock;
pub mod commands;
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
pub mod ops;
pub mod pack;
pub mod parallel;
pub mod passphrase;
pub mod profile;
pub mod progress;
pub mod repo;
pub mod settings;
pub mod signals;
pub mod store;
pub mod text;
pub mod wire;

pub use error::{Error, Result};
