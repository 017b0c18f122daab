//! A profile's options as command-line arguments: a top-level key is a global option
//! (`lock-wait = 60` is `--lock-wait=60`), a `[COMMAND]` section holds that command's options
//! (`[create] one-file-system = true` is `create --one-file-system`). They are put where the
//! command line's own come after them, and parsed with each option overriding itself.
//!
//! What the command line or the environment sets, the profile does not: an option given
//! there leaves the profile's value out (only the exclude patterns add up), and a profile's
//! option that conflicts with one the command line gives is left out too. What chooses what
//! is removed never comes from a file: a profile has no `[delete]`, `[rewrite]` or `[serve]`
//! section, and none of [`NOT_FROM_A_FILE`].

use std::ffi::OsString;

use clap::parser::ValueSource;
use clap::{Arg, ArgAction, ArgMatches, Command, CommandFactory};

use crate::cli::args::Cli;
use crate::error::{Error, Result};

/// Keys a section holds that are not options: `[create] paths`, the paths backed up when the
/// command line gives none.
pub const NOT_OPTIONS: [(&str, &str); 1] = [("create", "paths")];

/// Top-level keys that are not options.
pub const TOP_LEVEL: [&str; 3] = ["repository", "passcommand", "hooks"];

/// Options a profile cannot set: where the profile is, and what only prints.
const NEVER: [&str; 4] = ["profile", "repo", "help", "version"];

/// Commands a profile has no section for: those whose options choose what is removed
/// (`delete --glob`, `--all`, `--yes`; `rewrite --glob`, `--exclude`) or who may reach a
/// repository (`serve --restrict-to-path`). They come from the command line only.
const NO_SECTION: [&str; 3] = ["delete", "rewrite", "serve"];

/// Options of other commands a profile cannot set, for the same reason: what deletes,
/// removes for good, or runs a program the command line names.
const NOT_FROM_A_FILE: [(&str, &str); 4] = [
    ("extract", "delete"),
    ("extract", "no-preserve-root"),
    ("compact", "removed-older-than"),
    ("create", "stdin-from-command"),
];

/// Options read from the environment when the command runs rather than by clap: set there,
/// the profile's value is left out as when the command line gives it.
const ENV_LATER: [(&str, &str); 1] = [("threads", "CAIRN_THREADS")];

/// Options whose values from the profile and the command line add up; for every other, the
/// command line's replaces the profile's (a `--tag` filter given to prune must not widen
/// the profile's into more archives pruned).
const ADD_UP: [&str; 5] = [
    "exclude",
    "exclude-from",
    "iexclude",
    "iexclude-from",
    "exclude-if-present",
];

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
                if NO_SECTION.contains(&key.as_str()) {
                    return Err(format!(
                        "[{key}] cannot be in a profile: what {key} removes or lets in is said on the command line only"
                    ));
                }
                if let Some(parent) = root
                    .get_subcommands()
                    .find(|c| c.get_name() == key && c.has_subcommands())
                {
                    return Err(format!(
                        "[{key}] cannot be in a profile: {} has commands of its own",
                        parent.get_name()
                    ));
                }
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
                    if NOT_FROM_A_FILE.contains(&(key.as_str(), k.as_str())) {
                        return Err(format!(
                            "[{key}] {k} cannot be in a profile: give --{k} on the command line when you mean it"
                        ));
                    }
                    if option(&root, k).is_some_and(Arg::is_global_set) {
                        return Err(format!(
                            "[{key}] {k}: {k} is a global option; set it at the top of the profile, before any [section]"
                        ));
                    }
                    if option(cmd, k).is_some_and(Arg::is_required_set) {
                        return Err(format!(
                            "[{key}] {k}: --{k} is required, so it is given on the command line; a profile cannot give it"
                        ));
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
            toml::Value::Array(a) if a.iter().any(toml::Value::is_table) => {
                return Err(format!("[[{key}]]: a section is written [{key}], once"));
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
            // A TOML date and time as written (`timestamp = 2024-05-01T12:00:00Z`).
            toml::Value::Datetime(d) => d.to_string(),
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
        toml::Value::Array(values) if matches!(arg.get_action(), ArgAction::Append) => {
            values.iter().map(one).collect()
        }
        toml::Value::Array(_) => Err(format!("{key:?} takes one value, not a list")),
        v => Ok(vec![one(v)?]),
    }
}

/// One option the profile gives: its key, and the arguments it stands for.
struct Given {
    key: String,
    global: bool,
    args: Vec<OsString>,
}

/// Whether the command line or the environment set `arg` (in `m`, the matches it belongs
/// to): the profile then leaves it alone, but for options whose values add up.
fn set_outside(m: Option<&ArgMatches>, arg: &Arg) -> bool {
    let source = m.and_then(|m| m.value_source(arg.get_id().as_str()));
    match source {
        Some(ValueSource::EnvVariable) => true,
        Some(ValueSource::CommandLine) => !arg.get_long().is_some_and(|l| ADD_UP.contains(&l)),
        _ => false,
    }
}

