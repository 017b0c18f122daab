//! Shell patterns (`*` within a component, `**` across, `?`, `[…]`, `\` escapes) matched
//! against stored paths byte for byte, whatever bytes the pattern or the path holds.
//!
//! The glob engine reads a pattern as text, so a pattern that is not UTF-8 (a name typed as
//! the bytes it has on disk, `$'caf\xe9'`) is compiled with each byte that is not part of a
//! UTF-8 character written as the character U+10FF00 + byte (of the last private-use plane),
//! and matched against the paths that are not UTF-8 either, written the same way. A path
//! that is UTF-8 never matches such a pattern (its bytes cannot hold the pattern's), and a
//! UTF-8 pattern is matched against the raw bytes of every path, as before.

use std::borrow::Cow;
use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{Glob, GlobBuilder, GlobMatcher, GlobSet, GlobSetBuilder};

use crate::error::{Error, Result};

/// `bytes` as text: itself when it is UTF-8, else each stray byte as U+10FF00 + byte.
fn as_text(bytes: &[u8]) -> Cow<'_, str> {
    if let Ok(s) = std::str::from_utf8(bytes) {
        return Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(bytes.len() + 8);
    for chunk in bytes.utf8_chunks() {
        out.push_str(chunk.valid());
        for b in chunk.invalid() {
            out.push(
                char::from_u32(0x10_FF00 + u32::from(*b)).unwrap_or(char::REPLACEMENT_CHARACTER),
            );
        }
    }
    Cow::Owned(out)
}

fn path(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

/// Compiles `pattern` (bytes); `Ok(true)` with it when it is not UTF-8.
fn compile(pattern: &[u8], what: &str, fold_case: bool) -> Result<(Glob, bool)> {
    let text = as_text(pattern);
    let glob = GlobBuilder::new(&text)
        .literal_separator(true)
        .backslash_escape(true)
        .case_insensitive(fold_case)
        .build()
        .map_err(|e| {
            let shown = crate::util::text::printable_bytes(pattern);
            Error::invalid(format!("bad {what} {shown:?}: {e}"))
        })?;
    Ok((glob, matches!(text, Cow::Owned(_))))
}

/// One pattern.
pub struct Pattern {
    glob: GlobMatcher,
    /// The pattern is not UTF-8: it matches only paths that are not either, as text.
    raw: bool,
}

impl Pattern {
    /// `what` names the pattern in an error (`pattern`, `exclude pattern`).
    pub fn new(pattern: &[u8], what: &str) -> Result<Self> {
        let (glob, raw) = compile(pattern, what, false)?;
        Ok(Self {
            glob: glob.compile_matcher(),
            raw,
        })
    }

    pub fn is_match(&self, candidate: &[u8]) -> bool {
        if !self.raw {
            return self.glob.is_match(path(candidate));
        }
        match as_text(candidate) {
            Cow::Owned(text) => self.glob.is_match(text),
            Cow::Borrowed(_) => false,
        }
    }
}

/// Many patterns, matched at once.
pub struct PatternSet {
    text: GlobSet,
    /// The patterns that are not UTF-8, for the paths that are not either.
    raw: GlobSet,
}

pub struct PatternSetBuilder {
    text: GlobSetBuilder,
    raw: GlobSetBuilder,
}

impl Default for PatternSetBuilder {
    fn default() -> Self {
        Self {
            text: GlobSetBuilder::new(),
            raw: GlobSetBuilder::new(),
        }
    }
}

impl PatternSetBuilder {
    /// `fold_case`: letters match either case (`--iexclude`).
    pub fn add(&mut self, pattern: &[u8], what: &str, fold_case: bool) -> Result<()> {
        match compile(pattern, what, fold_case)? {
            (glob, false) => self.text.add(glob),
            (glob, true) => self.raw.add(glob),
        };
        Ok(())
    }

    pub fn build(self) -> Result<PatternSet> {
        let build = |b: GlobSetBuilder| {
            b.build()
                .map_err(|e| Error::invalid(format!("patterns: {e}")))
        };
        Ok(PatternSet {
            text: build(self.text)?,
            raw: build(self.raw)?,
        })
    }
}

impl PatternSet {
    pub fn is_match(&self, candidate: &[u8]) -> bool {
        if self.text.is_match(path(candidate)) {
            return true;
        }
        if self.raw.is_empty() {
            return false;
        }
        match as_text(candidate) {
            Cow::Owned(text) => self.raw.is_match(text),
            Cow::Borrowed(_) => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn patterns_and_paths_match_byte_for_byte() {
        let latin1 = Pattern::new(b"caf\xe9*", "pattern").unwrap();
        assert!(latin1.is_match(b"caf\xe9"));
        assert!(latin1.is_match(b"caf\xe9-2"));
        assert!(!latin1.is_match("café".as_bytes()));
        assert!(!latin1.is_match(b"caf\xe8"));
        let utf8 = Pattern::new("café*".as_bytes(), "pattern").unwrap();
        assert!(utf8.is_match("café.txt".as_bytes()));
        assert!(!utf8.is_match(b"caf\xe9.txt"));
        // A UTF-8 pattern still matches paths that are not UTF-8, on their bytes.
        let any = Pattern::new(b"*.tmp", "pattern").unwrap();
        assert!(any.is_match(b"\xff\xfe.tmp"));
        // `*` stays within a component, with stray bytes as with characters.
        let dir = Pattern::new(b"d\xff/*", "pattern").unwrap();
        assert!(dir.is_match(b"d\xff/x\xfe"));
        assert!(!dir.is_match(b"d\xff/x/y"));
        // A path that holds the stand-in characters themselves is not a stray byte.
        let stand_in = "caf\u{10ffe9}".as_bytes();
        assert!(!latin1.is_match(stand_in));
    }

    #[test]
    fn a_set_matches_both_kinds_and_a_bad_pattern_is_named() {
        let mut b = PatternSetBuilder::default();
        b.add(b"*.tmp", "pattern", false).unwrap();
        b.add(b"x\xff", "pattern", false).unwrap();
        let set = b.build().unwrap();
        assert!(set.is_match(b"a.tmp"));
        assert!(set.is_match(b"x\xff"));
        assert!(!set.is_match(b"x"));
        let err = Pattern::new(b"a[\xff", "exclude pattern").err().unwrap();
        assert!(err.to_string().contains("bad exclude pattern"), "{err}");
        assert!(err.to_string().contains("\\xff"), "{err}");
    }
}
