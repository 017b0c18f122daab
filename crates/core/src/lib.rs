//! cairn's core: deduplicating, compressing, encrypting backups, below any command line. The
//! `cairn` crate (arguments, settings, profiles, hooks, output and the thin commands) is
//! built on it; nothing here can reach up into it (the compiler sees to that).
//!
//! The write pipeline:
//!
//! ```text
//! files ─▶ chunker ─▶ keyed id ─▶ dedup in index ─▶ blob (zstd or lz4, then AES-256-GCM or
//!       ChaCha20-Poly1305: the repository's cipher suite) ─▶ pack::writer (one pack in flight
//!       for a local disk, paced for a far store; a store thread each) ─▶ store ─▶ index
//!       fragment ─▶ archive
//! ```
//!
//! The modules by layer, lowest first; each imports only from the layers before it, never
//! from one above (`docs/design.md`, "Where things live"; the `layers` test checks it):
//!
//! 1. [`error`]: the one error type, store errors included.
//! 2. [`util`]: binary encoding, ids, clock, printable text, ordered parallel work, progress.
//! 3. [`store`]: the storage interface, its backends and wrappers, and repository locations.
//! 4. [`crypto`]: keys, KDF, key files, session ciphers, size buckets.
//! 5. [`chunker`]: keyed FastCDC.
//! 6. [`format`]: the blob envelope and its compression.
//! 7. [`index`]: chunk id → pack location; fragments and persistence.
//! 8. [`pack`]: the pack format and the pipelined [`pack::writer::PackWriter`].
//! 9. [`repo`]: open, config, keys, locks, signals, the local cache, the index reconciled with
//!    the packs, the write session and its one commit protocol.
//! 10. [`archive`]: archive metadata, item streams, file contents read back.
//! 11. [`source`]: the files being backed up: metadata, exclusion, the files cache.
//! 12. [`ops`]: the engines (`create`, `extract`, `check`, `compact`, `prune`, `copy`, `mount`,
//!     tar).
//! 13. [`serve`]: `cairn serve`, a repository served over ssh to `ssh://` clients, under the
//!     server's rules (restricted paths, append-only, a quota).
//!
//! [`fuzzing`] (hidden) exposes decoders to the fuzz targets.

/// A line on stderr, like `eprintln!`, but a stderr that cannot be written (a closed pipe,
/// a full disk behind a redirection) is ignored rather than a panic: a message must never
/// turn a command that did its work into a crash. A line that starts with `warning:` is
/// counted ([`util::progress::warnings_said`]), for a summary that counts what it said.
#[macro_export]
macro_rules! say {
    () => {{
        $crate::util::log::say("");
    }};
    ($($arg:tt)*) => {{
        $crate::util::log::say(&format!($($arg)*));
    }};
}

pub mod archive;
pub mod chunker;
pub mod crypto;
pub mod error;
pub mod format;
#[doc(hidden)]
pub mod fuzzing;
pub mod index;
#[cfg(test)]
mod layers;
pub mod ops;
pub mod pack;
pub mod repo;
pub mod serve;
pub mod source;
pub mod store;
pub mod util;

pub use error::{Error, Result};
