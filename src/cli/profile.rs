//! `--profile NAME`: one file that says what a backup is, so that a timer runs
//! `cairn --profile home create home` and nothing else.
//!
//! NAME is a file name under `$XDG_CONFIG_HOME/cairn/` (`~/.config/cairn/`), `.toml` added;
//! a NAME with a `/` or ending in `.toml` is a path. What the command line says wins: the
//! repository (`-r`, or `CAIRN_REPO`), a passphrase from the environment, paths given, and
//! keep rules given; exclude patterns add up.
//!
//! ```toml
//! repository = "sftp://backup@nas.lan/srv/cairn"
//! passcommand = "pass show cairn/home"
//!
//! [create]
//! paths = ["/home/alice", "/etc"]
//! exclude = ["*.tmp", "home/*/.cache"]
//! exclude-caches = true
//! one-file-system = true
//! compression = "zstd,3"
//!
//! [prune]
//! keep-daily = 7
//! keep-weekly = 4
//! keep-monthly = 12
//!
//! [hooks]
//! before = "pg_dump -Fc mydb > /var/backups/mydb.dump"
//! after = "curl -fsS https://hc-ping.com/UUID"
//! ```
//!
//! The hooks are run by [`crate::cli::hooks`].
//!
//! An unknown key is an error that names it and the file (a typo must not silently back up
//! less than intended).

use std::path::{Path, PathBuf};

use serde::Deserialize;

