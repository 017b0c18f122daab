//! A command line that does not parse, said as one `--log-json` record: the whole of clap's
//! message on one line, and the command it was for.

use clap::{Command, CommandFactory};

use super::Cli;

/// clap's message for people (`error: …`, the arguments it names, the usage, a hint) as one
/// line without its prefix: `the following required arguments were not provided: <NEW_NAME>
/// (usage: cairn rename <ARCHIVE> <NEW_NAME>)`.
pub fn usage_error(text: &str) -> String {
    let mut said = Vec::new();
    let mut usage = None;
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(u) = line.strip_prefix("Usage: ") {
            usage = Some(u.to_string());
        } else if !line.starts_with("For more information") {
            said.push(line.strip_prefix("error: ").unwrap_or(line).to_string());
        }
    }
    let mut said = said.join(" ");
    if let Some(u) = usage {
        said.push_str(&format!(" (usage: {u})"));
    }
    said
}

/// The command a command line names (`key add` as `key add`), if it names one: the first
/// word that is not a global option or its value, and the word after it when that command
/// has commands of its own.
pub fn command_named(args: impl Iterator<Item = std::ffi::OsString>) -> Option<String> {
    let argv: Vec<std::ffi::OsString> = args.collect();
    let root = Cli::command();
    let at = command_at(&root, &argv)?;
    let find = |cmd: &Command, word: &std::ffi::OsString| {
        let word = word.to_string_lossy();
        cmd.get_subcommands()
            .find(|s| s.get_name() == word || s.get_all_aliases().any(|a| a == word))
            .cloned()
    };
    let top = find(&root, &argv[at])?;
    let mut name = top.get_name().to_string();
    if top.has_subcommands() {
        if let Some(nested) = argv[at + 1..]
            .iter()
            .find(|w| !w.to_string_lossy().starts_with('-'))
            .and_then(|w| find(&top, w))
        {
            name = format!("{name} {}", nested.get_name());
        }
    }
    Some(name)
}

/// What a command line that does not parse is said as: clap's message on one line, or, when
/// a command that has commands of its own was given none, which they are (clap's own text
/// is then the whole help).
pub fn said_of(e: &clap::Error, argv: impl Iterator<Item = std::ffi::OsString>) -> String {
    if e.kind() == clap::error::ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
        let root = Cli::command();
        let named = command_named(argv);
        let cmd = named
            .as_deref()
            .and_then(|n| root.find_subcommand(n).cloned())
            .unwrap_or(root);
        let subs: Vec<&str> = cmd
            .get_subcommands()
            .map(|s| s.get_name())
            .filter(|n| *n != "help")
            .collect();
        let of = named
            .map(|n| format!("cairn {n}"))
            .unwrap_or("cairn".into());
        return format!(
            "{of} needs a command: {} ({of} --help says more)",
            subs.join(", ")
        );
    }
    usage_error(&e.to_string())
}

/// Where the command's name is in `argv`: the first word that is not a global option or its
/// value.
pub fn command_at(root: &Command, argv: &[std::ffi::OsString]) -> Option<usize> {
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
                    .any(|a| a.get_long() == Some(long) && a.get_action().takes_values());
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
                    .any(|a| a.get_short() == Some(c) && a.get_action().takes_values());
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_whole_message_is_kept_on_one_line() {
        let text = "error: the following required arguments were not provided:\n  <NEW_NAME>\n\nUsage: cairn rename <ARCHIVE> <NEW_NAME>\n\nFor more information, try '--help'.\n";
        assert_eq!(
            usage_error(text),
            "the following required arguments were not provided: <NEW_NAME> (usage: cairn rename <ARCHIVE> <NEW_NAME>)"
        );
    }

    #[test]
    fn the_command_is_found_among_the_options() {
        let args = |a: &[&str]| a.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        assert_eq!(
            command_named(args(&["cairn", "--log-json", "-r", "/r", "rename", "x"]).into_iter()),
            Some("rename".into())
        );
        assert_eq!(
            command_named(args(&["cairn", "key", "export", "--paper"]).into_iter()),
            Some("key export".into())
        );
        assert_eq!(command_named(args(&["cairn", "--bogus"]).into_iter()), None);
        // Values of global options are not commands.
        assert_eq!(
            command_named(args(&["cairn", "-r", "key", "list", "--bogus"]).into_iter()),
            Some("list".into())
        );
        assert_eq!(
            command_named(args(&["cairn", "--profile", "create", "rename"]).into_iter()),
            Some("rename".into())
        );
    }
}
