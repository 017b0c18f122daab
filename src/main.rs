//! The `cairn` binary: parse, run, map the outcome to an exit status.

use std::process::ExitCode;

use clap::Parser;

use cairn::cli::args::Cli;
use cairn::Error;

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = cairn::cli::commands::run(cli);
    let code = ExitCode::from(cairn::cli::commands::exit_code(&result));
    match result {
        Ok(_) => code,
        Err(e) => match e.downcast_ref::<Error>() {
            Some(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
                code
            }
            Some(Error::Interrupted(_)) => {
                cairn::say!("cairn: interrupted; nothing was committed");
                code
            }
            Some(Error::InterruptedIncomplete { what, .. }) => {
                cairn::say!("cairn: interrupted: {what}");
                code
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
                cairn::say!("cairn: error: {}", said.join(": "));
                code
            }
        },
    }
}
