//! Shell completions and man pages, generated from the command line's own definitions.

use crate::common;

use common::{cairn, stdout};

#[test]
fn completions_name_every_command_for_every_shell() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let o = cairn(&["completions", shell], &[]);
        assert_eq!(o.status.code(), Some(0), "{shell}");
        let script = stdout(&o);
        for command in ["create", "extract", "compact", "break-lock"] {
            assert!(script.contains(command), "{shell}: no {command}");
        }
    }
    let bash = stdout(&cairn(&["completions", "bash"], &[]));
    assert!(
        bash.contains("--exclude-caches") && bash.contains("_cairn"),
        "{bash}"
    );
    assert_eq!(cairn(&["completions", "tcsh"], &[]).status.code(), Some(2));
}

#[test]
fn man_pages_for_cairn_and_every_command() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("man1");
    let o = cairn(&["man", out.to_str().unwrap()], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stdout(&o).starts_with("Wrote "), "{}", stdout(&o));
    for page in [
        "cairn.1",
        "cairn-create.1",
        "cairn-extract.1",
        "cairn-key-export.1",
    ] {
        let text = std::fs::read_to_string(out.join(page)).unwrap();
        assert!(
            text.starts_with(".ie") || text.contains(".TH"),
            "{page}: {text}"
        );
    }
    let create = std::fs::read_to_string(out.join("cairn-create.1")).unwrap();
    assert!(create.contains("exclude\\-caches"), "{create}");
    // Titled as typed, with the global options (which come before or after the command).
    assert!(create.contains(".TH \"cairn create\""), "{create}");
    assert!(create.contains("cairn create \\-"), "{create}");
    assert!(!create.contains("cairn\\-create"), "{create}");
    for global in ["\\-\\-repo", "\\-\\-lock\\-wait"] {
        assert!(create.contains(global), "{global}: {create}");
    }
    let export = std::fs::read_to_string(out.join("cairn-key-export.1")).unwrap();
    assert!(export.contains(".TH \"cairn key export\""), "{export}");
}
