//! Getting data in: compression codecs (and, as they land, stdin, dry runs, profiles, copy).
//! The real binary on real directories.

use crate::common;

use common::{assert_trees_equal, random_bytes, stderr, Repo};

/// Text that compresses, and noise that does not.
fn mixed_tree(root: &std::path::Path) -> std::path::PathBuf {
    let src = root.join("src");
    std::fs::create_dir_all(src.join("logs")).unwrap();
    // Log lines with varying fields: lz4 halves them, zstd does much better.
    let mut text = String::new();
    let mut x: u64 = 0x9e3779b97f4a7c15;
    let users = ["alice", "bob", "carol", "dave", "erin"];
    while text.len() < 3 << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        text.push_str(&format!(
            "2026-12-03 19:{:02}:{:02} INFO user={} request={} served in {} ms from shard {}\n",
            x % 60,
            (x >> 8) % 60,
            users[(x >> 16) as usize % 5],
            (x >> 20) % 100_000,
            (x >> 40) % 900,
            (x >> 50) % 16
        ));
    }
    std::fs::write(src.join("logs/app.log"), &text).unwrap();
    std::fs::write(src.join("noise.bin"), random_bytes(9, 2 << 20)).unwrap();
    std::fs::write(src.join("small.txt"), b"hello\n").unwrap();
    src
}

fn du(path: &std::path::Path) -> u64 {
    walkdir::WalkDir::new(path)
        .into_iter()
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_file())
        .map(|e| e.metadata().unwrap().len())
        .sum()
}

#[test]
fn every_codec_reads_back_and_zstd_stores_less() {
    let mut sizes = Vec::new();
    for spec in ["lz4", "zstd", "zstd,10", "auto", "none"] {
        let repo = Repo::new();
        let src = mixed_tree(repo.dir.path());
        let before = du(&repo.path.join("packs"));
        let o = repo.run_in(
            repo.dir.path(),
            &["create", "--compression", spec, "snap", "src"],
            &[],
        );
        assert_eq!(o.status.code(), Some(0), "{spec}: {}", stderr(&o));
        sizes.push((spec, du(&repo.path.join("packs")) - before));
        let out = repo.dir.path().join("out");
        repo.ok(&["extract", "snap", "--target", out.to_str().unwrap()]);
        assert_trees_equal(&src, &out.join("src"));
        repo.ok(&["check", "--verify-data"]);
    }
    let size = |s: &str| sizes.iter().find(|(k, _)| *k == s).unwrap().1;
    // The noise (2 MiB, raw in every case) is in every figure; the log makes the difference.
    let noise = 2 << 20;
    let (lz4, zstd) = (size("lz4") - noise, size("zstd") - noise);
    assert!(zstd * 10 < lz4 * 8, "{sizes:?}");
    assert!(size("zstd,10") - noise < lz4 * 8 / 10, "{sizes:?}");
    assert!(size("auto") - noise < lz4 * 8 / 10, "{sizes:?}");
    assert!(size("none") > size("lz4") + (2 << 20), "{sizes:?}");
}

