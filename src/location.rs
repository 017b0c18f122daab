//! Repository locations: a plain path or a `file://` URL (local directory).

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::store::local::LocalStore;
use crate::store::{self, Store};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
}

impl Location {
    pub fn parse(s: &str) -> Result<Self> {
        if s.is_empty() {
            return Err(Error::invalid("the repository location is empty"));
        }
        if let Some(rest) = s.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(Error::invalid(format!(
                    "{s:?}: a file:// URL needs an absolute path (file:///path/to/repo)"
                )));
            }
            return Ok(Location::Local(PathBuf::from(rest)));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(Error::invalid(format!(
                "{s:?}: unsupported repository URL scheme {scheme:?} (use a path or file:///path)"
            )));
        }
        Ok(Location::Local(PathBuf::from(s)))
    }

    /// Opens the store, wrapped as the environment asks (slow-store emulation, faults).
    pub fn open_store(&self) -> Result<Arc<dyn Store>> {
        let inner: Arc<dyn Store> = match self {
            Location::Local(p) => Arc::new(LocalStore::new(p.clone())),
        };
        store::wrap_from_env(inner).map_err(Error::invalid)
    }

    /// Prepares a new repository location: creates the directory (and its parents) and
    /// refuses a directory that has anything in it.
    pub fn prepare_new(&self) -> Result<()> {
        match self {
            Location::Local(p) => {
                if p.exists() {
                    if !p.is_dir() {
                        return Err(Error::invalid(format!(
                            "{}: exists and is not a directory",
                            p.display()
                        )));
                    }
                    let mut entries = std::fs::read_dir(p).map_err(|e| Error::io(p, e))?;
                    if entries.next().is_some() {
                        return Err(Error::invalid(format!(
                            "{}: directory is not empty; cairn init needs an empty or new directory",
                            p.display()
                        )));
                    }
                } else {
                    std::fs::create_dir_all(p).map_err(|e| Error::io(p, e))?;
                }
                Ok(())
            }
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_paths_and_file_urls() {
        assert_eq!(
            Location::parse("/a/b").unwrap(),
            Location::Local("/a/b".into())
        );
        assert_eq!(
            Location::parse("rel").unwrap(),
            Location::Local("rel".into())
        );
        assert_eq!(
            Location::parse("file:///x").unwrap(),
            Location::Local("/x".into())
        );
        assert!(Location::parse("file://x").is_err());
        assert!(Location::parse("ftp://host/x").is_err());
        assert!(Location::parse("").is_err());
    }
}
