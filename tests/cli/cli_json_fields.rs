//! `docs/json.md` is the one reference of what cairn says in JSON: every field it lists in a
//! table appears in what the commands it names print (issue 48, item 3). The progress
//! record's fields are checked against the same tables by a unit test beside them
//! (`util::progress`), where every figure can be set at once.

use crate::common;

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::path::Path;
use std::process::Output;

use common::{stderr, stdout, Paused, Repo};
use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_cairn");

/// The fields each section (`## ` heading) of docs/json.md lists: the first cell of each row
/// of a table whose first column is `field` (`a`, `b` in one cell names two).
fn documented() -> BTreeMap<String, BTreeSet<String>> {
    let text =
        fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/json.md")).unwrap();
    let mut out: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let (mut section, mut in_fields) = (String::new(), false);
    for line in text.lines() {
        if let Some(h) = line.strip_prefix("## ") {
            section = h.to_string();
            continue;
        }
        if !line.starts_with('|') {
            in_fields = false;
            continue;
        }
        let first = line.split('|').nth(1).unwrap_or_default().trim();
        if first == "field" {
            in_fields = true;
            continue;
        }
        if !in_fields || first.starts_with("---") {
            continue;
        }
        for name in first.split(',') {
            let name = name.trim().trim_matches('`');
            assert!(!name.is_empty(), "an empty field name: {line}");
            out.entry(section.clone())
                .or_default()
                .insert(name.to_string());
        }
    }
    out
}

/// Every key of every object in `v`, at any depth.
fn keys(v: &Value, into: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                into.insert(k.clone());
                keys(v, into);
            }
        }
        Value::Array(a) => a.iter().for_each(|v| keys(v, into)),
        _ => {}
    }
}

/// What the commands said: the keys of each record type on stderr, and of the JSON results
/// on stdout by section.
#[derive(Default)]
struct Seen {
    records: BTreeMap<String, BTreeSet<String>>,
    results: BTreeMap<&'static str, BTreeSet<String>>,
}

impl Seen {
    /// Takes the `--log-json` records of `o`.
    fn records(&mut self, o: &Output) {
        for line in stderr(o).lines() {
            let v: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let kind = v["type"].as_str().unwrap().to_string();
            keys(&v, self.records.entry(kind).or_default());
        }
    }

    /// Takes the JSON result `o` printed, for `section`.
    fn result(&mut self, section: &'static str, o: &Output) {
        let v: Value = serde_json::from_str(&stdout(o))
            .unwrap_or_else(|e| panic!("{e}: {}\n{}", stdout(o), stderr(o)));
        keys(&v, self.results.entry(section).or_default());
    }
}

const CHANGED: &str = "--json";
const VERIFY: &str = "check";

fn ok(o: &Output, code: i32) -> &Output {
    assert_eq!(o.status.code(), Some(code), "{}{}", stdout(o), stderr(o));
    o
}

