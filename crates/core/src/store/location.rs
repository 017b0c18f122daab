//! Repository locations: a plain path or `file:///path` (local directory),
//! `sftp://[user@]host[:port]/path` (SFTP through the user's ssh),
//! `ssh://[user@]host[:port]/path` (`cairn serve` on the far side of the user's ssh), and
//! `s3://[endpoint-host[:port]]/bucket/prefix` (S3-compatible object storage).

use std::path::PathBuf;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::store::local::LocalStore;
use crate::store::ssh::SshStore;
pub use crate::store::target::{S3Target, SftpTarget};
use crate::store::{self, RemoteSettings, Store, StoreSettings};
#[cfg(feature = "remote")]
use crate::store::{s3::S3Store, sftp::SftpStore};

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Location {
    Local(PathBuf),
    Sftp(SftpTarget),
    /// `cairn serve` reached through ssh (the same parts as an SFTP location).
    Ssh(SftpTarget),
    S3(S3Target),
}

fn bad(s: &str, why: &str, form: &str) -> Error {
    Error::invalid(format!("{s:?}: {why} (expected {form})"))
}

/// Splits `host[:port]`, with IPv6 hosts in brackets.
fn host_port(hp: &str) -> Option<(String, Option<u16>)> {
    if let Some(rest) = hp.strip_prefix('[') {
        let (h, after) = rest.split_once(']')?;
        return match after.strip_prefix(':') {
            Some(p) => Some((h.to_string(), Some(p.parse().ok()?))),
            None if after.is_empty() => Some((h.to_string(), None)),
            None => None,
        };
    }
    match hp.rsplit_once(':') {
        Some((h, p)) => Some((h.to_string(), Some(p.parse().ok()?))),
        None => Some((hp.to_string(), None)),
    }
}

/// The parts of an `sftp://` or `ssh://` location after its scheme.
fn ssh_like(s: &str, rest: &str, form: &str) -> Result<SftpTarget> {
    let (authority, path) = rest
        .split_once('/')
        .ok_or_else(|| bad(s, "no path", form))?;
    let (user, hp) = match authority.rsplit_once('@') {
        Some((u, hp)) if !u.is_empty() => (Some(u.to_string()), hp),
        Some(_) => return Err(bad(s, "empty user name", form)),
        None => (None, authority),
    };
    // ssh would read either as an option (`-oProxyCommand=…`).
    if hp.starts_with('-') || user.as_deref().is_some_and(|u| u.starts_with('-')) {
        return Err(bad(s, "a host or user may not begin with '-'", form));
    }
    let (host, port) = host_port(hp).ok_or_else(|| bad(s, "bad host or port", form))?;
    if host.is_empty() {
        return Err(bad(s, "no host", form));
    }
    let path = match path.strip_prefix("~/") {
        Some(home_relative) => home_relative.to_string(),
        None => format!("/{path}"),
    };
    if path.trim_matches('/').is_empty() {
        return Err(bad(s, "no repository path", form));
    }
    Ok(SftpTarget {
        user,
        host,
        port,
        path: path.trim_end_matches('/').to_string(),
    })
}

