//! `cairn init` and `cairn info` through the real binary.

use crate::common;

use common::{cairn, stderr, stdout};

const PW: (&str, &str) = ("CAIRN_PASSPHRASE", "correct horse");

#[test]
fn init_then_info() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let r = repo.to_str().unwrap();
    let o = cairn(&["-r", r, "init"], &[PW]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("Initialized"));
    assert!(repo.join("config").is_file());
    assert_eq!(std::fs::read_dir(repo.join("keys")).unwrap().count(), 1);
    // The config is plaintext JSON without secrets.
    let config = std::fs::read_to_string(repo.join("config")).unwrap();
    let encryption = common::default_encryption();
    assert!(config.contains(&format!("\"encryption\": \"{encryption}\"")));

    let o = cairn(&["info"], &[PW, ("CAIRN_REPO", r)]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    for field in [
        "Repository ID",
        "Format version:  3",
        "Padding:         buckets",
        &format!("Encryption:      {encryption}"),
        "Packs:           0",
        "Chunks:          0",
    ] {
        assert!(out.contains(field), "missing {field:?} in\n{out}");
    }
    let o = cairn(&["-r", r, "info", "--json"], &[PW]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["packs"], 0);
}

#[test]
fn init_says_which_cipher_suite_it_picks_and_takes_either_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let chosen = cairn::crypto::Suite::fastest_here();
    let repo = dir.path().join("default");
    let o = cairn(&["-r", repo.to_str().unwrap(), "init"], &[PW]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.contains(&format!("Cipher suite {}: this CPU ", chosen.as_str())),
        "{out}"
    );
    let config = std::fs::read_to_string(repo.join("config")).unwrap();
    assert!(
        config.contains(&format!("\"repokey-{}\"", chosen.as_str())),
        "{config}"
    );
    for suite in cairn::crypto::Suite::ALL {
        let name = format!("repokey-{}", suite.as_str());
        let repo = dir.path().join(&name);
        let r = repo.to_str().unwrap();
        let o = cairn(&["-r", r, "init", "--encryption", &name], &[PW]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        // Named explicitly: nothing to explain.
        assert!(!stdout(&o).contains("Cipher suite"), "{}", stdout(&o));
        let o = cairn(&["-r", r, "info"], &[PW]);
        assert!(
            stdout(&o).contains(&format!("Encryption:      {name}")),
            "{}",
            stdout(&o)
        );
    }
    let bad = dir.path().join("bad");
    let o = cairn(
        &["-r", bad.to_str().unwrap(), "init", "-e", "repokey-rot13"],
        &[PW],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("repokey-chacha20poly1305-blake3"),
        "{}",
        stderr(&o)
    );
    assert!(!bad.exists());
}

#[test]
fn wrong_passphrase_is_a_clear_error_with_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("repo");
    let r = r.to_str().unwrap();
    assert_eq!(cairn(&["-r", r, "init"], &[PW]).status.code(), Some(0));
    let o = cairn(&["-r", r, "info"], &[("CAIRN_PASSPHRASE", "wrong")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("wrong passphrase"), "{}", stderr(&o));
    assert!(!stderr(&o).contains("panicked"));
}

#[test]
fn passcommand_supplies_the_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("repo");
    let r = r.to_str().unwrap();
    assert_eq!(
        cairn(&["-r", r, "init"], &[("CAIRN_PASSCOMMAND", "echo s3cret")])
            .status
            .code(),
        Some(0)
    );
    assert_eq!(
        cairn(&["-r", r, "info"], &[("CAIRN_PASSPHRASE", "s3cret")])
            .status
            .code(),
        Some(0)
    );
    let o = cairn(&["-r", r, "info"], &[("CAIRN_PASSCOMMAND", "exit 3")]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("CAIRN_PASSCOMMAND"));
}

