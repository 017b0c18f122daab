//! A profile's options as command-line arguments: a top-level key is a global option
//! (`lock-wait = 60` is `--lock-wait=60`), a `[COMMAND]` section holds that command's options
//! (`[create] one-file-system = true` is `create --one-file-system`). They are put where the
//! command line's own come after them, and parsed with each option overriding itself: what
//! the command line says wins, and options given many times (`exclude`) add up.

use std::ffi::OsString;

use clap::{Arg, Command, CommandFactory};

use crate::cli::args::Cli;
use crate::error::{Error, Result};

/// Keys a section holds that are not options: `[create] paths`, the paths backed up when the
/// command line gives none.
pub const NOT_OPTIONS: [(&str, &str); 1] = [("create", "paths")];

/// Top-level keys that are not options.
pub const TOP_LEVEL: [&str; 3] = ["repository", "passcommand", "hooks"];

/// Options a profile cannot set: where the profile is, and what only prints.
const NEVER: [&str; 4] = ["profile", "repo", "help", "version"];

/// The long option `name` of `cmd`, if a profile may set it.
fn option<'a>(cmd: &'a Command, name: &str) -> Option<&'a Arg> {
    if NEVER.contains(&name) {
        return None;
    }
    cmd.get_arguments()
        .find(|a| a.get_long() == Some(name) && !a.is_positional())
}

fn takes_value(a: &Arg) -> bool {
    a.get_action().takes_values()
}

/// Checks every key of `table` (the profile without its top-level keys that are not
/// options): a global option, or a section of a command whose keys are its options. The
/// error names the key and what was meant.
pub fn check(table: &toml::Table) -> std::result::Result<(), String> {
    let root = Cli::command();
    for (key, value) in table {
        match value {
            toml::Value::Table(section) => {
                let Some(cmd) = root
                    .get_subcommands()
                    .find(|c| c.get_name() == key && !c.has_subcommands())
                else {
                    let names = root
                        .get_subcommands()
                        .filter(|c| !c.has_subcommands())
                        .map(|c| c.get_name());
                    return Err(format!(
                        "[{key}] is not a command{}",
                        crate::util::text::did_you_mean(key, names)
                    ));
                };
                for (k, v) in section {
                    if NOT_OPTIONS.contains(&(key.as_str(), k.as_str())) {
                        continue;
                    }
                    let Some(arg) = option(cmd, k) else {
                        let names = cmd
                            .get_arguments()
                            .filter_map(Arg::get_long)
                            .filter(|n| !NEVER.contains(n));
                        return Err(format!(
                            "[{key}] has no option {k:?}{}",
                            crate::util::text::did_you_mean(k, names)
                        ));
                    };
                    args_of(k, v, arg).map_err(|e| format!("[{key}] {e}"))?;
                }
            }
            _ => {
                let Some(arg) = option(&root, key).filter(|a| a.is_global_set()) else {
                    let names = root
                        .get_arguments()
                        .filter(|a| a.is_global_set())
                        .filter_map(Arg::get_long)
                        .filter(|n| !NEVER.contains(n))
                        .chain(TOP_LEVEL);
                    return Err(format!(
                        "{key:?} is not a global option{}",
                        crate::util::text::did_you_mean(key, names)
                    ));
                };
                args_of(key, value, arg)?;
            }
        }
    }
    Ok(())
}

/// The arguments one key stands for: `--key=value`, once per value of an array; a flag
/// `--key` when true, nothing when false.
fn args_of(
    key: &str,
    value: &toml::Value,
    arg: &Arg,
) -> std::result::Result<Vec<OsString>, String> {
    let one = |v: &toml::Value| -> std::result::Result<OsString, String> {
        let text = match v {
            toml::Value::String(s) => s.clone(),
            toml::Value::Integer(n) => n.to_string(),
            toml::Value::Float(f) => f.to_string(),
            toml::Value::Boolean(b) => b.to_string(),
            _ => {
                return Err(format!(
                    "{key:?} takes a string, a number or a list of them"
                ))
            }
        };
        Ok(format!("--{key}={text}").into())
    };
    if !takes_value(arg) {
        return match value {
            toml::Value::Boolean(true) => Ok(vec![format!("--{key}").into()]),
            toml::Value::Boolean(false) => Ok(Vec::new()),
            _ => Err(format!("{key:?} is true or false")),
        };
    }
    match value {
        toml::Value::Array(values) => values.iter().map(one).collect(),
        v => Ok(vec![one(v)?]),
    }
}

/// The command line `argv` with the profile's options spliced in: the global ones first, the
/// command's right after its name, so that the command line's own come later and win.
/// `None` when the profile sets nothing for this command line.
pub fn spliced(table: &toml::Table, argv: Vec<OsString>) -> Result<Option<Vec<OsString>>> {
    let root = Cli::command();
    let Some(at) = command_at(&root, &argv) else {
        return Ok(None);
    };
    let name = argv[at].to_string_lossy().into_owned();
    let cmd = root
        .get_subcommands()
        .find(|c| c.get_name() == name || c.get_all_aliases().any(|a| a == name));
    let (mut global, mut own) = (Vec::new(), Vec::new());
    for (key, value) in table {
        match (value, cmd) {
            (toml::Value::Table(section), Some(cmd)) if cmd.get_name() == key => {
                for (k, v) in section {
                    if let Some(arg) = option(cmd, k) {
                        own.extend(args_of(k, v, arg).map_err(Error::invalid)?);
                    }
                }
            }
            (toml::Value::Table(_), _) => {}
            (v, _) => {
                if let Some(arg) = option(&root, key) {
                    global.extend(args_of(key, v, arg).map_err(Error::invalid)?);
                }
            }
        }
    }
    if global.is_empty() && own.is_empty() {
        return Ok(None);
    }
    let mut out = Vec::with_capacity(argv.len() + global.len() + own.len());
    out.push(argv[0].clone());
    out.extend(global);
    out.extend_from_slice(&argv[1..=at]);
    out.extend(own);
    out.extend_from_slice(&argv[at + 1..]);
    Ok(Some(out))
}