#[test]
fn every_field_docs_json_lists_appears() {
    let repo = Repo::new();
    let base = repo.dir.path().to_path_buf();
    let src = base.join("src");
    fs::create_dir_all(src.join("sub")).unwrap();
    fs::write(src.join("f0"), b"zero").unwrap();
    fs::write(src.join("sub/g"), common::random_bytes(1, 100_000)).unwrap();
    let mut seen = Seen::default();
    let run = |args: &[&str]| repo.run_in(&base, args, &[]);

    // A path that is not there: a warning about it, with its kind and errno; each file listed.
    let o = run(&["--log-json", "create", "--list", "a", "src", "gone"]);
    seen.records(ok(&o, 1));
    fs::write(src.join("f1"), b"one").unwrap();
    seen.records(ok(&run(&["--log-json", "create", "b", "src"]), 0));
    let target = base.join("t");
    let t = target.to_str().unwrap();
    let o = run(&["--log-json", "extract", "--verify", "a", "--target", t]);
    seen.records(ok(&o, 0));
    let o = run(&["--log-json", "check", "--json", "--verify-data"]);
    seen.records(ok(&o, 0));
    seen.result(VERIFY, &o);
    seen.records(ok(&run(&["--log-json", "check", "--repair"]), 0));
    seen.records(ok(&run(&["--log-json", "extract", "nosuch"]), 2));

    // A profile's hook.
    let profile = base.join("p.toml");
    fs::write(
        &profile,
        format!(
            "repository = {:?}\npasscommand = \"echo test passphrase\"\n[create]\npaths = [{:?}]\n[hooks]\nafter = \"echo done\"\n",
            repo.path.to_str().unwrap(),
            src.to_str().unwrap()
        ),
    )
    .unwrap();
    let p = profile.to_str().unwrap();
    seen.records(ok(&run(&["--log-json", "--profile", p, "create", "c"]), 0));

    // The commands that change archives, each with --json and --log-json.
    for args in [
        &["rename", "c", "d"][..],
        &["comment", "d", "a note"],
        &["tag", "--add", "x", "d"],
        &["rewrite", "--exclude", "f0", "d"],
        &["prune", "--keep-last", "1", "--glob", "b"],
    ] {
        let mut all = vec!["--log-json", args[0], "--json"];
        all.extend_from_slice(&args[1..]);
        let o = run(&all);
        seen.records(ok(&o, 0));
        seen.result(CHANGED, &o);
    }
    // An archive hidden by the one written in place of it (a comment killed between the
    // two), deleted by its id.
    let before = stdout(ok(&run(&["list", "--json-lines"]), 0));
    let old = before
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|v| v["name"] == "a")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_string();
    let mut killed = Paused::start(
        &repo,
        &base,
        &["comment", "a", "new"],
        &[("CAIRN_FAULT", "name=archives/:delete:pause")],
    )
    .child;
    killed.kill().unwrap();
    let _ = killed.wait();
    let hidden = format!("aid:{}", &old[..8]);
    let o = run(&["--log-json", "delete", "--json", &hidden]);
    seen.records(ok(&o, 0));
    seen.result(CHANGED, &o);
    let o = run(&["--log-json", "compact", "--json", "--threshold", "0"]);
    seen.records(ok(&o, 0));
    seen.result(CHANGED, &o);
    // Through an append-only server, compact frees nothing.
    let ssh = base.join("ssh");
    fs::write(
        &ssh,
        format!(
            "#!/bin/sh\nexec {BIN} serve --restrict-to-path {} --append-only\n",
            base.display()
        ),
    )
    .unwrap();
    fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let url = format!("ssh://backup-host{}", repo.path.display());
    let o = repo.run_in(
        &base,
        &["--log-json", "compact", "--json"],
        &[("CAIRN_REPO", &url), ("CAIRN_RSH", ssh.to_str().unwrap())],
    );
    seen.records(ok(&o, 0));
    seen.result(CHANGED, &o);

    let mut missing = Vec::new();
    for (section, fields) in documented() {
        let observed: BTreeSet<String> = if section == "`progress`" {
            continue; // util::progress's unit test
        } else if section.starts_with("`warning`") {
            ["warning", "error", "note", "log"]
                .iter()
                .flat_map(|t| seen.records.get(*t).cloned().unwrap_or_default())
                .collect()
        } else if let Some(t) = section
            .strip_prefix('`')
            .and_then(|s| s.strip_suffix('`'))
            .filter(|t| !t.contains(' '))
        {
            seen.records.get(t).cloned().unwrap_or_default()
        } else if section.starts_with("`--json`") {
            seen.results.get(CHANGED).cloned().unwrap_or_default()
        } else if section.starts_with("`check --json`") {
            seen.results.get(VERIFY).cloned().unwrap_or_default()
        } else {
            panic!("docs/json.md has a section this test does not know: {section}");
        };
        for f in fields.difference(&observed) {
            missing.push(format!("{section}: {f}"));
        }
    }
    assert!(
        missing.is_empty(),
        "documented, never seen:\n{}",
        missing.join("\n")
    );
}
