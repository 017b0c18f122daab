//! `--log-json`: every line on stderr of a create, an extract and a check is one JSON object
//! of a documented type, with progress at most once a second and a summary last.

use crate::common;

use std::fs;

use common::{random_bytes, stderr, stdout, Repo};
use serde_json::Value;

/// Every stderr line parsed; panics on a line that is not a JSON object with a known type
/// and that type's required fields (docs/json.md).
fn records(o: &std::process::Output) -> Vec<Value> {
    let err = stderr(o);
    let mut out = Vec::new();
    for line in err.lines() {
        let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:?}"));
        let kind = v["type"]
            .as_str()
            .unwrap_or_else(|| panic!("no type: {line}"));
        let need: &[&str] = match kind {
            "progress" => &["elapsed_secs", "message"],
            "warning" | "error" | "note" | "log" => &["message"],
            "hook" => &["hook", "line"],
            "summary" => &["command", "exit_status", "warnings_said"],
            other => panic!("unknown type {other}: {line}"),
        };
        for field in need {
            assert!(!v[field].is_null(), "{kind} without {field}: {line}");
        }
        out.push(v);
    }
    let last = out.last().expect("at least the summary");
    assert_eq!(last["type"], "summary", "the summary comes last: {err}");
    assert_eq!(
        out.iter().filter(|v| v["type"] == "summary").count(),
        1,
        "{err}"
    );
    out
}

fn of_type<'a>(records: &'a [Value], kind: &str) -> Vec<&'a Value> {
    records.iter().filter(|v| v["type"] == kind).collect()
}

