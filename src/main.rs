//! The `cairn` binary: parse, run, map the outcome to an exit status.

use std::process::ExitCode;

use clap::Parser;

use cairn::cli::Cli;
use cairn::Error;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cairn::commands::run(cli) {
        Ok(status) => ExitCode::from(status.code()),
        Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
            ExitCode::SUCCESS
        }
        Err(Error::Interrupted(sig)) => {
            eprintln!("cairn: interrupted; nothing was committed");
            ExitCode::from(128u8.saturating_add(sig as u8))
        }
        Err(e) => {
            // cairn's messages already carry their causes: print each once.
            eprintln!("cairn: error: {e}");
            ExitCode::from(2)
        }
    }
}