/// The profile's options for the command line `argv`, but those it sets itself.
fn given(table: &toml::Table, argv: &[OsString], at: usize) -> Result<Vec<Given>> {
    let root = Cli::command();
    let name = argv[at].to_string_lossy().into_owned();
    let Some(cmd) = root
        .get_subcommands()
        .find(|c| c.get_name() == name || c.get_all_aliases().any(|a| a == name))
    else {
        return Ok(Vec::new());
    };
    // The command line as it was parsed (it was, before the profile was read).
    let said = root.clone().try_get_matches_from(argv).ok();
    let sub = said
        .as_ref()
        .and_then(|m| m.subcommand_matches(cmd.get_name()));
    let mut out = Vec::new();
    for (key, value) in table {
        match value {
            toml::Value::Table(section) if cmd.get_name() == key => {
                // `extract --delete` needs its target named on the command line.
                let deleting = sub.is_some_and(|m| {
                    cmd.get_name() == "extract"
                        && m.value_source("delete") == Some(ValueSource::CommandLine)
                });
                for (k, v) in section {
                    let Some(arg) = option(cmd, k) else { continue };
                    let later = ENV_LATER.iter().any(|(o, var)| {
                        o == k && std::env::var_os(var).is_some_and(|v| !v.is_empty())
                    });
                    if deleting && k == "target" || later {
                        continue;
                    }
                    if !set_outside(sub, arg) {
                        let args = args_of(k, v, arg).map_err(Error::invalid)?;
                        out.push(Given {
                            key: k.clone(),
                            global: false,
                            args,
                        });
                    }
                }
            }
            toml::Value::Table(_) => {}
            v => {
                let Some(arg) = option(&root, key) else {
                    continue;
                };
                if !set_outside(said.as_ref(), arg) {
                    let args = args_of(key, v, arg).map_err(Error::invalid)?;
                    out.push(Given {
                        key: key.clone(),
                        global: true,
                        args,
                    });
                }
            }
        }
    }
    Ok(out)
}

/// `argv` with `given` spliced in: the global ones right after the program's name, the
/// command's right after the command's name, so that the command line's own come later.
fn splice(argv: &[OsString], at: usize, given: &[Given]) -> Vec<OsString> {
    let mut out = vec![argv[0].clone()];
    out.extend(
        given
            .iter()
            .filter(|g| g.global)
            .flat_map(|g| g.args.clone()),
    );
    out.extend_from_slice(&argv[1..=at]);
    out.extend(
        given
            .iter()
            .filter(|g| !g.global)
            .flat_map(|g| g.args.clone()),
    );
    out.extend_from_slice(&argv[at + 1..]);
    out
}

/// The options a conflict names (`--subset <SLICE>` as `subset`; a positional as shown).
fn conflicting(e: &clap::Error) -> Vec<String> {
    use clap::error::{ContextKind, ContextValue};
    let mut names = Vec::new();
    for kind in [ContextKind::InvalidArg, ContextKind::PriorArg] {
        let values = match e.get(kind) {
            Some(ContextValue::String(s)) => vec![s.clone()],
            Some(ContextValue::Strings(v)) => v.clone(),
            _ => Vec::new(),
        };
        for v in values {
            let name = match v.strip_prefix("--") {
                Some(long) => long.split([' ', '=']).next().unwrap_or(long).to_string(),
                None => v,
            };
            names.push(name);
        }
    }
    names
}

