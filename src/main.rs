//! The `cairn` binary: parse, run, map the outcome to an exit status.

use std::process::ExitCode;

use clap::Parser;

use cairn::cli::args::Cli;
use cairn::Error;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        // A command line that does not parse, with --log-json: the error as a record and
        // the summary, as for any other failure (help and --version print as they are).
        Err(e) if e.use_stderr() && std::env::args_os().any(|a| a == "--log-json") => {
            cairn::util::log::set_json(true);
            let said = cairn::cli::args::said_of(&e, std::env::args_os());
            if let Some(command) = cairn::cli::args::command_named(std::env::args_os()) {
                cairn::cli::summary::set_command(&command);
            }
            cairn::say!("cairn: error: {said}");
            cairn::cli::summary::emit(2, Some(said));
            return ExitCode::from(2);
        }
        Err(e) => e.exit(),
    };
    let result = cairn::cli::commands::run(cli);
    let code = cairn::cli::commands::exit_code(&result);
    let error = result.err().and_then(|e| match e.downcast_ref::<Error>() {
        Some(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => None,
        Some(Error::Interrupted(_)) => {
            let what = "interrupted; nothing was committed".to_string();
            cairn::say!("cairn: {what}");
            Some(what)
        }
        Some(Error::InterruptedIncomplete { what, .. }) => {
            let what = format!("interrupted: {what}");
            cairn::say!("cairn: {what}");
            Some(what)
        }
        _ => {
            // What cairn was doing, then the error. cairn's own errors already carry their
            // causes in their messages: the chain stops there, so nothing is said twice.
            let mut said = Vec::new();
            for layer in e.chain() {
                said.push(layer.to_string());
                if layer.downcast_ref::<Error>().is_some() {
                    break;
                }
            }
            let said = said.join(": ");
            cairn::say!("cairn: error: {said}");
            Some(said)
        }
    });
    cairn::cli::summary::emit(code, error);
    ExitCode::from(code)
}
