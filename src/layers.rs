//! The layer check (`cargo test layers`): the top-level modules in the order of
//! [`LAYERS`], lowest first, each importing only from itself and the layers before it, and
//! commands that never import one another. An upward import is a cycle in the making; this
//! fails on the first one, naming the file and the path.

use std::fs;
use std::path::{Path, PathBuf};

/// The top-level modules, lowest first (as `lib.rs` describes them).
const LAYERS: &[&str] = &[
    "error", "util", "store", "crypto", "chunker", "format", "index", "pack", "repo", "archive",
    "source", "ops", "cli", "fuzzing",
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

/// The paths below `crate::` a file names: `crate::a::b` gives `["a", "b"]`, and each entry
/// of a `use crate::{a::b, c}` group gives its own.
fn crate_paths(code: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut rest = code;
    while let Some(i) = rest.find("crate::") {
        let before = rest[..i].chars().next_back();
        rest = &rest[i + "crate::".len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == '$' || c == ':') {
            continue;
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = closing(group);
            for entry in split_top(&group[..end]) {
                out.push(segments(entry));
            }
        } else {
            out.push(segments(rest));
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
    let commands: Vec<String> = fs::read_dir(root.join("cli/commands"))
        .expect("src/cli/commands")
        .map(|e| {
            let name = e.expect("readable").file_name();
            name.to_string_lossy().trim_end_matches(".rs").to_string()
        })
        .collect();
    let mut bad = Vec::new();
    for file in &files {
        let module = module_of(root, file);
        let top = &module[0];
        if top == "lib" || top == "main" || top == "layers" {
            continue;
        }
        let shown = file.strip_prefix(root).expect("under src").display();
        let Some(own) = layer(top) else {
            bad.push(format!("{shown}: module {top} is in no layer"));
            continue;
        };
        let text = fs::read_to_string(file).expect("readable");
        for path in crate_paths(&code(&text)) {
            let Some(first) = path.first() else { continue };
            if let Some(l) = layer(first) {
                if l > own {
                    bad.push(format!(
                        "{shown}: {top} (layer {own}) imports crate::{} from layer {l} above it",
                        path.join("::")
                    ));
                }
            }
            let is_command = module.len() >= 3 && module[..2] == ["cli", "commands"];
            if is_command && path.len() >= 3 && path[..2] == ["cli", "commands"] {
                let other = &path[2];
                if *other != module[2] && commands.contains(other) {
                    bad.push(format!(
                        "{shown}: command {} imports command {other}",
                        module[2]
                    ));
                }
            }
        }
        if module.len() >= 3 && module[..2] == ["cli", "commands"] {
            for c in &commands {
                if *c != module[2] && code(&text).contains(&format!("super::{c}::")) {
                    bad.push(format!(
                        "{shown}: command {} imports command {c}",
                        module[2]
                    ));
                }
            }
        }
    }
    bad
}

#[test]
fn layers_import_only_downwards_and_commands_not_each_other() {
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
fn the_check_finds_an_upward_import_and_a_command_importing_another() {
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
    plant(
        "repo/open.rs",
        "fn f() { crate::cli::args::Cli::parse(); }\n",
    );
    plant(
        "cli/commands/list.rs",
        "use crate::cli::commands::{Ctx, Status};\n",
    );
    plant(
        "cli/commands/find.rs",
        "use crate::cli::commands::list::item_line;\n",
    );
    plant("cli/commands/dump.rs", "fn f() { super::list::run(); }\n");
    plant("thing.rs", "\n");
    let bad = violations(root);
    let said = |what: &str| bad.iter().filter(|b| b.contains(what)).count();
    assert_eq!(
        said("util/id.rs: util (layer 1) imports crate::ops from layer 11"),
        1,
        "{bad:?}"
    );
    assert_eq!(
        said("repo/open.rs: repo (layer 8) imports crate::cli::args"),
        1,
        "{bad:?}"
    );
    assert_eq!(said("command find imports command list"), 1, "{bad:?}");
    assert_eq!(said("command dump imports command list"), 1, "{bad:?}");
    assert_eq!(said("module thing is in no layer"), 1, "{bad:?}");
    assert_eq!(
        bad.len(),
        5,
        "a doc link and a command's own parent are allowed: {bad:?}"
    );
}
