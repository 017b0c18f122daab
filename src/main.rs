//! The `cairn` binary: parse, run, map the outcome to an exit status.

use std::process::ExitCode;

use clap::Parser;

use cairn::cli::args::Cli;
use cairn::Error;

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cairn::cli::commands::run(cli) {
        Ok(status) => ExitCode::from(status.code()),
        Err(e) => match e.downcast_ref::<Error>() {
            Some(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::BrokenPipe => {
                ExitCode::SUCCESS
            }
            Some(Error::Interrupted(sig)) => {
                cairn::say!("cairn: interrupted; nothing was committed");
                ExitCode::from(128u8.saturating_add(*sig as u8))
            }
            Some(Error::InterruptedIncomplete { signal, what }) => {
                cairn::say!("cairn: interrupted: {what}");
                ExitCode::from(128u8.saturating_add(*signal as u8))
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
                ExitCode::from(2)
            }
        },
    }
}
