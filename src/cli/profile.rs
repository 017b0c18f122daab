//! `--profile NAME`: one file that says what a backup is, so that a timer runs
//! `cairn --profile home create home` and nothing else.
//!
//! NAME is a file name under `$XDG_CONFIG_HOME/cairn/` (`~/.config/cairn/`), `.toml` added;
//! a NAME with a `/` or ending in `.toml` is a path.
//!
//! ```toml
//! repository = "sftp://backup@nas.lan/srv/cairn"
//! passcommand = "pass show cairn/home"
//! limit-upload = 2000                  # any global option, without its --
//!
//! [create]                             # any option of create, without its --
//! paths = ["/home/alice", "/etc"]      # when the command line names none
//! exclude = ["*.tmp", "home/*/.cache"]
//! exclude-from = "/etc/cairn/home.exclude"
//! exclude-caches = true
//! one-file-system = true
//! compression = "zstd,3"
//!
//! [prune]
//! keep-daily = 7
//! keep-weekly = 4
//! keep-monthly = 12
//!
//! [check]
//! subset = "10%"
//!
//! [hooks]
//! before = "pg_dump -Fc mydb > /var/backups/mydb.dump"
//! after = "curl -fsS https://hc-ping.com/UUID"
//! ```
//!
//! What the command line or the environment says wins: the repository (`-r`, or
//! `CAIRN_REPO`), a passphrase, paths given, and every option given; the exclude patterns add
//! up. What chooses what is removed never comes from a profile ([`options`]). The hooks are
//! run by [`crate::cli::hooks`].
//!
//! An unknown key is an error that names it and the file (a typo must not silently back up
//! less than intended), whichever command runs.

use std::path::{Path, PathBuf};

use crate::cli::args::{Cli, Command};
use crate::cli::hooks::HooksSection;
use crate::error::{Error, Result};

mod options;

#[derive(Debug, Default)]
pub struct Profile {
    pub repository: Option<String>,
    pub passcommand: Option<String>,
    pub hooks: HooksSection,
    /// `[create] paths`: what is backed up when the command line names nothing.
    pub paths: Vec<PathBuf>,
    /// Global options, and the sections of the commands (each key one of its options).
    pub options: toml::Table,
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
    let said = |e: String| Error::invalid(format!("profile {}: {e}", path.display()));
    let text = read(path).map_err(|e| said(e.to_string()))?;
    parse(&text).map_err(|e| said(e.trim_end().to_string()))
}

/// A profile's text: a regular file (a FIFO put there must not hang the run), read whole.
fn read(path: &Path) -> std::io::Result<String> {
    use std::io::Read;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(rustix::fs::OFlags::NONBLOCK.bits() as i32)
        .open(path)?;
    if !f.metadata()?.is_file() {
        return Err(std::io::Error::other("not a regular file"));
    }
    let mut text = String::new();
    f.read_to_string(&mut text)?;
    Ok(text)
}

/// A profile's text, every key checked.
fn parse(text: &str) -> std::result::Result<Profile, String> {
    let mut table: toml::Table = toml::from_str(text).map_err(|e| {
        // One line: where, and what (the parser's own text draws a picture over lines).
        let line = e
            .span()
            .map(|s| text[..s.start.min(text.len())].matches('\n').count() + 1);
        match line {
            Some(n) => format!("line {n}: {}", e.message()),
            None => e.message().to_string(),
        }
    })?;
    let string = |v: toml::Value, key: &str| match v {
        toml::Value::String(s) => Ok(s),
        _ => Err(format!("{key} is a string")),
    };
    let mut p = Profile::default();
    if let Some(v) = table.remove("repository") {
        p.repository = Some(string(v, "repository")?);
    }
    if let Some(v) = table.remove("passcommand") {
        p.passcommand = Some(string(v, "passcommand")?);
    }
    if let Some(v) = table.remove("hooks") {
        if !v.is_table() {
            return Err("hooks is a section: [hooks]".to_string());
        }
        p.hooks = v
            .try_into()
            .map_err(|e: toml::de::Error| format!("[hooks]: {}", e.message()))?;
    }
    if let Some(toml::Value::Table(create)) = table.get_mut("create") {
        if let Some(v) = create.remove("paths") {
            p.paths = v
                .try_into()
                .map_err(|_| "[create] paths is a list of paths".to_string())?;
        }
    }
    options::check(&table)?;
    p.options = table;
    Ok(p)
}