impl Location {
    pub fn parse(s: &str) -> Result<Self> {
        if s.is_empty() {
            return Err(Error::invalid("the repository location is empty"));
        }
        if let Some(rest) = s.strip_prefix("file://") {
            if !rest.starts_with('/') {
                return Err(bad(
                    s,
                    "a file:// URL needs an absolute path",
                    "file:///path/to/repo",
                ));
            }
            return Ok(Location::Local(PathBuf::from(rest)));
        }
        if let Some(rest) = s.strip_prefix("sftp://") {
            return Ok(Location::Sftp(ssh_like(
                s,
                rest,
                "sftp://[user@]host[:port]/path",
            )?));
        }
        if let Some(rest) = s.strip_prefix("ssh://") {
            return Ok(Location::Ssh(ssh_like(
                s,
                rest,
                "ssh://[user@]host[:port]/path",
            )?));
        }
        if let Some(rest) = s.strip_prefix("s3://") {
            const FORM: &str = "s3://[endpoint-host[:port]]/bucket/prefix";
            let (endpoint, path) = rest
                .split_once('/')
                .ok_or_else(|| bad(s, "no bucket", FORM))?;
            if !endpoint.is_empty() && host_port(endpoint).is_none() {
                return Err(bad(s, "bad endpoint", FORM));
            }
            let (bucket, prefix) = path.split_once('/').unwrap_or((path, ""));
            let bucket_ok = (3..=63).contains(&bucket.len())
                && bucket.bytes().all(|b| {
                    b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || b == b'.'
                });
            if !bucket_ok {
                return Err(bad(s, "bad bucket name", FORM));
            }
            let prefix = prefix.trim_matches('/');
            if prefix.split('/').any(|c| c == "." || c == "..") || prefix.contains("//") {
                return Err(bad(s, "bad prefix", FORM));
            }
            return Ok(Location::S3(S3Target {
                endpoint: (!endpoint.is_empty()).then(|| endpoint.to_string()),
                bucket: bucket.to_string(),
                prefix: prefix.to_string(),
            }));
        }
        if let Some((scheme, _)) = s.split_once("://") {
            return Err(Error::invalid(format!(
                "{s:?}: unsupported repository URL scheme {scheme:?} (use a path, file:///path, sftp://host/path, ssh://host/path or s3://host/bucket/prefix)"
            )));
        }
        Ok(Location::Local(PathBuf::from(s)))
    }

    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    fn open_inner(&self, settings: &RemoteSettings) -> Result<Arc<dyn Store>> {
        Ok(match self {
            Location::Local(p) => Arc::new(LocalStore::new(p.clone())),
            #[cfg(feature = "remote")]
            Location::Sftp(t) => Arc::new(
                SftpStore::new(t.clone(), settings.rsh.clone())
                    .map_err(|e| Error::invalid(format!("{self}: {e}")))?,
            ),
            #[cfg(feature = "remote")]
            Location::S3(t) => Arc::new(
                S3Store::new(t, settings.s3_retries, settings.s3_allow_http)
                    .map_err(|e| Error::invalid(format!("{self}: {e}")))?,
            ),
            #[cfg(not(feature = "remote"))]
            Location::Sftp(_) | Location::S3(_) => return Err(self.no_remote()),
            Location::Ssh(t) => Arc::new(SshStore::new(
                t.clone(),
                settings.rsh.clone(),
                &settings.remote_path,
            )),
        })
    }

    #[cfg(not(feature = "remote"))]
    fn no_remote(&self) -> Error {
        Error::invalid(format!(
            "{self}: this cairn was built without remote repositories (cargo feature \"remote\")"
        ))
    }

    /// Opens the store, wrapped as `settings` ask (slow-store emulation, an operation log,
    /// injected faults).
    pub fn open_store(&self, settings: &StoreSettings) -> Result<Arc<dyn Store>> {
        let store = self.open_inner(&settings.remote)?;
        store::wrap(store, settings).map_err(|e| {
            let log = settings.log.as_deref().unwrap_or(std::path::Path::new(""));
            Error::invalid(format!("CAIRN_STORE_LOG {}: {e}", log.display()))
        })
    }

    /// Prepares a new repository location: creates the directory (and its parents) and
    /// refuses one that has anything in it. (`Repository::init` refuses a non-empty store
    /// too, for every kind of location.)
    #[cfg_attr(not(feature = "remote"), allow(unused_variables))]
    pub fn prepare_new(&self, settings: &RemoteSettings) -> Result<()> {
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
                    crate::store::local::create_private_dir_all(p).map_err(|e| Error::io(p, e))?;
                }
                Ok(())
            }
            #[cfg(feature = "remote")]
            Location::Sftp(t) => {
                let s = SftpStore::new(t.clone(), settings.rsh.clone())
                    .map_err(|e| Error::invalid(e.to_string()))?;
                Ok(s.create_root()?)
            }
            #[cfg(not(feature = "remote"))]
            Location::Sftp(_) => Err(self.no_remote()),
            Location::Ssh(t) => {
                SshStore::new(t.clone(), settings.rsh.clone(), &settings.remote_path)
                    .create_root()?;
                Ok(())
            }
            Location::S3(_) => Ok(()),
        }
    }
}