#[test]
fn init_refuses_a_non_empty_directory() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("precious.txt"), b"data").unwrap();
    let o = cairn(&["-r", dir.path().to_str().unwrap(), "init"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not empty"), "{}", stderr(&o));
    assert_eq!(
        std::fs::read(dir.path().join("precious.txt")).unwrap(),
        b"data"
    );
    // An existing repository is not empty either.
    let r = dir.path().join("repo");
    init(&r);
    assert_eq!(
        cairn(&["-r", r.to_str().unwrap(), "init"], &[PW])
            .status
            .code(),
        Some(2)
    );
}

#[test]
fn no_passphrase_without_a_terminal_is_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("repo");
    let o = cairn(&["-r", r.to_str().unwrap(), "init"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("CAIRN_PASSPHRASE"), "{}", stderr(&o));
}

#[test]
fn unencrypted_repository_needs_no_passphrase() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("repo");
    let r = r.to_str().unwrap();
    let o = cairn(&["-r", r, "init", "--encryption", "none"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("NOT encrypted"));
    assert!(!std::path::Path::new(r).join("keys").exists());
    let o = cairn(&["-r", r, "info"], &[]);
    assert!(stdout(&o).contains("Encryption:      none"));
}

#[test]
fn bad_locations_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let o = cairn(&["-r", dir.path().to_str().unwrap(), "info"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("not a cairn repository"),
        "{}",
        stderr(&o)
    );
    // A path that does not exist is said to be missing, not "a directory without a config".
    let missing = dir.path().join("no/such/repo");
    let o = cairn(&["-r", missing.to_str().unwrap(), "list"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the repository does not exist") && stderr(&o).contains("cairn init"),
        "{}",
        stderr(&o)
    );
    assert!(!missing.exists(), "opening made the path");
    let o = cairn(&["-r", "gopher://x/y", "info"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("unsupported repository URL"));
    let o = cairn(&["info"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("CAIRN_REPO"));
}

#[test]
fn damaged_config_or_key_is_an_error_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let r = repo.to_str().unwrap();
    assert_eq!(cairn(&["-r", r, "init"], &[PW]).status.code(), Some(0));
    let key = std::fs::read_dir(repo.join("keys"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let orig = std::fs::read(&key).unwrap();
    std::fs::write(&key, &orig[..orig.len() / 2]).unwrap();
    let o = cairn(&["-r", r, "info"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
    std::fs::write(&key, &orig).unwrap();
    std::fs::write(repo.join("config"), b"{").unwrap();
    let o = cairn(&["-r", r, "info"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("config"), "{}", stderr(&o));
}

#[test]
fn a_config_switched_to_unencrypted_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let r = repo.to_str().unwrap();
    let cache = dir.path().join("cache");
    let env = [PW, ("XDG_CACHE_HOME", cache.to_str().unwrap())];
    assert_eq!(cairn(&["-r", r, "init"], &env).status.code(), Some(0));
    let config = std::fs::read_to_string(repo.join("config")).unwrap();
    std::fs::write(
        repo.join("config"),
        config.replace(&common::default_encryption(), "none"),
    )
    .unwrap();
    let o = cairn(&["-r", r, "info"], &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("tampered"), "{}", stderr(&o));
}

#[test]
fn a_config_changed_since_last_use_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    let r = repo.to_str().unwrap();
    let cache = dir.path().join("cache");
    let env = [("XDG_CACHE_HOME", cache.to_str().unwrap())];
    assert_eq!(
        cairn(&["-r", r, "init", "--encryption", "none"], &env)
            .status
            .code(),
        Some(0)
    );
    assert_eq!(cairn(&["-r", r, "info"], &env).status.code(), Some(0));
    let config = std::fs::read_to_string(repo.join("config")).unwrap();
    std::fs::write(
        repo.join("config"),
        config.replace("\"avg_size\": 1048576", "\"avg_size\": 2097152"),
    )
    .unwrap();
    let o = cairn(&["-r", r, "info"], &env);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("changed since this machine last used it"),
        "{}",
        stderr(&o)
    );
}

/// A Borg repository's top (its README and INI config) and a restic repository's (an
/// encrypted config and its directories), made by hand.
fn other_tools_repositories(base: &std::path::Path) -> [(std::path::PathBuf, &'static str); 2] {
    let borg = base.join("borg");
    std::fs::create_dir_all(borg.join("data")).unwrap();
    std::fs::write(
        borg.join("README"),
        "This is a Borg Backup repository.\nSee https://borgbackup.readthedocs.io/\n",
    )
    .unwrap();
    std::fs::write(borg.join("config"), "[repository]\nversion = 1\n").unwrap();
    let restic = base.join("restic");
    for d in ["data", "index", "keys", "snapshots", "locks"] {
        std::fs::create_dir_all(restic.join(d)).unwrap();
    }
    std::fs::write(restic.join("config"), common::random_bytes(7, 155)).unwrap();
    [(borg, "a Borg repository"), (restic, "a restic repository")]
}

/// Found in a first week's trial: `-r` at a borg or restic repository said "corrupt config",
/// and `init` on a cairn repository said only that the directory is not empty.
#[test]
fn other_repositories_are_named_for_what_they_are() {
    let dir = tempfile::tempdir().unwrap();
    for (path, what) in other_tools_repositories(dir.path()) {
        let p = path.to_str().unwrap();
        let o = cairn(&["-r", p, "list"], &[PW]);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains(&format!("is {what}, not a cairn repository")),
            "{}",
            stderr(&o)
        );
        let o = cairn(&["-r", p, "init"], &[PW]);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(&format!("is {what}")), "{}", stderr(&o));
    }
    let r = dir.path().join("repo");
    let r = r.to_str().unwrap();
    assert_eq!(cairn(&["-r", r, "init"], &[PW]).status.code(), Some(0));
    let o = cairn(&["-r", r, "init"], &[PW]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("is already a cairn repository"),
        "{}",
        stderr(&o)
    );
}

/// Found in a first week's trial: a user who may not read root's repository got "config:
/// Permission denied (os error 13)", and with the config readable, "keys: Permission denied".
/// Now the path and whose repository it is are named, whichever part may not be read.
#[test]
fn another_users_repository_is_named_with_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    if !nix::unistd::geteuid().is_root() {
        return; // needs a second user
    }
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
    let r = dir.path().join("repo");
    init(&r);
    // The repository's directory, its config, its keys/: each, in turn, the first thing
    // this user may not read (the key file inside last).
    let keys = r.join("keys");
    let set = |p: &std::path::Path, m: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap()
    };
    for (mode, config, keys_mode, named) in [
        (0o700, 0o600, 0o700, "repo"),
        (0o755, 0o600, 0o700, "repo/config"),
        (0o755, 0o644, 0o700, "repo/keys"),
        (0o755, 0o644, 0o755, "repo/keys/"),
    ] {
        set(&r, mode);
        set(&r.join("config"), config);
        set(&keys, keys_mode);
        let o = std::process::Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_cairn"))
            .args(["-r", r.to_str().unwrap(), "list"])
            .env("HOME", dir.path())
            .env("XDG_CACHE_HOME", dir.path().join("nobody-cache"))
            .env("CAIRN_PASSPHRASE", PW.1)
            .env("CAIRN_TEST_CHEAP_KDF", "1")
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        // "…/repo/keys/<id>: permission denied: …" for the key file.
        let said = stderr(&o);
        let at = said
            .find(": permission denied: the repository belongs to root (uid 0)")
            .unwrap_or_else(|| panic!("{named}: {said}"));
        let path = said[..at].rsplit(' ').next().unwrap();
        assert!(
            path.ends_with(named) || (named.ends_with('/') && path.contains(named)),
            "{named}: {}",
            stderr(&o)
        );
    }
}

/// Found in a first week's trial: every command's `--help` mixed the global options into its
/// own. Now the command's come first, the global ones under their own heading.
#[test]
fn help_lists_the_commands_own_options_before_the_global_ones() {
    for command in ["check", "create", "extract", "prune"] {
        let o = cairn(&[command, "--help"], &[]);
        assert_eq!(o.status.code(), Some(0));
        let help = stdout(&o);
        let global = help
            .find("\nGlobal options:\n")
            .unwrap_or_else(|| panic!("{help}"));
        let repo = help.find("--repo <REPO>").unwrap();
        let own = help.find("-h, --help").unwrap();
        assert!(own < global && global < repo, "{command}: {help}");
    }
}

/// Found in a first week's trial: `cairn man DIR` wrote a page for clap's `help` command and
/// one for each command below it, with nothing in them.
#[test]
fn man_writes_a_page_per_command_and_none_for_help() {
    let dir = tempfile::tempdir().unwrap();
    let o = cairn(&["man", dir.path().to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let pages: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        pages
            .iter()
            .all(|p| !p.starts_with("cairn-help") && !p.ends_with("-help.1")),
        "{pages:?}"
    );
    for (page, option) in [
        ("cairn-check.1", "verify\\-data"),
        ("cairn-key-export.1", "OPTIONS"),
    ] {
        let text = std::fs::read_to_string(dir.path().join(page)).unwrap();
        assert!(text.contains(option), "{page}: {text}");
    }
}

/// Issue 48: `cairn --version` names the commit it was built from.
#[test]
fn version_names_the_commit() {
    let o = cairn(&["--version"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let v = stdout(&o);
    assert!(
        v.starts_with(&format!("cairn {} (", env!("CARGO_PKG_VERSION"))),
        "{v}"
    );
    let commit = std::process::Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match commit {
        Ok(c) if c.status.success() => {
            let c = String::from_utf8_lossy(&c.stdout).trim().to_string();
            assert!(v.contains(&format!("(commit {c}")), "{v} at {c}");
        }
        _ => assert!(v.contains("(unknown commit)"), "{v}"),
    }
}

/// Found by the attack on issue 48's messages: a FIFO where a repository's config goes made
/// every command wait for a writer forever. Now it is an error naming the object.
#[test]
fn a_fifo_where_an_object_goes_is_an_error_not_a_hang() {
    let dir = tempfile::tempdir().unwrap();
    let r = dir.path().join("repo");
    init(&r);
    std::fs::remove_file(r.join("config")).unwrap();
    nix::unistd::mkfifo(
        &r.join("config"),
        nix::sys::stat::Mode::from_bits_truncate(0o600),
    )
    .unwrap();
    let mut child = common::cairn_command(&["-r", r.to_str().unwrap(), "list"], &[PW])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if start.elapsed() > std::time::Duration::from_secs(60) {
            let _ = child.kill();
            panic!("list hung on a FIFO where the config goes");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(2), "{err}");
    assert!(err.contains("not a regular file"), "{err}");
}

/// Makes a repository at `r` with the tests' passphrase.
fn init(r: &std::path::Path) {
    let o = cairn(&["-r", r.to_str().unwrap(), "init"], &[PW]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
}
