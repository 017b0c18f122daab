//! The paths a backup walks: those given, then those a list file names (`--files-from`), each
//! once.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::stored_path;
use crate::error::{Error, Result};

/// A file that lists paths to back up; `-` is standard input.
#[derive(Clone, Copy, Debug)]
pub enum PathList<'a> {
    /// One path per line (`--files-from`); a CR before the newline is dropped.
    Lines(&'a Path),
    /// NUL-separated (`--files-from0`, as `find -print0` writes).
    Nul(&'a Path),
}

/// The paths to back up: `given`, then those `list` names, merged ([`merge`]). An error when
/// the list names no path and none is given, or when none of the paths exists (nothing would
/// be saved).
pub fn gather(
    given: &[PathBuf],
    list: Option<PathList>,
    one_file_system: bool,
) -> Result<Vec<PathBuf>> {
    let mut all = given.to_vec();
    if let Some(list) = list {
        let listed = read_list(list)?;
        if listed.is_empty() && given.is_empty() {
            let (PathList::Lines(file) | PathList::Nul(file)) = list;
            return Err(Error::invalid(format!(
                "{} lists no path to back up; nothing was saved",
                file.display()
            )));
        }
        all.extend(listed);
    }
    let paths = merge(&all, one_file_system);
    if !paths.iter().any(|p| std::fs::symlink_metadata(p).is_ok()) {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::invalid(format!(
            "none of the paths to back up exists ({}); nothing was saved",
            shown.join(", ")
        )));
    }
    Ok(paths)
}

/// The paths a list file names. Empty entries are skipped; in a file of lines, as in an
/// exclude file, a line is trimmed of spaces and tabs at both ends, and one that then starts
/// with `#` is a comment (a name with such spaces, or starting with `#`, goes in a NUL list,
/// which is taken verbatim).
pub fn read_list(list: PathList) -> Result<Vec<PathBuf>> {
    use std::io::Read;
    let (file, sep) = match list {
        PathList::Lines(f) => (f, b'\n'),
        PathList::Nul(f) => (f, 0u8),
    };
    let mut bytes = Vec::new();
    if file.as_os_str() == "-" {
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("<stdin>", e))?;
    } else {
        bytes = std::fs::read(file).map_err(|e| Error::io(file, e))?;
    }
    Ok(bytes
        .split(|b| *b == sep)
        .map(|l| if sep == b'\n' { l.trim_ascii() } else { l })
        .filter(|l| !(l.is_empty() || sep == b'\n' && l.starts_with(b"#")))
        .map(|l| PathBuf::from(OsStr::from_bytes(l)))
        .collect())
}

/// The paths to back up, each once: a path given twice (`./b`, `b/`, `b`) is kept the first
/// time, and a path that the walk of another given directory reaches anyway (`b/c` with `b`)
/// is dropped. A path is only dropped when the walk really reaches it: through directories,
/// not symlinks, and on the same file system with `one_file_system`.
pub fn merge(paths: &[PathBuf], one_file_system: bool) -> Vec<PathBuf> {
    let keys: Vec<Vec<u8>> = paths.iter().map(|p| stored_path(p)).collect();
    let mut kept = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let again = keys[..i].contains(&keys[i]);
        let inside = paths.iter().enumerate().any(|(j, a)| {
            j != i && keys[j] != keys[i] && reaches(a, &keys[j], &keys[i], one_file_system)
        });
        if !again && !inside {
            kept.push(p.clone());
        }
    }
    kept
}

/// Whether walking `root` (stored as `root_key`) reaches the path stored as `key`.
fn reaches(root: &Path, root_key: &[u8], key: &[u8], one_file_system: bool) -> bool {
    let rel = if root_key.is_empty() {
        key
    } else {
        match key.strip_prefix(root_key) {
            Some(rest) if rest.first() == Some(&b'/') => &rest[1..],
            _ => return false,
        }
    };
    let Ok(mut md) = std::fs::symlink_metadata(root) else {
        return false;
    };
    let root_dev = md.dev();
    // Every directory on the way, from the root down to the path's parent, must be one the
    // walk descends into.
    let comps: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
    let mut dir = root.to_path_buf();
    for c in &comps {
        if !md.is_dir() || (one_file_system && md.dev() != root_dev) {
            return false;
        }
        dir.push(OsStr::from_bytes(c));
        md = match std::fs::symlink_metadata(&dir) {
            Ok(m) => m,
            // Missing (or unreadable): kept, so that the backup names it in a warning.
            Err(_) => return false,
        };
    }
    !one_file_system || md.dev() == root_dev
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_given_twice_or_reached_by_another_s_walk_is_kept_once() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().join("b");
        std::fs::create_dir_all(b.join("c")).unwrap();
        std::os::unix::fs::symlink(&b, dir.path().join("link")).unwrap();
        let given = [
            b.join("c"),
            b.clone(),
            dir.path().join("b/"),
            dir.path().join("./b"),
            dir.path().join("link/c"),
            dir.path().join("b/missing"),
        ];
        // `link/c` is reached through a symlink, which the walk of `b` does not follow;
        // `b/missing` is not reached at all.
        assert_eq!(
            merge(&given, false),
            [b.clone(), dir.path().join("link/c"), b.join("missing")]
        );
    }

    #[test]
    fn lists_are_split_by_line_or_by_nul_and_skip_empty_entries() {
        let dir = tempfile::tempdir().unwrap();
        let lines = dir.path().join("lines");
        std::fs::write(&lines, b"a\r\n\n# a comment\n  # another\n\t b c  \n").unwrap();
        let nul = dir.path().join("nul");
        std::fs::write(&nul, b"a\nb\0\0c").unwrap();
        assert_eq!(
            read_list(PathList::Lines(&lines)).unwrap(),
            [PathBuf::from("a"), PathBuf::from("b c")]
        );
        assert_eq!(
            read_list(PathList::Nul(&nul)).unwrap(),
            [PathBuf::from("a\nb"), PathBuf::from("c")]
        );
    }

    #[test]
    fn an_empty_list_with_no_path_given_or_no_existing_path_is_an_error() {
        let dir = tempfile::tempdir().unwrap();
        let empty = dir.path().join("empty");
        std::fs::write(&empty, b"\n").unwrap();
        let e = gather(&[], Some(PathList::Lines(&empty)), false).unwrap_err();
        assert!(e.to_string().contains("lists no path to back up"), "{e}");
        let gone = [dir.path().join("gone")];
        let e = gather(&gone, Some(PathList::Lines(&empty)), false).unwrap_err();
        assert!(
            e.to_string()
                .contains("none of the paths to back up exists"),
            "{e}"
        );
        let listed = [empty];
        assert_eq!(gather(&listed, None, false).unwrap(), listed);
    }
}