impl Location {
    /// How this machine names the location in its memory of repositories: the URL, with a
    /// local path made absolute (so `repo` and `./repo` are one location).
    pub fn memory_key(&self) -> String {
        match self {
            Location::Local(p) => std::fs::canonicalize(p)
                .unwrap_or_else(|_| p.clone())
                .display()
                .to_string(),
            other => other.to_string(),
        }
    }
}

impl std::fmt::Display for Location {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Location::Local(p) => write!(f, "{}", p.display()),
            Location::Sftp(t) | Location::Ssh(t) => {
                let scheme = if matches!(self, Location::Sftp(_)) {
                    "sftp"
                } else {
                    "ssh"
                };
                write!(f, "{scheme}://")?;
                if let Some(u) = &t.user {
                    write!(f, "{u}@")?;
                }
                write!(f, "{}", t.host)?;
                if let Some(p) = t.port {
                    write!(f, ":{p}")?;
                }
                if t.path.starts_with('/') {
                    write!(f, "{}", t.path)
                } else {
                    write!(f, "/~/{}", t.path)
                }
            }
            Location::S3(t) => write!(
                f,
                "s3://{}/{}/{}",
                t.endpoint.as_deref().unwrap_or(""),
                t.bucket,
                t.prefix
            ),
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
        assert_eq!(
            Location::parse("ssh://alice@h:22/srv/r")
                .unwrap()
                .to_string(),
            "ssh://alice@h:22/srv/r"
        );
        assert!(matches!(
            Location::parse("ssh://h/~/r").unwrap(),
            Location::Ssh(SftpTarget { ref path, .. }) if path == "r"
        ));
        assert!(Location::parse("ssh://-oProxyCommand=x/r").is_err());
        assert!(Location::parse("").is_err());
    }

    #[test]
    fn parses_sftp_urls() {
        let t = |s: &str| match Location::parse(s).unwrap() {
            Location::Sftp(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            t("sftp://alice@backup.example:2222/srv/repo/"),
            SftpTarget {
                user: Some("alice".into()),
                host: "backup.example".into(),
                port: Some(2222),
                path: "/srv/repo".into()
            }
        );
        assert_eq!(t("sftp://host/~/repo").path, "repo");
        assert_eq!(t("sftp://[::1]:22/r").host, "::1");
        assert_eq!(
            Location::parse("sftp://alice@h:22/srv/r")
                .unwrap()
                .to_string(),
            "sftp://alice@h:22/srv/r"
        );
        for bad in [
            "sftp://host",
            "sftp://host/",
            "sftp://@host/r",
            "sftp://host:port/r",
            "sftp:///r",
            "sftp://[::1/r",
            "sftp://-oProxyCommand=touch%20pwned/r",
            "sftp://-oProxyCommand=x@host/r",
        ] {
            let e = Location::parse(bad).unwrap_err().to_string();
            assert!(e.contains("expected sftp://"), "{bad}: {e}");
        }
    }

    #[test]
    fn parses_s3_urls() {
        let t = |s: &str| match Location::parse(s).unwrap() {
            Location::S3(t) => t,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            t("s3://127.0.0.1:9000/backup-test/cairn/host1"),
            S3Target {
                endpoint: Some("127.0.0.1:9000".into()),
                bucket: "backup-test".into(),
                prefix: "cairn/host1".into()
            }
        );
        assert_eq!(t("s3:///my-bucket").endpoint, None);
        assert_eq!(t("s3:///my-bucket").prefix, "");
        for bad in [
            "s3://",
            "s3://host",
            "s3://host/B",
            "s3://host/ab",
            "s3://host/bucket/../x",
            "s3://host:x/bucket",
        ] {
            let e = Location::parse(bad).unwrap_err().to_string();
            assert!(e.contains("expected s3://"), "{bad}: {e}");
        }
    }
}