use crate::cli::args::{Cli, Command};
use crate::cli::hooks::HooksSection;
use crate::error::{Error, Result};

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct Profile {
    pub repository: Option<String>,
    pub passcommand: Option<String>,
    #[serde(default)]
    pub create: CreateSection,
    #[serde(default)]
    pub prune: PruneSection,
    #[serde(default)]
    pub hooks: crate::cli::hooks::HooksSection,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct CreateSection {
    #[serde(default)]
    pub paths: Vec<PathBuf>,
    #[serde(default)]
    pub exclude: Vec<String>,
    #[serde(default)]
    pub exclude_caches: bool,
    #[serde(default)]
    pub iexclude: Vec<String>,
    #[serde(default)]
    pub exclude_if_present: Vec<String>,
    #[serde(default)]
    pub keep_exclude_tags: bool,
    /// A size as `--exclude-larger-than` takes it ("1G").
    pub exclude_larger_than: Option<String>,
    #[serde(default)]
    pub one_file_system: bool,
    pub compression: Option<String>,
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
pub struct PruneSection {
    pub keep_last: Option<u32>,
    pub keep_within: Option<String>,
    pub keep_minutely: Option<u32>,
    pub keep_hourly: Option<u32>,
    pub keep_daily: Option<u32>,
    pub keep_weekly: Option<u32>,
    pub keep_monthly: Option<u32>,
    pub keep_yearly: Option<u32>,
}

/// Where the profile NAME lives.
pub fn path_of(name: &str) -> Result<PathBuf> {
    if name.contains('/') || name.ends_with(".toml") {
        return Ok(PathBuf::from(name));
    }
    if name.is_empty() || name.starts_with('.') {
        return Err(Error::invalid(format!("{name:?} is not a profile name")));
    }
    let base = match std::env::var_os("XDG_CONFIG_HOME").filter(|v| !v.is_empty()) {
        Some(dir) => PathBuf::from(dir),
        None => match std::env::var_os("HOME").filter(|v| !v.is_empty()) {
            Some(home) => Path::new(&home).join(".config"),
            None => {
                return Err(Error::invalid(
                    "neither XDG_CONFIG_HOME nor HOME is set: give the profile's path",
                ))
            }
        },
    };
    Ok(base.join("cairn").join(format!("{name}.toml")))
}

/// Reads and checks a profile.
pub fn load(path: &Path) -> Result<Profile> {
    let text = std::fs::read_to_string(path).map_err(|e| Error::io(path, e))?;
    toml::from_str(&text).map_err(|e| {
        Error::invalid(format!(
            "profile {}: {}",
            path.display(),
            e.to_string().trim_end()
        ))
    })
}

/// Reads the profile the command line names (if any) and fills in what the command line left
/// unsaid; returns its hooks.
pub fn apply(cli: &mut Cli) -> Result<Option<HooksSection>> {
    let Some(name) = cli.profile.clone() else {
        return Ok(None);
    };
    let path = path_of(&name)?;
    let mut p = load(&path)?;
    let hooks = crate::cli::hooks::checked(std::mem::take(&mut p.hooks), &path)?;
    if cli.repo.is_none() {
        cli.repo = p.repository;
    }
    if let Some(cmd) = p.passcommand {
        crate::cli::passphrase::set_profile_command(cmd);
    }
    match &mut cli.command {
        Command::Create(a) => {
            let c = p.create;
            let reads_stdin = a.stdin_from_command || a.paths.iter().any(|p| p.as_os_str() == "-");
            let listed = a.files_from.is_some() || a.files_from0.is_some();
            if a.paths.is_empty() && !listed && !reads_stdin {
                if c.paths.is_empty() {
                    return Err(Error::invalid(format!(
                        "no path to back up: give one, or set paths under [create] in {}",
                        path.display()
                    )));
                }
                a.paths = c.paths;
            }
            let mut exclude = c.exclude;
            exclude.append(&mut a.exclude);
            a.exclude = exclude;
            a.exclude_caches |= c.exclude_caches;
            let mut iexclude = c.iexclude;
            iexclude.append(&mut a.iexclude);
            a.iexclude = iexclude;
            let mut tags = c.exclude_if_present;
            tags.append(&mut a.exclude_if_present);
            a.exclude_if_present = tags;
            a.keep_exclude_tags |= c.keep_exclude_tags;
            if a.exclude_larger_than.is_none() {
                if let Some(size) = c.exclude_larger_than {
                    a.exclude_larger_than =
                        Some(crate::cli::args::size_arg(&size).map_err(|e| {
                            Error::invalid(format!("{}: exclude-larger-than: {e}", path.display()))
                        })?);
                }
            }
            a.one_file_system |= c.one_file_system;
            if a.compression.is_none() {
                a.compression = c.compression;
            }
        }
        Command::Prune(a) => {
            let r = p.prune;
            for (given, from) in [
                (&mut a.keep_last, r.keep_last),
                (&mut a.keep_minutely, r.keep_minutely),
                (&mut a.keep_hourly, r.keep_hourly),
                (&mut a.keep_daily, r.keep_daily),
                (&mut a.keep_weekly, r.keep_weekly),
                (&mut a.keep_monthly, r.keep_monthly),
                (&mut a.keep_yearly, r.keep_yearly),
            ] {
                if *given == 0 {
                    *given = from.unwrap_or(0);
                }
            }
            if a.keep_within.is_none() {
                a.keep_within = r.keep_within;
            }
        }
        _ => {}
    }
    Ok(Some(hooks))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> std::result::Result<Profile, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    #[test]
    fn a_full_profile_parses() {
        let p = parse(
            r#"
repository = "/srv/cairn"
passcommand = "pass show cairn"
[create]
paths = ["/home/alice", "/etc"]
exclude = ["*.tmp"]
exclude-caches = true
one-file-system = true
compression = "zstd,3"
[prune]
keep-daily = 7
keep-within = "2d"
"#,
        )
        .unwrap();
        assert_eq!(p.repository.as_deref(), Some("/srv/cairn"));
        assert_eq!(p.create.paths.len(), 2);
        assert!(p.create.exclude_caches && p.create.one_file_system);
        assert_eq!(p.prune.keep_daily, Some(7));
        assert_eq!(p.prune.keep_weekly, None);
    }

    #[test]
    fn unknown_keys_are_named() {
        let e = parse("repositry = \"x\"").unwrap_err();
        assert!(e.contains("repositry"), "{e}");
        let e = parse("[create]\nexclude-cache = true").unwrap_err();
        assert!(e.contains("exclude-cache"), "{e}");
        let e = parse("[backup]\npaths = []").unwrap_err();
        assert!(e.contains("backup"), "{e}");
    }

    #[test]
    fn the_example_profiles_parse_and_their_hooks_check() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/examples");
        let mut seen = 0;
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "toml") {
                let p = load(&path).unwrap();
                crate::cli::hooks::checked(p.hooks, &path).unwrap();
                seen += 1;
            }
        }
        assert!(seen >= 2, "{seen} example profiles");
        let db = load(&dir.join("db.toml")).unwrap();
        assert!(db.hooks.before.unwrap().contains("pg_dump"));
        assert!(db.hooks.after.unwrap().contains("curl"));
    }

    #[test]
    fn hooks_name_only_commands_they_can_run_around() {
        let p = parse("[hooks]\nbefore = \"true\"\ncommands = [\"create\", \"lst\"]").unwrap();
        let e = crate::cli::hooks::checked(p.hooks, Path::new("p.toml")).unwrap_err();
        assert!(
            e.to_string().contains("\"lst\" is not one of create"),
            "{e}"
        );
        let p = parse("[hooks]\ntimeout-secs = 0").unwrap();
        assert!(crate::cli::hooks::checked(p.hooks, Path::new("p.toml")).is_err());
        let e = parse("[hooks]\nbefor = \"x\"").unwrap_err();
        assert!(e.contains("befor"), "{e}");
    }

    #[test]
    fn names_and_paths() {
        assert!(path_of("home").unwrap().ends_with("cairn/home.toml"));
        assert_eq!(path_of("./p.toml").unwrap(), PathBuf::from("./p.toml"));
        assert_eq!(
            path_of("/etc/cairn/x").unwrap(),
            PathBuf::from("/etc/cairn/x")
        );
        assert!(path_of("").is_err());
    }
}
