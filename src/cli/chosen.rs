//! The archives a command is pointed at by pattern (`--glob`) or wholesale (`--all`), and the
//! confirmation that removing many of them at once asks for.

use std::io::{BufRead, IsTerminal, Write};

use globset::GlobMatcher;

use crate::archive::ArchiveMeta;
use crate::error::{Error, Result};
use crate::util::id::ArchiveId;

/// `--glob PATTERN`: archive names as shell patterns (`*`, `?`, `[…]`).
pub fn glob(pattern: &str) -> Result<GlobMatcher> {
    Ok(globset::Glob::new(pattern)
        .map_err(|e| Error::invalid(format!("bad --glob pattern {pattern:?}: {e}")))?
        .compile_matcher())
}

/// The archives of `list` whose names `glob` matches, oldest first; none is an error that
/// says so (a pattern that matches nothing is a typing error more often than not).
pub fn matching(
    list: &[(ArchiveId, ArchiveMeta)],
    pattern: &str,
) -> Result<Vec<(ArchiveId, ArchiveMeta)>> {
    if pattern.starts_with("aid:") {
        return Err(Error::invalid(format!(
            "--glob {pattern:?}: --glob matches archive names; give aid:PREFIX as an ARCHIVE argument"
        )));
    }
    let g = glob(pattern)?;
    let mut found: Vec<(ArchiveId, ArchiveMeta)> = list
        .iter()
        .filter(|(_, m)| g.is_match(&m.name))
        .cloned()
        .collect();
    if found.is_empty() {
        let names: Vec<&str> = list.iter().map(|(_, m)| m.name.as_str()).collect();
        return Err(Error::invalid(format!(
            "--glob {pattern:?} matches no archive{}",
            crate::util::text::did_you_mean(pattern, names.into_iter())
        )));
    }
    found.sort_by_key(|(_, m)| m.start);
    Ok(found)
}

/// Asks, on the terminal, before `what` (e.g. "delete 12 archives") is done: `yes` (`--yes`)
/// answers for the user; without a terminal to ask on, nothing is done.
pub fn confirm(what: &str, yes: bool) -> Result<()> {
    if yes {
        return Ok(());
    }
    if !std::io::stdin().is_terminal() {
        return Err(Error::invalid(format!(
            "about to {what}: confirm with --yes (no terminal to ask on); nothing was changed"
        )));
    }
    let mut err = std::io::stderr().lock();
    let _ = write!(err, "About to {what}. Type yes to go on: ");
    let _ = err.flush();
    let mut answer = String::new();
    std::io::stdin()
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Error::io("<stdin>", e))?;
    if answer.trim() == "yes" {
        Ok(())
    } else {
        Err(Error::invalid(format!(
            "not confirmed: did not {what}; nothing was changed"
        )))
    }
}

/// `--tag`, `--host`, `--user`: which archives a command considers by what they carry.
pub struct Filter {
    /// Any of these sets, each wholly among the archive's tags.
    tags: Vec<Vec<String>>,
    hosts: Vec<String>,
    users: Vec<String>,
}

impl Filter {
    pub fn of(args: &crate::cli::args::FilterArgs) -> Result<Filter> {
        let tags = args
            .tags
            .iter()
            .map(|t| crate::archive::check_tags(std::slice::from_ref(t)))
            .collect::<Result<_>>()?;
        Ok(Filter {
            tags,
            hosts: args.hosts.clone(),
            users: args.users.clone(),
        })
    }

    /// Whether `meta` passes every filter given.
    pub fn matches(&self, meta: &ArchiveMeta) -> bool {
        (self.tags.is_empty()
            || self
                .tags
                .iter()
                .any(|set| set.iter().all(|t| meta.tags.contains(t))))
            && (self.hosts.is_empty() || self.hosts.contains(&meta.hostname))
            && (self.users.is_empty() || self.users.contains(&meta.username))
    }

    /// Whether any filter was given.
    pub fn is_some(&self) -> bool {
        !(self.tags.is_empty() && self.hosts.is_empty() && self.users.is_empty())
    }
}