/// Reads the profile the command line names (if any) and fills in what the command line left
/// unsaid; returns its hooks.
pub fn apply(cli: &mut Cli, argv: Vec<std::ffi::OsString>) -> Result<Option<HooksSection>> {
    // CAIRN_PROFILE= (empty) is no profile.
    let Some(name) = cli.profile.clone().filter(|n| !n.is_empty()) else {
        return Ok(None);
    };
    // A server runs as it is told by its forced command, never by a profile in its
    // environment (CAIRN_PROFILE could widen --restrict-to-path).
    // `cairn ui` reads every profile itself.
    if matches!(cli.command, Command::Serve(_) | Command::Ui(_)) {
        return Ok(None);
    }
    let path = path_of(&name)?;
    let p = load(&path)?;
    let hooks = crate::cli::hooks::checked(p.hooks, &path)?;
    // A profile that asks for JSON gets it for its own errors too.
    if p.options.get("log-json") == Some(&toml::Value::Boolean(true)) {
        crate::util::log::set_json(true);
    }
    let said = |e: Error| Error::invalid(format!("profile {}: {e}", path.display()));
    if let Some(parsed) = options::reparse(&p.options, argv).map_err(said)? {
        *cli = parsed;
    }
    if cli.repo.is_none() {
        cli.repo = p.repository;
    }
    if let Some(cmd) = p.passcommand {
        crate::cli::passphrase::set_profile_command(cmd);
    }
    if let Command::Create(a) = &mut cli.command {
        let reads_stdin = a.stdin_from_command || a.paths.iter().any(|p| p.as_os_str() == "-");
        let listed = a.files_from.is_some() || a.files_from0.is_some();
        if a.paths.is_empty() && !listed && !reads_stdin {
            if p.paths.is_empty() {
                return Err(Error::invalid(format!(
                    "no path to back up: give one, or set paths under [create] in {}",
                    path.display()
                )));
            }
            a.paths = p.paths;
        }
    }
    Ok(Some(hooks))
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(p.paths.len(), 2);
        assert_eq!(p.options["create"]["exclude-caches"].as_bool(), Some(true));
        assert_eq!(p.options["prune"]["keep-daily"].as_integer(), Some(7));
    }

    #[test]
    fn a_syntax_error_is_one_line_with_its_line_number() {
        let e = parse("[create]\npaths = []\n[create]\n").unwrap_err();
        assert!(e.starts_with("line 3: ") && !e.contains('\n'), "{e}");
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

    /// The README's table of profile keys names every key a profile has: the top-level ones,
    /// `[create] paths`, and every hook key (the destructuring below stops compiling when a
    /// hook key is added).
    #[test]
    fn the_readme_names_every_key() {
        let readme = include_str!("../../README.md");
        let p = parse(
            "[hooks]\nbefore = \"a\"\nafter = \"b\"\nfailure = \"c\"\nfinally = \"d\"\ncommands = [\"create\"]\ntimeout-secs = 5",
        )
        .unwrap();
        let HooksSection {
            before,
            after,
            failure,
            finally,
            commands,
            timeout_secs,
        } = p.hooks;
        assert!(before.is_some() && after.is_some() && failure.is_some() && finally.is_some());
        assert!(commands.is_some() && timeout_secs.is_some());
        let hook_keys = [
            "before",
            "after",
            "failure",
            "finally",
            "commands",
            "timeout-secs",
        ];
        let top = options::TOP_LEVEL.iter().filter(|k| **k != "hooks");
        let create = options::NOT_OPTIONS.iter().map(|(_, k)| k);
        for key in hook_keys.iter().chain(top).chain(create) {
            assert!(readme.contains(&format!("| `{key}` |")), "README: {key}");
        }
        assert!(readme.contains("| any option of COMMAND | `[COMMAND]` |"));
        assert!(readme.contains("| any global option | top level |"));
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
