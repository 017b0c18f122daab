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
