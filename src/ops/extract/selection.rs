//! Which items an extract restores: the paths and patterns given on the command line.
//!
//! - A path (`etc/ssh`) selects that stored path and everything below it.
//! - A pattern (with `*`, `?` or `[`) follows the rules of `create --exclude` for paths: `*`
//!   stays within one component, `**` crosses components (`etc/*.conf`, `home/**/*.txt`). It
//!   selects every item whose stored path, or one of whose parent directories, it matches.
//! - A leading `/` or `./` is ignored, as in stored paths.
//!
//! Each path or pattern remembers whether it selected anything, so that one that matched
//! nothing (a typo) can be named.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};

use crate::error::{Error, Result};

enum Rule {
    /// A stored path: itself and what is below it.
    Path(Vec<u8>),
    Glob(GlobMatcher),
}

struct Filter {
    given: String,
    rule: Rule,
    matched: bool,
}

/// The paths and patterns of one extract; empty selects everything.
#[derive(Default)]
pub struct Selection {
    filters: Vec<Filter>,
}

fn is_pattern(s: &str) -> bool {
    s.contains(['*', '?', '['])
}

impl Selection {
    /// `given` as typed; `stored` turns a plain path into its stored form.
    pub fn new(given: &[String], stored: impl Fn(&str) -> Vec<u8>) -> Result<Self> {
        let mut filters = Vec::new();
        for g in given {
            let rule = if is_pattern(g) {
                let mut pat = g.as_str();
                while let Some(rest) = pat.strip_prefix("./").or_else(|| pat.strip_prefix('/')) {
                    pat = rest;
                }
                let glob = GlobBuilder::new(pat.trim_end_matches('/'))
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map_err(|e| Error::invalid(format!("bad pattern {g:?}: {e}")))?;
                Rule::Glob(glob.compile_matcher())
            } else {
                let path = stored(g);
                if path.is_empty() {
                    // The archive's root: everything.
                    return Ok(Self::default());
                }
                Rule::Path(path)
            };
            filters.push(Filter {
                given: g.clone(),
                rule,
                matched: false,
            });
        }
        Ok(Self { filters })
    }

    pub fn is_everything(&self) -> bool {
        self.filters.is_empty()
    }

    /// Whether the item with this stored path is restored; every filter that selects it is
    /// marked as matched.
    pub fn selects(&mut self, path: &[u8]) -> bool {
        if self.filters.is_empty() {
            return true;
        }
        let mut any = false;
        for f in &mut self.filters {
            let hit = match &f.rule {
                Rule::Path(p) => {
                    path == p.as_slice()
                        || (path.starts_with(p) && path.get(p.len()) == Some(&b'/'))
                }
                Rule::Glob(g) => {
                    self_or_parent(path, |p| g.is_match(Path::new(OsStr::from_bytes(p))))
                }
            };
            f.matched |= hit;
            any |= hit;
        }
        any
    }

    /// The paths and patterns, as given, that selected nothing.
    pub fn unmatched(&self) -> Vec<String> {
        self.filters
            .iter()
            .filter(|f| !f.matched)
            .map(|f| f.given.clone())
            .collect()
    }
}

/// Whether `test` holds for `path` or for one of its parent directories.
fn self_or_parent(path: &[u8], test: impl Fn(&[u8]) -> bool) -> bool {
    if test(path) {
        return true;
    }
    path.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'/')
        .any(|(i, _)| test(&path[..i]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn selection(given: &[&str]) -> Selection {
        let given: Vec<String> = given.iter().map(|s| s.to_string()).collect();
        Selection::new(&given, |s| {
            s.trim_start_matches('/')
                .trim_end_matches('/')
                .as_bytes()
                .to_vec()
        })
        .unwrap()
    }

    #[test]
    fn paths_select_themselves_and_what_is_below() {
        let mut s = selection(&["etc/ssh"]);
        assert!(s.selects(b"etc/ssh"));
        assert!(s.selects(b"etc/ssh/sshd_config"));
        assert!(!s.selects(b"etc/sshd"));
        assert!(!s.selects(b"etc"));
        assert!(s.unmatched().is_empty());
    }

    #[test]
    fn patterns_stay_within_a_component_unless_doubled() {
        let mut s = selection(&["etc/*.conf"]);
        assert!(s.selects(b"etc/a.conf"));
        assert!(!s.selects(b"etc/sub/b.conf"));
        assert!(!s.selects(b"etc/a.confx"));
        let mut s = selection(&["/home/**/*.txt"]);
        assert!(s.selects(b"home/a/b/c.txt"));
        // A matched directory brings what is below it.
        let mut s = selection(&["etc/ss*"]);
        assert!(s.selects(b"etc/ssh/moduli"));
    }

    #[test]
    fn what_matched_nothing_is_named() {
        let mut s = selection(&["etc/ssh", "etc/nonexistent", "*.nothing"]);
        s.selects(b"etc/ssh/moduli");
        s.selects(b"etc/passwd");
        assert_eq!(s.unmatched(), vec!["etc/nonexistent", "*.nothing"]);
    }

    #[test]
    fn no_filter_selects_everything() {
        let mut s = selection(&[]);
        assert!(s.is_everything());
        assert!(s.selects(b"anything"));
    }
}
