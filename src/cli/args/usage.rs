//! A command line that does not parse, said as one `--log-json` record: the whole of clap's
//! message on one line, and the command it was for.

use clap::CommandFactory;

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

/// The command a command line names (`key add` as `key add`), if it names one.
pub fn command_named(args: impl Iterator<Item = std::ffi::OsString>) -> Option<String> {
    let mut cmd = Cli::command();
    let mut names = Vec::new();
    for arg in args.skip(1) {
        let Some(arg) = arg.to_str() else { continue };
        let Some(sub) = cmd
            .get_subcommands()
            .find(|s| s.get_name() == arg || s.get_all_aliases().any(|a| a == arg))
            .cloned()
        else {
            continue;
        };
        names.push(sub.get_name().to_string());
        cmd = sub;
    }
    (!names.is_empty()).then(|| names.join(" "))
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
    }
}
