//! The layer check (`cargo test layers`): the top-level modules of the core in the order of
//! [`LAYERS`], lowest first, each importing only from itself and the layers before it, by
//! `crate::` paths and by `super::` paths that climb to the crate's root. An upward import is a
//! cycle in the making; this fails on the first one, naming the file and the path. (That the
//! core never reaches the command line is the compiler's: it is another crate.)

use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first (as `lib.rs` describes them).
const LAYERS: &[&str] = &[
    "error", "util", "store", "crypto", "chunker", "format", "index", "pack", "repo", "archive",
    "source", "ops", "serve", "fuzzing",
];

/// Most top-level modules the crate may have: each is a layer or a concept a newcomer names.
const MAX_TOP_LEVEL: usize = 14;

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in fs::read_dir(dir).expect("src is readable") {
        let p = e.expect("src is readable").path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The code of a file without its comments (a doc link may point anywhere).
fn code(text: &str) -> String {
    text.lines()
        .map(|l| match l.find("//") {
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The paths below the crate's root a file names: `crate::a::b` gives `["a", "b"]`, each entry
/// of a `use crate::{a::b, c}` group gives its own, and `super::` chains are resolved from
/// `module` (the file's module path): in `util/id.rs`, `super::super::ops::x` is `["ops",
/// "x"]`.
fn crate_paths(code: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest
        .find("crate::")
        .map(|i| (i, "crate::"))
        .into_iter()
        .chain(rest.find("super::").map(|i| (i, "super::")))
        .min_by_key(|(i, _)| *i)
        .map(|(i, _)| i)
    {
        let before = rest[..i].chars().next_back();
        let here = &rest[i..];
        let (base, after) = if let Some(a) = here.strip_prefix("crate::") {
            (Vec::new(), a)
        } else {
            let mut climbs = 0;
            let mut a = here;
            while let Some(r) = a.strip_prefix("super::") {
                climbs += 1;
                a = r;
            }
            let keep = module.len().saturating_sub(climbs);
            (module[..keep].to_vec(), a)
        };
        rest = after;
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        let with_base = |tail: Vec<String>| [base.clone(), tail].concat();
        if let Some(group) = after.strip_prefix('{') {
            let end = closing(group);
            for entry in split_top(&group[..end]) {
                out.push(with_base(segments(entry)));
            }
        } else {
            out.push(with_base(segments(after)));
        }
    }
    out
}

/// The index of the `}` that closes a group whose `{` came just before `s`.
fn closing(s: &str) -> usize {
    let mut depth = 0;
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' if depth == 0 => return i,
            '}' => depth -= 1,
            _ => {}
        }
    }
    s.len()
}

fn split_top(s: &str) -> Vec<&str> {
    let (mut out, mut depth, mut start) = (Vec::new(), 0, 0);
    for (i, c) in s.char_indices() {
        match c {
            '{' => depth += 1,
            '}' => depth -= 1,
            ',' if depth == 0 => {
                out.push(&s[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    out.push(&s[start..]);
    out
}

fn segments(path: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut rest = path.trim_start();
    loop {
        let end = rest
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(rest.len());
        if end == 0 {
            break;
        }
        out.push(rest[..end].to_string());
        match rest[end..].strip_prefix("::") {
            Some(r) => rest = r,
            None => break,
        }
    }
    out
}

/// The module path of a file under `src/`: `cli/commands/list.rs` → `["cli", "commands",
/// "list"]`.
fn module_of(root: &Path, file: &Path) -> Vec<String> {
    let rel = file.strip_prefix(root).expect("under src");
    let mut m: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().trim_end_matches(".rs").to_string())
        .collect();
    if m.last().is_some_and(|l| l == "mod") {
        m.pop();
    }
    m
}

fn layer(name: &str) -> Option<usize> {
    LAYERS.iter().position(|l| *l == name)
}

/// Every violation in the tree under `root` (a `src/`), as "file: what".
fn violations(root: &Path) -> Vec<String> {
    let mut files = Vec::new();
    rust_files(root, &mut files);
    files.sort();
    let mut bad = Vec::new();
    for file in &files {
        let module = module_of(root, file);
        let top = &module[0];
        if top == "lib" || top == "layers" {
            continue;
        }
        let shown = file.strip_prefix(root).expect("under src").display();
        let Some(own) = layer(top) else {
            bad.push(format!("{shown}: module {top} is in no layer"));
            continue;
        };
        let text = fs::read_to_string(file).expect("readable");
        for path in crate_paths(&code(&text), &module) {
            let Some(first) = path.first() else { continue };
            if let Some(l) = layer(first) {
                if l > own {
                    bad.push(format!(
                        "{shown}: {top} (layer {own}) imports crate::{} from layer {l} above it",
                        path.join("::")
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn layers_import_only_downwards() {
    let bad = violations(&src());
    assert!(bad.is_empty(), "layer violations:\n{}", bad.join("\n"));
}

#[test]
fn the_crate_has_few_top_level_modules_each_in_a_layer() {
    let lib = fs::read_to_string(src().join("lib.rs")).expect("lib.rs");
    let top: Vec<&str> = lib
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub mod "))
        .map(|l| l.trim_end_matches(';'))
        .collect();
    assert!(
        top.len() <= MAX_TOP_LEVEL,
        "{} top-level modules: {top:?}",
        top.len()
    );
    for m in &top {
        assert!(layer(m).is_some(), "module {m} is in no layer of LAYERS");
    }
}

#[test]
fn the_check_finds_upward_imports_by_crate_and_by_super_paths() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    let plant = |rel: &str, text: &str| {
        let p = root.join(rel);
        fs::create_dir_all(p.parent().unwrap()).unwrap();
        fs::write(p, text).unwrap();
    };
    plant(
        "util/wire.rs",
        "use crate::error::Result;\n/// [`crate::ops`]\n",
    );
    plant(
        "util/id.rs",
        "use crate::{error::Error, ops::{create, extract}};\n",
    );
    plant("util/clock.rs", "use super::super::repo::Repository;\n");
    plant("store/local.rs", "use super::wrapper::Wrapper;\n");
    plant("thing.rs", "\n");
    let bad = violations(root);
    let said = |what: &str| bad.iter().filter(|b| b.contains(what)).count();
    assert_eq!(
        said("util/id.rs: util (layer 1) imports crate::ops from layer 11"),
        1,
        "{bad:?}"
    );
    assert_eq!(
        said("util/clock.rs: util (layer 1) imports crate::repo::Repository from layer 8"),
        1,
        "{bad:?}"
    );
    assert_eq!(said("module thing is in no layer"), 1, "{bad:?}");
    assert_eq!(
        bad.len(),
        3,
        "a doc link and a module's own parent are allowed: {bad:?}"
    );
}
