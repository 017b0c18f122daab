//! The `cairn` binary: parse, run, map the outcome to an exit status.

use std::process::ExitCode;

use clap::Parser;

use cairn::cli::args::Cli;

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
    let error = result
        .err()
        .and_then(|e| cairn::cli::commands::said_failure(&e));
    cairn::cli::summary::emit(code, error);
    ExitCode::from(code)
}
