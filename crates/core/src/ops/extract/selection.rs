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

use crate::error::Result;
use crate::format::item::Item;
use crate::source::exclude::Excludes;
use crate::util::pattern::Pattern;
use crate::util::text::printable_bytes;

enum Rule {
    /// A stored path: itself and what is below it.
    Path(Vec<u8>),
    Glob(Pattern),
}

struct Filter {
    /// As given, made printable (for "matches nothing").
    given: String,
    rule: Rule,
    matched: bool,
}

/// The paths and patterns of one extract, what `--exclude` leaves out, and how many leading
/// components `--strip-components` removes. Empty selects everything, as stored.
#[derive(Default)]
pub struct Selection {
    filters: Vec<Filter>,
    excludes: Option<Excludes>,
    strip: usize,
}

/// `path` without its first `strip` components; `None` when nothing is left of it.
pub fn stripped(path: &[u8], strip: usize) -> Option<&[u8]> {
    let mut rest = path;
    for _ in 0..strip {
        let slash = rest.iter().position(|b| *b == b'/')?;
        rest = &rest[slash + 1..];
    }
    (!rest.is_empty()).then_some(rest)
}

fn is_pattern(s: &[u8]) -> bool {
    s.iter().any(|b| matches!(b, b'*' | b'?' | b'['))
}

impl Selection {
    /// `given` as typed (bytes: a name that is not UTF-8 is matched as it is stored);
    /// `stored` turns a plain path into its stored form.
    pub fn new(given: &[impl AsRef<[u8]>], stored: impl Fn(&[u8]) -> Vec<u8>) -> Result<Self> {
        let mut filters = Vec::new();
        for g in given {
            let g = g.as_ref();
            let rule = if is_pattern(g) {
                let mut pat = g;
                while let Some(rest) = pat.strip_prefix(b"./").or_else(|| pat.strip_prefix(b"/")) {
                    pat = rest;
                }
                while let Some(rest) = pat.strip_suffix(b"/") {
                    pat = rest;
                }
                Rule::Glob(Pattern::new(pat, "pattern")?)
            } else {
                let path = stored(g);
                if path.is_empty() {
                    // The archive's root: everything.
                    return Ok(Self::default());
                }
                Rule::Path(path)
            };
            filters.push(Filter {
                given: printable_bytes(g),
                rule,
                matched: false,
            });
        }
        Ok(Self {
            filters,
            ..Self::default()
        })
    }

    /// One stored path and what is below it, taken as it is (no pattern characters).
    pub fn path(stored: Vec<u8>) -> Self {
        Self {
            filters: vec![Filter {
                given: printable_bytes(&stored),
                rule: Rule::Path(stored),
                matched: false,
            }],
            ..Self::default()
        }
    }

    /// Leaves out what `patterns` exclude (the rules of `create --exclude`), with everything
    /// below an excluded directory.
    pub fn excluding(mut self, patterns: &[impl AsRef<OsStr>]) -> Result<Self> {
        if !patterns.is_empty() {
            self.excludes = Some(Excludes::new(patterns, false)?);
        }
        Ok(self)
    }

    /// Removes `n` leading components from every name; an item with no more than `n` is left
    /// out (as `tar --strip-components`).
    pub fn stripping(mut self, n: usize) -> Self {
        self.strip = n;
        self
    }

    /// Whether every item is selected, under its stored name.
    pub fn is_everything(&self) -> bool {
        self.filters.is_empty() && self.excludes.is_none() && self.strip == 0
    }

    /// The name an item selected by [`Self::selects`] gets: its stored path without the
    /// stripped components; `None` when nothing is left of it.
    pub fn name<'p>(&self, path: &'p [u8]) -> Option<&'p [u8]> {
        stripped(path, self.strip)
    }

    /// How many leading components every name loses.
    pub fn strip(&self) -> usize {
        self.strip
    }

    /// Whether no path or pattern was given (excludes and stripping aside): the whole
    /// archive is asked for.
    pub fn has_no_paths(&self) -> bool {
        self.filters.is_empty()
    }

    /// Whether the item with this stored path is restored; every filter that selects it is
    /// marked as matched.
    pub fn selects(&mut self, path: &[u8]) -> bool {
        if let Some(ex) = &self.excludes {
            if self_or_parent(path, |p| ex.is_excluded(p)) {
                return false;
            }
        }
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
                Rule::Glob(g) => self_or_parent(path, |p| g.is_match(p)),
            };
            f.matched |= hit;
            any |= hit;
        }
        any
    }

    /// The item if it is selected, under the name it gets (see [`Self::name`]).
    pub fn pick(&mut self, mut item: Item) -> Option<Item> {
        if !self.selects(&item.path) {
            return None;
        }
        if self.strip > 0 {
            item.path = self.name(&item.path)?.to_vec();
        }
        Some(item)
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
        Selection::new(given, |s| {
            let s = std::str::from_utf8(s).unwrap();
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
    fn paths_and_patterns_that_are_not_utf8_select_byte_for_byte() {
        let stored = |s: &[u8]| s.to_vec();
        let mut s = Selection::new(&[b"caf\xe9".to_vec()], stored).unwrap();
        assert!(s.selects(b"caf\xe9/menu"));
        assert!(!s.selects("café/menu".as_bytes()));
        let mut s = Selection::new(&[b"*\xe9".to_vec(), b"gone\xff".to_vec()], stored).unwrap();
        assert!(s.selects(b"caf\xe9"));
        assert!(!s.selects("café".as_bytes()));
        assert_eq!(s.unmatched(), vec!["gone\\xff"]);
    }

    #[test]
    fn what_matched_nothing_is_named() {
        let mut s = selection(&["etc/ssh", "etc/nonexistent", "*.nothing"]);
        s.selects(b"etc/ssh/moduli");
        s.selects(b"etc/passwd");
        assert_eq!(s.unmatched(), vec!["etc/nonexistent", "*.nothing"]);
    }

    #[test]
    fn excludes_leave_out_items_and_what_is_below_them() {
        let mut s = selection(&["home"])
            .excluding(&["*.tmp", "home/*/.cache"])
            .unwrap();
        assert!(s.selects(b"home/a/notes.txt"));
        assert!(!s.selects(b"home/a/x.tmp"));
        assert!(!s.selects(b"home/a/.cache"));
        assert!(!s.selects(b"home/a/.cache/deep/file"));
        assert!(s.selects(b"home/a/b/.cache"));
        assert!(!s.selects(b"etc/x"));
        assert!(!s.is_everything());
    }

    #[test]
    fn strip_components_shortens_names_and_drops_what_is_consumed() {
        let s = selection(&[]).stripping(2);
        assert_eq!(s.name(b"home/alice/doc/a.txt"), Some(&b"doc/a.txt"[..]));
        assert_eq!(s.name(b"home/alice/x"), Some(&b"x"[..]));
        assert_eq!(s.name(b"home/alice"), None);
        assert_eq!(s.name(b"home"), None);
        assert_eq!(selection(&[]).name(b"home"), Some(&b"home"[..]));
    }

    #[test]
    fn no_filter_selects_everything() {
        let mut s = selection(&[]);
        assert!(s.is_everything());
        assert!(s.selects(b"anything"));
    }
}