#[test]
fn create_extract_and_check_speak_json_lines() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path();
    let src = base.join("src");
    fs::create_dir_all(&src).unwrap();
    for i in 0..6u64 {
        fs::write(src.join(format!("f{i}")), random_bytes(i, 500_000)).unwrap();
    }
    // 0.3 s a store operation, one pack in flight: each command lasts long enough for
    // progress records.
    let slow = [
        ("CAIRN_STORE_LATENCY", "300000"),
        ("CAIRN_PACK_INFLIGHT", "1"),
    ];
    let o = repo.run_in(base, &["--log-json", "create", "a", "src"], &slow);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        stdout(&o).starts_with("Archive a saved"),
        "stdout stays text"
    );
    let r = records(&o);
    let progress = of_type(&r, "progress");
    assert!(!progress.is_empty(), "{}", stderr(&o));
    // At most one a second.
    let times: Vec<f64> = progress
        .iter()
        .map(|p| p["elapsed_secs"].as_f64().unwrap())
        .collect();
    assert!(times.windows(2).all(|w| w[1] - w[0] >= 0.9), "{times:?}");
    assert!(
        progress
            .iter()
            .any(|p| p["bytes_done"].is_u64() && p["files_done"].is_u64()),
        "{}",
        stderr(&o)
    );
    let summary = r.last().unwrap();
    assert_eq!(summary["command"], "create");
    assert_eq!(summary["exit_status"], 0);
    assert_eq!(summary["files"], 6);
    assert_eq!(summary["bytes"], 3_000_000);
    assert_eq!(summary["archive"], "a");
    assert!(summary["archive_id"].as_str().unwrap().len() == 64);

    // An extract with a path that matches nothing: a warning record, exit 1.
    let target = base.join("t");
    let o = repo.run_in(
        base,
        &[
            "extract",
            "--log-json",
            "a",
            "--target",
            target.to_str().unwrap(),
            "src",
            "nothere",
        ],
        &slow,
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = records(&o);
    let warnings = of_type(&r, "warning");
    assert_eq!(warnings.len(), 1, "{}", stderr(&o));
    assert!(warnings[0]["message"].as_str().unwrap().contains("nothere"));
    assert_eq!(
        (&warnings[0]["path"], &warnings[0]["kind"]),
        (&Value::from("nothere"), &Value::from("no-match"))
    );
    assert!(
        of_type(&r, "progress")
            .iter()
            .any(|p| p["bytes_fetched"].is_u64()),
        "{}",
        stderr(&o)
    );
    let summary = r.last().unwrap();
    assert_eq!(summary["command"], "extract");
    assert_eq!(summary["exit_status"], 1);
    assert_eq!(summary["files"], 6);
    assert_eq!(summary["warnings_said"], 1);
    assert!(summary["fetched_bytes"].as_u64().unwrap() >= 3_000_000);

    // check, and a failing command: the error is a record and the summary carries it.
    let o = repo.run_in(base, &["check", "--log-json", "--verify-data"], &slow);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let r = records(&o);
    let summary = r.last().unwrap();
    assert_eq!(
        (summary["errors"].as_u64(), summary["archives"].as_u64()),
        (Some(0), Some(1))
    );
    let o = repo.run_in(base, &["--log-json", "extract", "nosuch"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let r = records(&o);
    assert!(of_type(&r, "error")[0]["message"]
        .as_str()
        .unwrap()
        .contains("no archive named"));
    assert!(r.last().unwrap()["error"]
        .as_str()
        .unwrap()
        .contains("no archive named"));
    // A command line that does not parse: an error record and the summary.
    let o = repo.run_in(base, &["--log-json", "extract", "--no-such-option"], &[]);
    assert_eq!(o.status.code(), Some(2));
    let r = records(&o);
    assert!(of_type(&r, "error")[0]["message"]
        .as_str()
        .unwrap()
        .contains("--no-such-option"));
    // --no-progress leaves the progress records out, not the rest.
    let o = repo.run_in(base, &["--log-json", "check", "--no-progress"], &slow);
    let r = records(&o);
    assert!(
        of_type(&r, "progress").is_empty() && r.len() == 1,
        "{}",
        stderr(&o)
    );
}

/// A repository, and beside it `src/f`.
fn with_a_file() -> Repo {
    let repo = Repo::new();
    fs::create_dir_all(repo.dir.path().join("src")).unwrap();
    fs::write(repo.dir.path().join("src/f"), b"x").unwrap();
    repo
}

/// Runs a command line that does not parse: the error's message, and every record.
fn usage_error(repo: &Repo, args: &[&str]) -> (String, Vec<Value>) {
    let o = repo.run_in(repo.dir.path(), args, &[]);
    assert_eq!(o.status.code(), Some(2));
    let r = records(&o);
    let said = of_type(&r, "error")[0]["message"]
        .as_str()
        .unwrap()
        .to_string();
    (said, r)
}

/// Issue 48, item 3: a command line that does not parse keeps what clap said (the argument
/// missing, the usage) and the command; a warning about a path carries the path, its kind
/// and the errno; the commands that change archives give their result as JSON.
#[test]
fn usage_errors_warnings_and_results_carry_their_details() {
    let repo = with_a_file();
    let base = repo.dir.path();
    let (said, r) = usage_error(&repo, &["--log-json", "rename", "x"]);
    assert!(said.contains("<NEW_NAME>"), "{said}");
    assert!(said.contains("usage: cairn rename"), "{said}");
    assert_eq!(r.last().unwrap()["command"], "rename");

    let o = repo.run_in(base, &["--log-json", "create", "a", "src", "gone"], &[]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let r = records(&o);
    let w = of_type(&r, "warning")[0];
    assert_eq!(
        (&w["path"], &w["kind"], &w["errno"]),
        (
            &Value::from("gone"),
            &Value::from("vanished"),
            &Value::from(2)
        ),
        "{w}"
    );
    for name in ["a", "b"] {
        let o = repo.run_in(base, &["create", name, "src"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let json = |args: &[&str]| -> Value {
        let o = repo.run_in(base, args, &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)))
    };
    // "a" twice (the first create warned), "b" once.
    let v = json(&["prune", "--json", "--keep-last", "1", "--dry-run"]);
    assert_eq!(
        (&v["dry_run"], &v["pruned"], &v["kept"]),
        (&true.into(), &1.into(), &2.into()),
        "{v}"
    );
    let v = json(&["prune", "--json", "--keep-last", "1", "--glob", "a"]);
    let actions: Vec<(&str, &str)> = v["archives"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            (
                a["action"].as_str().unwrap(),
                a["reason"].as_str().unwrap_or(""),
            )
        })
        .collect();
    assert_eq!(actions, [("pruned", ""), ("kept", "last #1")], "{v}");
    let v = json(&["delete", "--json", "--dry-run", "b"]);
    assert_eq!(
        (&v["archives"][0]["action"], &v["archives"][0]["name"]),
        (&"would-delete".into(), &"b".into()),
        "{v}"
    );
    let v = json(&["rename", "--json", "b", "c"]);
    assert_eq!(
        (
            &v["archives"][0]["action"],
            &v["archives"][0]["name"],
            &v["changed"]
        ),
        (&"renamed".into(), &"c".into(), &1.into()),
        "{v}"
    );
    assert!(
        stdout(&repo.run(&["list"])).contains("c "),
        "the rename happened"
    );
    let v = json(&["compact", "--json"]);
    assert!(
        v["packs_after"].is_u64() && v["freed_bytes"].is_i64(),
        "{v}"
    );
}

/// Found by the attack on --log-json and --json: the summary took its command from an
/// option's value (`-r key list` said `key list`); `--log-json key` put the whole help in one
/// record; `prune --json` printed nothing when nothing matched; `tag --json` with a typo in
/// its last archive tagged the first ones and said nothing of it; `create` with a path that
/// is not UTF-8 panicked; `extract --dry-run`'s records had no path or kind.
#[test]
fn the_edges_of_json_results_and_records() {
    use std::os::unix::ffi::OsStrExt;
    let repo = with_a_file();
    let base = repo.dir.path();
    let o = repo.run_in(base, &["--log-json", "-r", "key", "list", "--bogus"], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(records(&o).last().unwrap()["command"], "list");
    let (said, r) = usage_error(&repo, &["--log-json", "key"]);
    // Which commands, in a line (clap says it one way or the other, whether the environment
    // gave any option), never the whole help.
    assert!(
        said.contains("add") && said.contains("remove") && said.len() < 400,
        "{said}"
    );
    assert_eq!(r.last().unwrap()["command"], "key");

    let o = repo.run_in(base, &["create", "a", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let o = repo.run_in(
        base,
        &["prune", "--json", "--keep-last", "1", "--glob", "nomatch*"],
        &[],
    );
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let v: Value =
        serde_json::from_str(&stdout(&o)).unwrap_or_else(|e| panic!("{e}: {}", stdout(&o)));
    assert_eq!(v["pruned"], 0, "{v}");
    assert_eq!(v["archives"], Value::Array(Vec::new()), "{v}");

    let o = repo.run_in(base, &["tag", "--json", "--add", "mid", "a", "nosuch"], &[]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(
        stdout(&repo.run(&["list", "--tag", "mid"])).is_empty(),
        "nothing was tagged"
    );

    // A dry run's warning about an item names it too (here: a directory of another user
    // where the archive's goes).
    if nix::unistd::geteuid().is_root() {
        let target = base.join("t");
        fs::create_dir_all(target.join("src")).unwrap();
        std::os::unix::fs::chown(target.join("src"), Some(65534), Some(65534)).unwrap();
        let t = target.to_str().unwrap();
        let o = repo.run_in(base, &["--log-json", "extract", "-n", "a", "-t", t], &[]);
        assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
        let r = records(&o);
        let w = of_type(&r, "warning")[0];
        assert_eq!(
            (&w["path"], &w["kind"]),
            (&Value::from("src"), &Value::from("skipped")),
            "{w}"
        );
    }

    let mut create = repo.command(base, &["create", "b"], &[]);
    create.arg(std::ffi::OsStr::from_bytes(b"src/\xff"));
    let o = create.output().unwrap();
    assert!(
        matches!(o.status.code(), Some(1) | Some(2)),
        "{}",
        stderr(&o)
    );
}
