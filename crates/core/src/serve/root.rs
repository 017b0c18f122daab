//! Which repository a connection may open: the path the client names, resolved on the
//! server, against `--restrict-to-path` and `--restrict-to-repository`.

use std::path::{Component, Path, PathBuf};

use crate::error::{Error, Result};

/// The server's restrictions, canonical.
#[derive(Clone, Debug, Default)]
pub struct Restrictions {
    /// The repository must lie at or below one of these.
    pub paths: Vec<PathBuf>,
    /// The repository must be one of these.
    pub repositories: Vec<PathBuf>,
}

impl Restrictions {
    /// Resolves the directories the operator gave (each must exist for `--restrict-to-path`;
    /// a repository may be one that `init` will create).
    pub fn new(paths: &[PathBuf], repositories: &[PathBuf]) -> Result<Self> {
        let paths = paths
            .iter()
            .map(|p| std::fs::canonicalize(p).map_err(|e| Error::io(p, e)))
            .collect::<Result<_>>()?;
        let repositories = repositories
            .iter()
            .map(|p| resolve(p))
            .collect::<Result<_>>()?;
        Ok(Self {
            paths,
            repositories,
        })
    }

    /// The repository `asked` names, resolved, if the restrictions allow it.
    pub fn allow(&self, asked: &str) -> Result<PathBuf> {
        if asked.is_empty() || asked.contains('\0') {
            return Err(Error::invalid("no repository path was given"));
        }
        let path = resolve(Path::new(asked))?;
        let inside = |roots: &[PathBuf], exact: bool| {
            roots.iter().any(|r| {
                if exact {
                    &path == r
                } else {
                    path.starts_with(r)
                }
            })
        };
        let restricted = !self.paths.is_empty() || !self.repositories.is_empty();
        if restricted && !inside(&self.paths, false) && !inside(&self.repositories, true) {
            return Err(Error::invalid(format!(
                "{asked}: this server does not serve that repository (it is restricted to {})",
                self.describe()
            )));
        }
        Ok(path)
    }

    fn describe(&self) -> String {
        let mut all: Vec<String> = Vec::new();
        all.extend(
            self.paths
                .iter()
                .map(|p| format!("{} and below", p.display())),
        );
        all.extend(self.repositories.iter().map(|p| p.display().to_string()));
        all.join(", ")
    }
}

/// Whether `dir` is a cairn repository: its config and its key directory.
fn is_repository(dir: &Path) -> bool {
    dir.join("config").is_file() && dir.join("keys").is_dir()
}

/// A connection serves one repository: `path` must not lie inside a repository, nor hold
/// one (a client that opened another repository's `removed/`, or the directory above it,
/// would write there past every rule: records, archives without their markers).
pub fn servable(path: &Path) -> Result<()> {
    if let Some(outer) = path.ancestors().skip(1).find(|a| is_repository(a)) {
        return Err(Error::invalid(format!(
            "{}: lies inside the repository {}; a repository is served as a whole",
            path.display(),
            outer.display()
        )));
    }
    let entries = match std::fs::read_dir(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(Error::io(path, e)),
        Ok(entries) => entries,
    };
    if is_repository(path) {
        return Ok(());
    }
    drop(entries);
    let held = walkdir::WalkDir::new(path)
        .min_depth(1)
        .follow_links(false)
        .into_iter()
        .filter_map(|e| e.ok())
        .find(|e| e.file_type().is_dir() && is_repository(e.path()));
    match held {
        Some(inner) => Err(Error::invalid(format!(
            "{}: holds the repository {}; a repository is served by its own path",
            path.display(),
            inner.path().display()
        ))),
        None => Ok(()),
    }
}

/// `path` made absolute with every symbolic link resolved, for a path that may not exist yet:
/// its deepest existing ancestor is canonicalized and the rest appended (which may not hold
/// `.` or `..`, since what they would mean depends on links that do not exist yet).
pub fn resolve(path: &Path) -> Result<PathBuf> {
    let mut existing = if path.is_absolute() {
        path.to_path_buf()
    } else {
        std::env::current_dir()
            .map_err(|e| Error::io(".", e))?
            .join(path)
    };
    let mut rest: Vec<std::ffi::OsString> = Vec::new();
    loop {
        match std::fs::canonicalize(&existing) {
            Ok(mut base) => {
                for part in rest.iter().rev() {
                    base.push(part);
                }
                return Ok(base);
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                let last = existing.components().next_back();
                match last {
                    Some(Component::Normal(part)) => rest.push(part.to_os_string()),
                    _ => {
                        return Err(Error::invalid(format!(
                            "{}: a path that does not exist may not hold \".\" or \"..\"",
                            path.display()
                        )))
                    }
                }
                if !existing.pop() {
                    return Err(Error::io(path, e));
                }
            }
            Err(e) => return Err(Error::io(path, e)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_whole_repositories_are_served() {
        let d = tempfile::tempdir().unwrap();
        let repo = d.path().join("repo");
        std::fs::create_dir_all(repo.join("keys")).unwrap();
        std::fs::create_dir_all(repo.join("removed")).unwrap();
        std::fs::write(repo.join("config"), b"{}").unwrap();
        assert!(servable(&repo).is_ok());
        assert!(servable(&d.path().join("new")).is_ok());
        for inside in ["removed", "packs", "removed/new"] {
            let e = servable(&repo.join(inside)).unwrap_err().to_string();
            assert!(e.contains("inside the repository"), "{e}");
        }
        let e = servable(d.path()).unwrap_err().to_string();
        assert!(e.contains("holds the repository"), "{e}");
        // Deeper down too: the directory above the directory above a repository.
        let deep = d.path().join("srv2/site/repo");
        std::fs::create_dir_all(deep.join("keys")).unwrap();
        std::fs::write(deep.join("config"), b"{}").unwrap();
        let e = servable(&d.path().join("srv2")).unwrap_err().to_string();
        assert!(e.contains("holds the repository"), "{e}");
    }

    #[test]
    fn paths_outside_or_through_links_are_refused() {
        let d = tempfile::tempdir().unwrap();
        let allowed = d.path().join("backup");
        std::fs::create_dir_all(allowed.join("laptop")).unwrap();
        std::fs::create_dir_all(d.path().join("other")).unwrap();
        std::os::unix::fs::symlink(d.path().join("other"), allowed.join("link")).unwrap();
        let r = Restrictions::new(std::slice::from_ref(&allowed), &[]).unwrap();
        let ok = |p: &Path| r.allow(p.to_str().unwrap());
        assert!(ok(&allowed.join("laptop")).is_ok());
        assert!(ok(&allowed.join("new/repo")).is_ok());
        assert!(ok(&allowed.join("laptop/../../other")).is_err());
        assert!(ok(&allowed.join("link")).is_err());
        assert!(ok(&allowed.join("link/deeper")).is_err());
        assert!(ok(&allowed.join("new/../../other")).is_err());
        assert!(ok(&d.path().join("backupx")).is_err());
        assert!(ok(Path::new("/")).is_err());
        assert!(r.allow("").is_err());

        let exact = Restrictions::new(&[], &[allowed.join("laptop")]).unwrap();
        assert!(exact
            .allow(allowed.join("laptop").to_str().unwrap())
            .is_ok());
        assert!(exact
            .allow(allowed.join("laptop/sub").to_str().unwrap())
            .is_err());
        let e = exact.allow("/etc").unwrap_err().to_string();
        assert!(e.contains("restricted to"), "{e}");
    }
}