#[test]
fn codecs_mix_in_one_repository_and_bad_specs_are_refused() {
    let repo = Repo::new();
    let src = mixed_tree(repo.dir.path());
    for (name, spec) in [("a", "lz4"), ("b", "zstd,19")] {
        std::fs::write(src.join(format!("{name}.txt")), name.repeat(100_000)).unwrap();
        let o = repo.run_in(repo.dir.path(), &["create", "-C", spec, name, "src"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    for name in ["a", "b"] {
        let out = repo.dir.path().join(format!("out-{name}"));
        repo.ok(&["extract", name, "--target", out.to_str().unwrap()]);
        assert!(out.join(format!("src/{name}.txt")).exists());
    }
    repo.ok(&["check", "--verify-data"]);
    for bad in ["gzip", "zstd,23", "lz4,1"] {
        let o = repo.run_in(repo.dir.path(), &["create", "-C", bad, "c", "src"], &[]);
        assert_eq!(o.status.code(), Some(2), "{bad}");
        assert!(stderr(&o).contains("unknown compression"), "{}", stderr(&o));
    }
    assert_eq!(repo.archive_count(), 2);
}

/// Runs cairn with `input` on its standard input.
fn with_stdin(repo: &Repo, args: &[&str], input: &[u8]) -> std::process::Output {
    use std::io::Write;
    let mut cmd = repo.command(repo.dir.path(), args, &[]);
    cmd.stdin(std::process::Stdio::piped());
    let mut child = cmd.spawn().unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let input = input.to_vec();
    let writer = std::thread::spawn(move || {
        let _ = stdin.write_all(&input);
    });
    let out = child.wait_with_output().unwrap();
    writer.join().unwrap();
    out
}

fn list_json(repo: &Repo, archive: &str) -> Vec<serde_json::Value> {
    repo.ok(&["list", "--json-lines", archive])
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

#[test]
fn standard_input_is_stored_as_one_file() {
    let repo = Repo::new();
    let data = random_bytes(3, 5_000_000);
    let o = with_stdin(
        &repo,
        &["create", "db", "-", "--stdin-name", "backups/db.sql"],
        &data,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let items = list_json(&repo, "db");
    assert_eq!(items.len(), 1, "{items:?}");
    let it = &items[0];
    assert_eq!(it["path"], "backups/db.sql");
    assert_eq!(it["type"], "file");
    assert_eq!(it["mode"], "-rw-------");
    assert_eq!(it["size"], 5_000_000);
    assert_eq!(it["uid"], rustix::process::getuid().as_raw());
    let o = repo.run(&["dump", "db", "backups/db.sql"]);
    assert!(o.stdout == data, "dump gives back what went in");

    // Another mode; the default name.
    let o = with_stdin(&repo, &["create", "x", "-", "--stdin-mode", "640"], b"abc");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let it = &list_json(&repo, "x")[0];
    assert_eq!(
        (it["path"].as_str(), it["mode"].as_str()),
        (Some("stdin"), Some("-rw-r-----"))
    );

    for (args, why) in [
        (&["create", "y", "-", "other"][..], "backed up alone"),
        (
            &["create", "y", "-", "--stdin-mode", "999"],
            "not an octal mode",
        ),
        (
            &["create", "y", "-", "--stdin-name", "/"],
            "is not a file name",
        ),
    ] {
        let o = with_stdin(&repo, args, b"abc");
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains(why), "{args:?}: {}", stderr(&o));
    }
    assert_eq!(repo.archive_count(), 2);
}

#[test]
fn a_command_output_is_stored_and_a_failing_command_saves_nothing() {
    let repo = Repo::new();
    let o = repo.run(&[
        "create",
        "dump",
        "--stdin-name",
        "all.sql",
        "--stdin-from-command",
        "--",
        "sh",
        "-c",
        "printf 'CREATE TABLE t;\\n'; head -c 3000000 /dev/zero",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = repo.run(&["dump", "dump", "all.sql"]).stdout;
    assert_eq!(out.len(), 16 + 3_000_000);
    assert!(out.starts_with(b"CREATE TABLE t;\n"));

    // A command that fails after writing: exit 2, no archive, and the message names it.
    let packs_before = repo.pack_count();
    let o = repo.run(&[
        "create",
        "bad",
        "--stdin-from-command",
        "--",
        "sh",
        "-c",
        "head -c 2000000 /dev/urandom; exit 3",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("sh failed"), "{}", stderr(&o));
    assert!(stderr(&o).contains("nothing was saved"), "{}", stderr(&o));
    assert_eq!(repo.archive_count(), 1);
    assert!(repo.pack_count() >= packs_before);
    let o = repo.run(&[
        "create",
        "bad",
        "--stdin-from-command",
        "--",
        "/nonexistent/cmd",
    ]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("cannot run /nonexistent/cmd"),
        "{}",
        stderr(&o)
    );
    let o = repo.run(&["create", "bad", "--stdin-from-command"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("no path to back up"), "{}", stderr(&o));
    assert_eq!(repo.archive_count(), 1);
}

#[test]
fn files_from_lists_paths_by_line_or_by_nul() {
    let repo = Repo::new();
    let base = repo.dir.path();
    for name in ["a", "b c", "d", "skip"] {
        std::fs::write(base.join(name), name).unwrap();
    }
    std::fs::write(base.join("list.txt"), "a\n\nb c\r\n").unwrap();
    let o = repo.run_in(base, &["create", "l", "--files-from", "list.txt", "d"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut paths: Vec<String> = list_json(&repo, "l")
        .iter()
        .map(|i| i["path"].as_str().unwrap().to_string())
        .collect();
    paths.sort();
    assert_eq!(paths, ["a", "b c", "d"]);

    std::fs::write(base.join("list0"), b"b c\0a\0").unwrap();
    let o = repo.run_in(base, &["create", "z", "--files-from0", "list0"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(list_json(&repo, "z").len(), 2);

    // From standard input.
    let o = with_stdin(&repo, &["create", "s", "--files-from", "-"], b"a\nd\n");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(list_json(&repo, "s").len(), 2);

    std::fs::write(base.join("empty"), "\n\n").unwrap();
    let o = repo.run_in(base, &["create", "e", "--files-from", "empty"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("lists no path"), "{}", stderr(&o));
    let o = repo.run_in(base, &["create", "e", "--files-from", "missing.txt"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing.txt"), "{}", stderr(&o));
}

#[test]
fn keys_can_be_added_listed_and_removed_but_not_the_last_or_the_one_in_use() {
    let repo = Repo::new();
    let src = mixed_tree(repo.dir.path());
    let o = repo.run_in(repo.dir.path(), &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let first_id = |listing: &str, mark: char| -> Option<String> {
        listing
            .lines()
            .skip(1)
            .find(|l| l.starts_with(mark))
            .map(|l| l[2..10].to_string())
    };

    // The only key: listed as the one in use, and not removable.
    let listing = repo.ok(&["key", "list"]);
    let original = first_id(&listing, '*').expect("the key in use is marked");
    assert!(listing.contains('@'), "made by user@host: {listing}");
    let o = repo.run(&["key", "remove", &original]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("only key"), "{}", stderr(&o));

    // A second passphrase opens the same repository.
    let o = repo.run_env(&["key", "add"], &[("CAIRN_NEW_PASSPHRASE", "second one")]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let second = [("CAIRN_PASSPHRASE", "second one")];
    let o = repo.run_env(&["key", "list"], &second);
    let listing = common::stdout(&o);
    assert_eq!(listing.lines().count(), 3, "{listing}");
    let added = first_id(&listing, '*').unwrap();
    assert_ne!(added, original);
    let out = repo.dir.path().join("out");
    let o = repo.run_env(
        &["extract", "snap", "--target", out.to_str().unwrap()],
        &second,
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_trees_equal(&src, &out.join("src"));

    // The key in use cannot remove itself; another one can remove it.
    let o = repo.run_env(&["key", "remove", &added], &second);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("the key your passphrase opened"),
        "{}",
        stderr(&o)
    );
    let o = repo.run_env(&["key", "remove", &original], &second);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The first passphrase no longer opens it; the second does.
    let o = repo.run(&["list"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("wrong passphrase"), "{}", stderr(&o));
    let o = repo.run_env(&["list"], &second);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for (bad, why) in [("zz", "not a key id"), ("0000000000", "no key with id")] {
        let o = repo.run_env(&["key", "remove", bad], &second);
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains(why), "{bad}: {}", stderr(&o));
    }
}

/// Every file under `dir` with its bytes.
fn snapshot(dir: &std::path::Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut v: Vec<_> = walkdir::WalkDir::new(dir)
        .into_iter()
        .map(|e| e.unwrap())
        .map(|e| {
            let bytes = if e.file_type().is_file() {
                std::fs::read(e.path()).unwrap()
            } else {
                Vec::new()
            };
            (e.path().to_path_buf(), bytes)
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_dry_run_reports_what_would_be_stored_and_writes_nothing() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = mixed_tree(base);
    std::fs::write(src.join("skip.tmp"), b"excluded").unwrap();
    // Files younger than 2 s are read again by the next backup whatever their times (their
    // times could still change within the file system's granularity): this backup runs a
    // minute ahead of the files' clock rather than wait for them to age.
    let o = repo.run_in(
        base,
        &["create", "snap", "src"],
        &[("CAIRN_TEST_CLOCK_OFFSET", "60")],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // One file changed, one new; the rest unchanged.
    std::fs::write(src.join("small.txt"), b"hello again\n").unwrap();
    std::fs::write(src.join("new.bin"), random_bytes(11, 300_000)).unwrap();
    let before = snapshot(&repo.path);

    let o = repo.run_in(
        base,
        &[
            "create",
            "--dry-run",
            "--list",
            "--exclude",
            "*.tmp",
            "snap",
            "src",
        ],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = common::stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "d src",
        "d src/logs",
        "U src/logs/app.log",
        "U src/noise.bin",
        "M src/small.txt",
        "A src/new.bin",
    ] {
        assert!(lines.contains(&want), "{want} missing from:\n{out}");
    }
    assert!(!out.contains("skip.tmp"), "{out}");
    let summary = lines.last().unwrap();
    assert!(
        summary.starts_with("Dry run: archive snap would hold 4 files"),
        "{summary}"
    );
    assert!(
        summary.contains("2 files (300.01 kB) would be read"),
        "{summary}"
    );
    assert!(summary.contains("Nothing was written"), "{summary}");
    assert!(snapshot(&repo.path) == before, "the repository changed");
    assert_eq!(repo.archive_count(), 1);

    // --json for scripts: the new data is the new file (noise does not compress).
    let o = repo.run_in(base, &["create", "-n", "--json", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(v["dry_run"], true);
    assert_eq!(v["files_read"], 2);
    assert!(v["new_bytes"].as_u64().unwrap() >= 300_000, "{v}");
    assert!(v["new_stored_bytes"].as_u64().unwrap() >= 300_000, "{v}");
    assert!(snapshot(&repo.path) == before, "the repository changed");
}

/// Issue 48: `create --list` says how each item is taken while the backup runs (borg's
/// `--list --filter AME`), and with --log-json as a `file` record each.
#[test]
fn create_list_says_how_each_file_is_taken() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    std::fs::create_dir_all(src.join("d")).unwrap();
    for (name, data) in [("a", "one"), ("b", "two"), ("d/c", "three")] {
        std::fs::write(src.join(name), data).unwrap();
    }
    // Old enough for the files cache to vouch for them next time.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let o = repo.run_in(base, &["create", "--list", "s", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = crate::common::stdout(&o);
    for line in [
        "d src\n",
        "A src/a\n",
        "A src/b\n",
        "d src/d\n",
        "A src/d/c\n",
    ] {
        assert!(out.contains(line), "{line:?} in {out}");
    }
    std::fs::write(src.join("a"), "changed").unwrap();
    std::fs::write(src.join("n"), "new").unwrap();
    let o = repo.run_in(
        base,
        &["create", "--list", "--filter", "AME", "s", "src"],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = crate::common::stdout(&o);
    let listed: Vec<&str> = text
        .lines()
        .filter(|l| l.len() > 2 && l.as_bytes()[1] == b' ')
        .collect();
    assert_eq!(listed, ["M src/a", "A src/n"], "{text}");
    let o = repo.run_in(base, &["--log-json", "create", "--list", "s", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let records: Vec<serde_json::Value> = stderr(&o)
        .lines()
        .filter_map(|l| serde_json::from_str(l).ok())
        .filter(|v: &serde_json::Value| v["type"] == "file")
        .collect();
    assert!(
        records
            .iter()
            .any(|r| r["status"] == "U" && r["path"] == "src/b"),
        "{records:?}"
    );
    // --filter needs --list.
    let o = repo.run_in(base, &["create", "--filter", "A", "s", "src"], &[]);
    assert_eq!(o.status.code(), Some(2));
}

#[test]
fn a_profile_says_what_a_backup_is_and_the_command_line_wins() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = mixed_tree(base);
    std::fs::write(src.join("skip.tmp"), b"x").unwrap();
    std::fs::create_dir_all(src.join("cache")).unwrap();
    std::fs::write(
        src.join("cache/CACHEDIR.TAG"),
        b"Signature: 8a477f597d28d172789f06886806bc55\n",
    )
    .unwrap();
    std::fs::write(src.join("cache/blob"), b"cached").unwrap();
    let config = base.join("config");
    std::fs::create_dir_all(config.join("cairn")).unwrap();
    std::fs::write(
        config.join("cairn/home.toml"),
        format!(
            "repository = {:?}\npasscommand = \"echo test passphrase\"\n\
             [create]\npaths = [{:?}]\nexclude = [\"*.tmp\"]\nexclude-caches = true\n\
             compression = \"zstd,5\"\n[prune]\nkeep-last = 1\n",
            repo.path.to_str().unwrap(),
            src.to_str().unwrap()
        ),
    )
    .unwrap();
    // No repository, no passphrase, no path on the command line: the profile's.
    let run = |args: &[&str]| {
        common::cairn(
            args,
            &[
                ("XDG_CONFIG_HOME", config.to_str().unwrap()),
                ("XDG_CACHE_HOME", base.join("cache").to_str().unwrap()),
            ],
        )
    };
    let o = run(&["--profile", "home", "create", "home"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["--profile", "home", "list", "--json-lines", "home"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let listed = common::stdout(&o);
    assert!(listed.contains("logs/app.log"), "{listed}");
    assert!(
        !listed.contains("skip.tmp"),
        "excluded by the profile: {listed}"
    );
    assert!(
        listed.contains("CACHEDIR.TAG") && !listed.contains("cache/blob"),
        "{listed}"
    );

    // Paths and excludes given on the command line: those paths, and both sets of patterns.
    let o = run(&[
        "--profile",
        "home",
        "create",
        "home",
        "--exclude",
        "*.bin",
        src.join("logs").to_str().unwrap(),
        src.join("noise.bin").to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = run(&["--profile", "home", "list", "--json-lines", "home"]);
    let listed = common::stdout(&o);
    assert!(
        listed.contains("app.log") && !listed.contains("noise.bin"),
        "{listed}"
    );
    assert!(
        !listed.contains("small.txt"),
        "only the paths given: {listed}"
    );

    // [prune] keep-last = 1: the older "home" goes.
    let o = run(&["--profile", "home", "prune"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(repo.archive_count(), 1);

    // A typo is an error that names the key and the file; so is a missing profile.
    let bad = base.join("bad.toml");
    std::fs::write(&bad, "[create]\nexclude-cache = true\n").unwrap();
    let o = run(&["--profile", bad.to_str().unwrap(), "create", "x"]);
    assert_eq!(o.status.code(), Some(2));
    let e = stderr(&o);
    assert!(e.contains("exclude-cache") && e.contains("bad.toml"), "{e}");
    let o = run(&["--profile", "nosuch", "list"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("nosuch.toml"), "{}", stderr(&o));
}