/// Where the command's name is in `argv`: the first word that is not a global option or its
/// value.
fn command_at(root: &Command, argv: &[OsString]) -> Option<usize> {
    let mut i = 1;
    while i < argv.len() {
        // A word that is not UTF-8 is no option: a value, or the command.
        let word = argv[i].to_string_lossy();
        let word = word.as_ref();
        if word == "--" {
            return None;
        }
        if let Some(long) = word.strip_prefix("--") {
            let takes = !long.contains('=')
                && root
                    .get_arguments()
                    .any(|a| a.get_long() == Some(long) && takes_value(a));
            i += if takes { 2 } else { 1 };
            continue;
        }
        if let Some(shorts) = word.strip_prefix('-').filter(|s| !s.is_empty()) {
            // A cluster: the first short option that takes a value takes the rest, or the
            // next word.
            let mut next = 1;
            for (n, c) in shorts.char_indices() {
                let takes = root
                    .get_arguments()
                    .any(|a| a.get_short() == Some(c) && takes_value(a));
                if takes {
                    if n + c.len_utf8() == shorts.len() {
                        next = 2;
                    }
                    break;
                }
            }
            i += next;
            continue;
        }
        return Some(i);
    }
    None
}

/// `argv` parsed with each option overriding itself (what comes later wins).
pub fn parse(argv: Vec<OsString>) -> std::result::Result<Cli, String> {
    let m = Cli::command()
        .args_override_self(true)
        .try_get_matches_from(argv)
        .map_err(|e| crate::cli::args::usage_error(&e.to_string()))?;
    <Cli as clap::FromArgMatches>::from_arg_matches(&m).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(text: &str) -> toml::Table {
        toml::from_str(text).unwrap()
    }

    fn words(argv: &[&str]) -> Vec<OsString> {
        argv.iter().map(OsString::from).collect()
    }

    #[test]
    fn the_command_is_found_past_global_options_and_their_values() {
        let root = Cli::command();
        let at = |a: &[&str]| command_at(&root, &words(a));
        assert_eq!(at(&["cairn", "create", "x"]), Some(1));
        assert_eq!(at(&["cairn", "-r", "create", "prune"]), Some(3));
        assert_eq!(at(&["cairn", "--profile", "create", "check"]), Some(3));
        assert_eq!(at(&["cairn", "--repo=x", "--utc", "list"]), Some(3));
        assert_eq!(at(&["cairn", "--utc"]), None);
    }

    #[test]
    fn options_go_where_the_command_line_wins() {
        let t = table(
            "lock-wait = 60\n[create]\nexclude = [\"*.tmp\", \"*.o\"]\none-file-system = true\nexclude-caches = false\ncompression = \"lz4\"\n[prune]\nkeep-daily = 7",
        );
        check(&t).unwrap();
        let argv = spliced(&t, words(&["cairn", "create", "-C", "none", "a", "s"]))
            .unwrap()
            .unwrap();
        assert_eq!(
            argv,
            words(&[
                "cairn",
                "--lock-wait=60",
                "create",
                "--compression=lz4",
                "--exclude=*.tmp",
                "--exclude=*.o",
                "--one-file-system",
                "-C",
                "none",
                "a",
                "s"
            ])
        );
        let cli = parse(argv).unwrap();
        let crate::cli::args::Command::Create(a) = cli.command else {
            panic!("not create")
        };
        assert_eq!(
            a.compression.as_deref(),
            Some("none"),
            "the command line wins"
        );
        assert_eq!(a.exclude, ["*.tmp", "*.o"]);
        assert!(a.one_file_system && !a.exclude_caches);
        assert_eq!(cli.lock_wait, 60.0);
        // Nothing for list.
        assert!(
            spliced(&table("[create]\nstats = true"), words(&["cairn", "list"]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn keys_that_are_not_options_are_named() {
        let e = check(&table("[create]\nexclude-cache = true")).unwrap_err();
        assert!(
            e.contains("\"exclude-cache\"") && e.contains("exclude-caches"),
            "{e}"
        );
        let e = check(&table("[creat]\nstats = true")).unwrap_err();
        assert!(
            e.contains("[creat] is not a command") && e.contains("create"),
            "{e}"
        );
        let e = check(&table("lock-wiat = 1")).unwrap_err();
        assert!(e.contains("lock-wait"), "{e}");
        let e = check(&table("[create]\nstats = \"yes\"")).unwrap_err();
        assert!(e.contains("true or false"), "{e}");
        assert!(check(&table("[key]\nx = 1")).is_err());
        assert!(check(&table("[create]\nprofile = \"x\"")).is_err());
        check(&table("[create]\npaths = [\"/a\"]")).unwrap();
    }
}