/// The command line `argv` parsed with the profile's options (`table`) in it; `None` when
/// the profile sets nothing for it. An option of the profile that conflicts with one the
/// command line gives is left out: the command line wins.
pub fn reparse(table: &toml::Table, argv: Vec<OsString>) -> Result<Option<Cli>> {
    let Some(at) = crate::cli::args::command_at(&Cli::command(), &argv) else {
        return Ok(None);
    };
    let mut given = given(table, &argv, at)?;
    given.retain(|g| !g.args.is_empty());
    if given.is_empty() {
        return Ok(None);
    }
    loop {
        let spliced = splice(&argv, at, &given);
        let e = match Cli::command()
            .args_override_self(true)
            .try_get_matches_from(spliced)
        {
            Ok(m) => {
                return <Cli as clap::FromArgMatches>::from_arg_matches(&m)
                    .map(Some)
                    .map_err(|e| Error::invalid(e.to_string()))
            }
            Err(e) => e,
        };
        let keys: Vec<String> = given.iter().map(|g| g.key.clone()).collect();
        if e.kind() == clap::error::ErrorKind::ArgumentConflict {
            let names = conflicting(&e);
            let ours: Vec<usize> = (0..given.len())
                .filter(|i| names.contains(&given[*i].key))
                .collect();
            let theirs = names.iter().any(|n| !keys.contains(n));
            if let ([i], true) = (ours.as_slice(), theirs) {
                given.remove(*i);
                continue;
            }
        }
        return Err(Error::invalid(format!(
            "{} (with what the profile sets: {})",
            crate::cli::args::usage_error(&e.to_string()),
            keys.join(", ")
        )));
    }
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
        let at = |a: &[&str]| crate::cli::args::command_at(&root, &words(a));
        assert_eq!(at(&["cairn", "create", "x"]), Some(1));
        assert_eq!(at(&["cairn", "-r", "create", "prune"]), Some(3));
        assert_eq!(at(&["cairn", "--profile", "create", "check"]), Some(3));
        assert_eq!(at(&["cairn", "--repo=x", "--utc", "list"]), Some(3));
        assert_eq!(at(&["cairn", "--utc"]), None);
    }

    fn create_of(cli: Cli) -> crate::cli::args::CreateArgs {
        match cli.command {
            crate::cli::args::Command::Create(a) => a,
            _ => panic!("not create"),
        }
    }

    #[test]
    fn options_go_where_the_command_line_wins() {
        let t = table(
            "lock-wait = 60\n[create]\nexclude = [\"*.tmp\", \"*.o\"]\none-file-system = true\nexclude-caches = false\ncompression = \"lz4\"\ntag = [\"p\"]\n[prune]\nkeep-daily = 7",
        );
        check(&t).unwrap();
        let argv = words(&["cairn", "create", "-C", "none", "--exclude", "x", "a", "s"]);
        let at = crate::cli::args::command_at(&Cli::command(), &argv).unwrap();
        let spliced = splice(&argv, at, &given(&t, &argv, at).unwrap());
        assert_eq!(
            spliced,
            words(&[
                "cairn",
                "--lock-wait=60",
                "create",
                "--exclude=*.tmp",
                "--exclude=*.o",
                "--one-file-system",
                "--tag=p",
                "-C",
                "none",
                "--exclude",
                "x",
                "a",
                "s"
            ]),
            "the command line's compression leaves the profile's out; excludes add up"
        );
        let cli = reparse(&t, argv).unwrap().unwrap();
        assert_eq!(cli.lock_wait, 60.0);
        let a = create_of(cli);
        assert_eq!(
            a.compression.as_deref(),
            Some("none"),
            "the command line wins"
        );
        assert_eq!(a.exclude, ["*.tmp", "*.o", "x"]);
        assert!(a.one_file_system && !a.exclude_caches);
        // A repeatable option that is not an exclude: the command line's replaces.
        let a = create_of(
            reparse(&t, words(&["cairn", "create", "--tag", "q", "a"]))
                .unwrap()
                .unwrap(),
        );
        assert_eq!(a.tags, ["q"]);
        // Nothing for list.
        assert!(
            reparse(&table("[create]\nstats = true"), words(&["cairn", "list"]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn a_toml_date_is_a_timestamp() {
        let t = table("[create]\ntimestamp = 2024-05-01T12:00:00Z");
        check(&t).unwrap();
        let a = create_of(
            reparse(&t, words(&["cairn", "create", "a"]))
                .unwrap()
                .unwrap(),
        );
        assert!(a.timestamp.is_some());
    }

    #[test]
    fn an_option_that_conflicts_with_the_command_line_is_left_out() {
        let t = table("[check]\nsubset = \"10%\"");
        let cli = reparse(&t, words(&["cairn", "check", "--repair"])).unwrap();
        match cli.map(|c| c.command) {
            Some(crate::cli::args::Command::Check(a)) => {
                assert!(a.repair && a.subset.is_none())
            }
            _ => panic!("not check"),
        }
        // Two of the profile's own that conflict: said, with the keys.
        let t = table("[create]\nfiles-from = \"a\"\nfiles-from0 = \"b\"");
        let e = reparse(&t, words(&["cairn", "create", "x"])).unwrap_err();
        assert!(e.to_string().contains("files-from"), "{e}");
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
        for (text, said) in [
            ("[delete]\nyes = true", "[delete] cannot be in a profile"),
            (
                "[rewrite]\nglob = \"*\"",
                "[rewrite] cannot be in a profile",
            ),
            (
                "[serve]\nappend-only = true",
                "[serve] cannot be in a profile",
            ),
            (
                "[extract]\ndelete = true",
                "[extract] delete cannot be in a profile",
            ),
            ("lock-wait = [1, 2]", "takes one value"),
            ("[create]\ncompression = [\"a\"]", "takes one value"),
            ("[list]\nutc = true", "utc is a global option"),
            ("[[create]]\nstats = true", "a section is written [create]"),
        ] {
            let e = check(&table(text)).unwrap_err();
            assert!(e.contains(said), "{text}: {e}");
        }
    }
}
