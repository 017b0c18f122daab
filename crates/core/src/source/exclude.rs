//! Exclusion patterns for `create`.
//!
//! - A pattern without `/` matches a file or directory name anywhere (`*.tmp`, `node_modules`).
//! - A pattern with `/` matches the stored path (leading `/` ignored): `*` stays within one
//!   component, `**` crosses components (`home/*/.cache`, `var/**/*.log`).
//! - An excluded directory is skipped with everything below it.
//! - `--exclude-caches`: a directory holding a valid `CACHEDIR.TAG` keeps only the tag file.
//! - `--iexclude`: the same rules, letters matching either case.
//! - `--exclude-if-present NAME`: a directory holding anything named NAME is kept without its
//!   contents (with `--keep-exclude-tags`, the tags themselves are kept).
//! - `--exclude-larger-than SIZE`: regular files larger than SIZE are left out.

use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::error::{Error, Result};
use crate::util::pattern::{PatternSet, PatternSetBuilder};

pub const CACHEDIR_TAG: &str = "CACHEDIR.TAG";
const CACHEDIR_SIGNATURE: &[u8] = b"Signature: 8a477f597d28d172789f06886806bc55";

pub struct Excludes {
    names: PatternSet,
    paths: PatternSet,
    pub exclude_caches: bool,
    /// Names whose presence in a directory leaves its contents out.
    pub tags: Vec<String>,
    /// Whether the tags themselves are kept.
    pub keep_tags: bool,
    /// Regular files larger than this are left out.
    pub larger_than: Option<u64>,
}

impl Excludes {
    /// `patterns` as given (bytes: a name that is not UTF-8 is matched as it is on disk).
    pub fn new(patterns: &[impl AsRef<OsStr>], exclude_caches: bool) -> Result<Self> {
        Self::folding(patterns, &[] as &[&OsStr], exclude_caches)
    }

    /// `patterns` as [`Self::new`] takes them, and `folded` matched ignoring case.
    pub fn folding(
        patterns: &[impl AsRef<OsStr>],
        folded: &[impl AsRef<OsStr>],
        exclude_caches: bool,
    ) -> Result<Self> {
        let mut names = PatternSetBuilder::default();
        let mut paths = PatternSetBuilder::default();
        let given = patterns.iter().map(|p| (p.as_ref(), false));
        for (p, fold) in given.chain(folded.iter().map(|p| (p.as_ref(), true))) {
            let mut trimmed = p.as_bytes();
            while let Some(rest) = trimmed.strip_suffix(b"/") {
                trimmed = rest;
            }
            if trimmed.is_empty() {
                continue;
            }
            if trimmed.contains(&b'/') {
                let mut rooted = trimmed;
                while let Some(rest) = rooted.strip_prefix(b"/") {
                    rooted = rest;
                }
                paths.add(rooted, "exclude pattern", fold)?;
            } else {
                names.add(trimmed, "exclude pattern", fold)?;
            }
        }
        Ok(Self {
            names: names.build()?,
            paths: paths.build()?,
            exclude_caches,
            tags: Vec::new(),
            keep_tags: false,
            larger_than: None,
        })
    }

    /// Directories holding one of `tags` are kept without their contents (`keep`: with the
    /// tags).
    pub fn if_present(mut self, tags: Vec<String>, keep: bool) -> Result<Self> {
        if let Some(bad) = tags
            .iter()
            .find(|t| t.is_empty() || t.contains('/') || *t == "." || *t == "..")
        {
            return Err(Error::invalid(format!(
                "--exclude-if-present takes a file name, not {bad:?}"
            )));
        }
        self.tags = tags;
        self.keep_tags = keep;
        Ok(self)
    }

    /// Regular files larger than `limit` bytes are left out.
    pub fn larger_than(mut self, limit: Option<u64>) -> Self {
        self.larger_than = limit;
        self
    }

    /// Whether a regular file of `size` bytes is left out for its size.
    pub fn is_too_large(&self, size: u64) -> bool {
        self.larger_than.is_some_and(|limit| size > limit)
    }

    pub fn read_pattern_file(path: &Path) -> Result<Vec<String>> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
        Ok(text
            .lines()
            .map(str::trim_end)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(String::from)
            .collect())
    }

    /// Whether the entry with this stored path is excluded.
    pub fn is_excluded(&self, stored: &[u8]) -> bool {
        if stored.is_empty() {
            return false;
        }
        let name = stored.rsplit(|b| *b == b'/').next().unwrap_or(stored);
        self.paths.is_match(stored) || self.names.is_match(name)
    }
}

/// Whether the opened directory `dir` holds a CACHEDIR.TAG (a regular file, not a symlink)
/// that starts with the standard signature. Opened relative to the directory, without
/// following symlinks and without blocking, so a fifo planted under that name cannot hang a
/// backup.
pub fn is_cache_dir(dir: &std::fs::File) -> bool {
    use rustix::fs::{Mode, OFlags};
    let flags = OFlags::RDONLY | OFlags::NOFOLLOW | OFlags::NONBLOCK | OFlags::CLOEXEC;
    let Ok(fd) = rustix::fs::openat(dir, CACHEDIR_TAG, flags, Mode::empty()) else {
        return false;
    };
    let mut f = std::fs::File::from(fd);
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut head = [0u8; 43];
    f.read_exact(&mut head).is_ok() && head == CACHEDIR_SIGNATURE
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_paths() {
        let ex = Excludes::new(
            &["*.tmp", "node_modules", "/home/*/.cache", "var/**/*.log"],
            false,
        )
        .unwrap();
        assert!(ex.is_excluded(b"a/b/c.tmp"));
        assert!(ex.is_excluded(b"x.tmp"));
        assert!(!ex.is_excluded(b"x.tmpl"));
        assert!(ex.is_excluded(b"src/node_modules"));
        assert!(ex.is_excluded(b"home/alice/.cache"));
        assert!(!ex.is_excluded(b"home/alice/sub/.cache"));
        assert!(ex.is_excluded(b"var/a/b/c.log"));
        assert!(!ex.is_excluded(b"var.log"));
        assert!(ex.is_excluded(b"dir/\xff\xfe.tmp"));
    }

    #[test]
    fn a_pattern_that_is_not_utf8_matches_the_bytes_on_disk() {
        use std::os::unix::ffi::OsStringExt;
        let pattern = std::ffi::OsString::from_vec(b"caf\xe9*".to_vec());
        let ex = Excludes::new(&[pattern], false).unwrap();
        assert!(ex.is_excluded(b"docs/caf\xe9.txt"));
        assert!(!ex.is_excluded("docs/café.txt".as_bytes()));
    }

    #[test]
    fn bad_pattern_is_an_error() {
        assert!(Excludes::new(&["a["], false).is_err());
    }
}
