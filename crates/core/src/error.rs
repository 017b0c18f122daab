//! The library's error type. One enum; a variant exists when a caller branches on it or the
//! user needs a distinct message. Store errors keep their own type ([`StoreError`]) so that the
//! pack writer can tell "no space" from other I/O; it is defined here, below the store, so that
//! this module imports nothing of the crate.

use std::path::PathBuf;

use rustix::io::Errno;

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

    /// cairn broke one of its own rules (a bug, not bad input or a failing store): the work
    /// stops rather than go on with a state it does not understand.
    #[error("internal error: {0}")]
    Internal(String),
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

    pub fn internal(msg: impl Into<String>) -> Self {
        Error::Internal(msg.into())
    }
}

/// What a store operation failed with ([`crate::store::Store`]).
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("{name}: object not found")]
    NotFound { name: String },
    #[error("{name}: no space left on device")]
    NoSpace { name: String },
    #[error("{name}: object is shorter than expected (wanted bytes up to {wanted}, it has {got})")]
    Short { name: String, wanted: u64, got: u64 },
    #[error("{name}: an object of this name exists already")]
    Exists { name: String },
    #[error("{name}: invalid object name")]
    InvalidName { name: String },
    #[error(
        "{name}: the object is {size} bytes, more than such an object may have ({max}); not read"
    )]
    TooLarge { name: String, size: u64, max: u64 },
    #[error("{name}: {source}")]
    Io {
        name: String,
        #[source]
        source: std::io::Error,
    },
    /// A repository server refused the operation by its rules (append-only, a quota, a
    /// restricted path): not a failure of the disk, and not worth another try.
    #[error("{}refused by the repository server: {why}", if name.is_empty() { String::new() } else { format!("{name}: ") })]
    Refused { name: String, why: String },
}

impl StoreError {
    /// Classifies an I/O error from a backend: ENOSPC and EDQUOT become `NoSpace`, a missing
    /// file `NotFound`.
    pub fn from_io(name: &str, e: std::io::Error) -> Self {
        let name = name.to_string();
        if matches!(Errno::from_io_error(&e), Some(Errno::NOSPC | Errno::DQUOT))
            || e.kind() == std::io::ErrorKind::StorageFull
        {
            StoreError::NoSpace { name }
        } else if e.kind() == std::io::ErrorKind::NotFound {
            StoreError::NotFound { name }
        } else {
            StoreError::Io { name, source: e }
        }
    }

    pub fn is_not_found(&self) -> bool {
        matches!(self, StoreError::NotFound { .. })
    }

    /// The store refused a write because it is read-only or not ours to write (EROFS, EACCES,
    /// EPERM): it may still be read.
    pub fn is_not_writable(&self) -> bool {
        match self {
            StoreError::Io { source, .. } => {
                matches!(
                    Errno::from_io_error(source),
                    Some(Errno::PERM | Errno::ACCESS | Errno::ROFS)
                ) || matches!(
                    source.kind(),
                    std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::ReadOnlyFilesystem
                )
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_internal_error_says_so_and_is_not_taken_for_bad_input() {
        let e = Error::internal("a known chunk is missing from the index");
        assert_eq!(
            e.to_string(),
            "internal error: a known chunk is missing from the index"
        );
        assert!(!matches!(e, Error::Invalid(_)));
    }
}
