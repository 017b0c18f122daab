//! The library's error type. One enum; a variant exists when a caller branches on it or the
//! user needs a distinct message. Store errors keep their own type ([`StoreError`]) so that the
//! pack writer can tell "no space" from other I/O.

use std::path::PathBuf;

use crate::store::StoreError;

/// Result alias used throughout the library.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The repository's storage failed (I/O, no space, missing object).
    #[error(transparent)]
    Store(#[from] StoreError),

    /// An object exists but its bytes are not what they must be.
    #[error("corrupt {what}: {reason}")]
    Corrupt { what: String, reason: String },

    /// The key could not be unwrapped with the given passphrase.
    #[error("wrong passphrase (or the key file is damaged)")]
    WrongPassphrase,

    /// No passphrase could be obtained.
    #[error("{0}")]
    Passphrase(String),

    /// A local file (not the repository) could not be read or written.
    #[error("{}: {source}", path.display())]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// A pack store failed earlier; the writer refuses further work.
    #[error("pack writer is unusable after an earlier error: {0}")]
    WriterBroken(String),

    /// Persisting the index was attempted while chunks were still pending.
    #[error("index still has {0} pending entries; flush before persisting")]
    PendingEntries(usize),

    /// The user interrupted the command (SIGINT/SIGTERM).
    #[error("interrupted by signal {0}")]
    Interrupted(i32),

    /// The user interrupted work that is left incomplete, with what is missing ("restore
    /// incomplete (68 of 600 files)").
    #[error("interrupted: {what}")]
    InterruptedIncomplete { signal: i32, what: String },

    /// The command was interrupted, but the repository had failed first (say, the disk is
    /// full): that failure is what the user must learn.
    #[error("{0} (the command was interrupted too; nothing was committed)")]
    FailedWhileInterrupted(Box<Error>),

    /// The repository is locked by someone else.
    #[error("repository is locked: {0}")]
    Locked(String),

    /// Something the user asked for does not exist or is malformed.
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    pub fn corrupt(what: impl Into<String>, reason: impl Into<String>) -> Self {
        Error::Corrupt {
            what: what.into(),
            reason: reason.into(),
        }
    }

    pub fn io(path: impl Into<PathBuf>, source: std::io::Error) -> Self {
        Error::Io {
            path: path.into(),
            source,
        }
    }

    pub fn invalid(msg: impl Into<String>) -> Self {
        Error::Invalid(msg.into())
    }
}
