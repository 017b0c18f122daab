//! The command line: the arguments ([`args`], clap), the `CAIRN_*` environment read once
//! ([`settings`]), profiles ([`profile`]), passphrases ([`passphrase`]) and the thin command
//! modules ([`commands`]) that call the engines and print their reports, with what they share
//! below them: rendering ([`output`]), output files ([`outfile`]) and path selection
//! ([`select`]). A command never imports another.

pub mod args;
pub mod chosen;
pub mod commands;
pub mod hooks;
pub mod outfile;
pub mod output;
pub mod passphrase;
pub mod profile;
pub mod report;
pub mod select;
pub mod settings;
pub mod summary;

/// A command never imports another (what two share lives below them): checked over the
/// files of `src/cli/commands`, by `commands::NAME` and `super::NAME` paths.
#[cfg(test)]
mod layout {
    use std::path::Path;

    fn commands() -> Vec<(String, String)> {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("src/cli/commands");
        let mut out: Vec<(String, String)> = std::fs::read_dir(&dir)
            .expect("src/cli/commands")
            .map(|e| {
                let p = e.expect("readable").path();
                let name = p
                    .file_stem()
                    .unwrap_or_default()
                    .to_string_lossy()
                    .into_owned();
                (name, std::fs::read_to_string(&p).expect("readable"))
            })
            .collect();
        out.sort();
        out
    }

    /// The commands `text` (the file of command `own`) names, other than itself.
    fn named(own: &str, text: &str, names: &[String]) -> Vec<String> {
        let code: String = text
            .lines()
            .map(|l| l.split("//").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n");
        names
            .iter()
            .filter(|c| *c != own)
            .filter(|c| {
                code.contains(&format!("commands::{c}::"))
                    || code.contains(&format!("super::{c}::"))
                    || code.contains(&format!("commands::{{{c}"))
            })
            .cloned()
            .collect()
    }

    #[test]
    fn commands_never_import_each_other() {
        let all = commands();
        let names: Vec<String> = all.iter().map(|(n, _)| n.clone()).collect();
        let bad: Vec<String> = all
            .iter()
            .flat_map(|(own, text)| {
                named(own, text, &names)
                    .into_iter()
                    .map(move |o| format!("command {own} imports command {o}"))
            })
            .collect();
        assert!(bad.is_empty(), "{bad:?}");
    }

    #[test]
    fn the_check_finds_a_command_importing_another() {
        let names = ["list".to_string(), "find".to_string(), "dump".to_string()];
        assert_eq!(
            named(
                "find",
                "use crate::cli::commands::list::item_line;\n",
                &names
            ),
            ["list"]
        );
        assert_eq!(
            named("dump", "fn f() { super::list::run(); }\n", &names),
            ["list"]
        );
        assert!(named(
            "list",
            "use crate::cli::commands::{Ctx, Status};\n// super::find::x\n",
            &names
        )
        .is_empty());
    }
}
