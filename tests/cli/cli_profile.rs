//! Profiles hold every option of the commands they drive (issue 48, item 6): a `[COMMAND]`
//! section takes any of its long options, a top-level key any global option; what the
//! command line says wins, repeatable options add up, and a key that is no option is an
//! error naming it whichever command runs.

use crate::common;

use std::fs;

use common::{stderr, stdout, Repo};

#[test]
fn a_profile_holds_any_option_and_the_command_line_wins() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(src.join("cache")).unwrap();
    for f in ["keep.txt", "skip.tmp", "cache/big", "other.o"] {
        fs::write(src.join(f), f).unwrap();
    }
    fs::write(base.join("excludes"), "# from a file\n*.tmp\n").unwrap();
    fs::write(
        base.join("list"),
        format!("{}\n", src.join("keep.txt").display()),
    )
    .unwrap();
    let profile = base.join("p.toml");
    fs::write(
        &profile,
        format!(
            "repository = {:?}\npasscommand = \"echo test passphrase\"\nutc = true\n\
             [create]\npaths = [{:?}]\nexclude-from = {:?}\nexclude = [\"cache\"]\n\
             noacls = true\none-file-system = true\ncompression = \"no-such-compressor\"\n\
             tag = [\"nightly\"]\n\
             [prune]\nkeep-last = 1\n\
             [check]\nsubset = \"1/2\"\n",
            repo.path.to_str().unwrap(),
            src.to_str().unwrap(),
            base.join("excludes").to_str().unwrap()
        ),
    )
    .unwrap();

    // The profile's compression is refused; the command line's wins.
    let o = repo.with_profile(&profile, &["create", "a"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("no-such-compressor"), "{}", stderr(&o));
    let o = repo.with_profile(&profile, &["create", "-C", "lz4", "--exclude", "*.o", "a"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let paths = repo.archive_paths("a");
    let has = |s: &str| paths.iter().any(|p| p.ends_with(s));
    assert!(has("keep.txt"), "{paths:?}");
    assert!(!has("skip.tmp"), "exclude-from: {paths:?}");
    assert!(!has("cache/big"), "exclude: {paths:?}");
    assert!(
        !has("other.o"),
        "the command line's exclude adds up: {paths:?}"
    );
    assert!(
        stdout(&repo.run(&["list", "--tag", "nightly"])).contains("a "),
        "tag"
    );
    // files-from in place of paths.
    fs::write(
        &profile,
        fs::read_to_string(&profile).unwrap().replace(
            "tag = [",
            &format!(
                "files-from = {:?}\ntag = [",
                base.join("list").to_str().unwrap()
            ),
        ),
    )
    .unwrap();
    let o = repo.with_profile(&profile, &["create", "-C", "none", "b"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let paths = repo.archive_paths("b");
    assert!(
        paths.iter().all(|p| !p.ends_with("other.o"))
            && paths.iter().any(|p| p.ends_with("keep.txt")),
        "{paths:?}"
    );

    // prune's keep rule from the profile; the command line's wins.
    let o = repo.with_profile(&profile, &["prune", "--dry-run", "--group-by", "host"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1 archives would be pruned, 1 kept"),
        "{}",
        stdout(&o)
    );
    let o = repo.with_profile(
        &profile,
        &[
            "prune",
            "--dry-run",
            "--group-by",
            "host",
            "--keep-last",
            "2",
        ],
    );
    assert!(
        stdout(&o).contains("0 archives would be pruned, 2 kept"),
        "{}",
        stdout(&o)
    );
    // check's slice from the profile.
    let o = repo.with_profile(&profile, &["check"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).contains("part 1 of 2"), "{}", stdout(&o));
    // A global option: times in UTC.
    let o = repo.with_profile(&profile, &["list"]);
    assert!(
        stdout(&o).contains("+00:00") || stdout(&o).contains("UTC"),
        "{}",
        stdout(&o)
    );

    // A key that is no option: named, whichever command runs, and nothing runs.
    fs::write(
        &profile,
        fs::read_to_string(&profile)
            .unwrap()
            .replace("subset =", "subsett ="),
    )
    .unwrap();
    let o = repo.with_profile(&profile, &["list"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("[check] has no option \"subsett\"") && stderr(&o).contains("subset"),
        "{}",
        stderr(&o)
    );
}

/// Found by the attack on profiles: a `[delete] glob`/`yes` turned `delete one` into deleting
/// every archive without asking; `[extract] delete` turned a plain extract into one that
/// deletes what the target holds; a prune filter from the command line added up with the
/// profile's into more archives pruned; a profile's option beat the environment's
/// (`CAIRN_ENCRYPTION`); and a profile's `[check] subset` made `check --repair` fail.
#[test]
fn a_profile_cannot_widen_what_is_removed_and_never_beats_the_command_line() {
    let repo = Repo::new();
    let base = repo.dir.path();
    fs::create_dir_all(base.join("src")).unwrap();
    fs::write(base.join("src/f"), b"x").unwrap();
    for (name, tag) in [
        ("l", "laptop"),
        ("l", "laptop"),
        ("d", "desktop"),
        ("d", "desktop"),
    ] {
        let o = repo.run_in(base, &["create", "--tag", tag, name, "src"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let profile = base.join("p.toml");
    let write = |body: &str| {
        fs::write(
            &profile,
            format!(
                "repository = {:?}\npasscommand = \"echo test passphrase\"\n{body}",
                repo.path.to_str().unwrap()
            ),
        )
        .unwrap()
    };
    let count = || stdout(&repo.run(&["list"])).lines().count();

    write("[delete]\nglob = \"*\"\nyes = true\n");
    let o = repo.with_profile(&profile, &["delete", "l"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("[delete] cannot be in a profile"),
        "{}",
        stderr(&o)
    );
    assert_eq!(count(), 4, "nothing was deleted");

    let target = base.join("live");
    fs::create_dir_all(target.join("src")).unwrap();
    fs::write(target.join("src/precious"), b"mine").unwrap();
    write(&format!(
        "[extract]\ntarget = {:?}\ndelete = true\n",
        target.to_str().unwrap()
    ));
    let o = repo.with_profile(&profile, &["extract", "l"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("[extract] delete cannot be in a profile"),
        "{}",
        stderr(&o)
    );
    assert_eq!(fs::read(target.join("src/precious")).unwrap(), b"mine");

    // Found by the second attack: a profile's target satisfied "--delete needs --target".
    write(&format!(
        "[extract]\ntarget = {:?}\n",
        target.to_str().unwrap()
    ));
    let o = repo.with_profile(&profile, &["extract", "--delete", "l"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert_eq!(fs::read(target.join("src/precious")).unwrap(), b"mine");
    for (body, said) in [
        (
            "[compact]\nremoved-older-than = \"1S\"\n",
            "[compact] removed-older-than cannot be in a profile",
        ),
        (
            "[create]\nstdin-from-command = true\n",
            "[create] stdin-from-command cannot be in a profile",
        ),
        (
            "[extract]\nno-preserve-root = true\n",
            "[extract] no-preserve-root cannot be in a profile",
        ),
        ("[copy]\nfrom-repo = \"/x\"\n", "--from-repo is required"),
    ] {
        write(body);
        let o = repo.with_profile(&profile, &["list"]);
        assert_eq!(o.status.code(), Some(2), "{body}: {}", stderr(&o));
        assert!(stderr(&o).contains(said), "{body}: {}", stderr(&o));
    }

    write("[prune]\nkeep-last = 1\ntag = [\"laptop\"]\n");
    let o = repo.with_profile(&profile, &["prune", "--dry-run", "--tag", "desktop"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).contains("1 archives would be pruned, 1 kept"),
        "the command line's --tag replaces the profile's: {}",
        stdout(&o)
    );

    write("[check]\nsubset = \"10%\"\n");
    let o = repo.with_profile(&profile, &["check", "--repair"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    let other = base.join("other");
    fs::write(&profile, "[init]\nencryption = \"none\"\n").unwrap();
    let o = common::cairn(
        &[
            "--profile",
            profile.to_str().unwrap(),
            "-r",
            other.to_str().unwrap(),
            "init",
        ],
        &[
            ("CAIRN_ENCRYPTION", "repokey"),
            ("CAIRN_PASSPHRASE", "test passphrase"),
            ("XDG_CACHE_HOME", base.join("cache").to_str().unwrap()),
        ],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let config = fs::read_to_string(other.join("config")).unwrap();
    assert!(config.contains("repokey"), "the environment wins: {config}");
}
