//! `cairn serve [--restrict-to-path DIR]... [--restrict-to-repository DIR]... [--append-only]
//! [--storage-quota SIZE]`: one connection of a repository server on stdin and stdout.

use crate::cli::args::ServeArgs;
use crate::cli::commands::Status;
use crate::error::{Error, Result};
use crate::serve::{serve, Options, Restrictions, Rules};

pub fn run(args: &ServeArgs) -> Result<Status> {
    if args.storage_quota == Some(0) {
        return Err(Error::invalid(
            "--storage-quota 0 would refuse every write: give a size, like 500G",
        ));
    }
    let opts = Options {
        restrictions: Restrictions::new(&args.restrict_to_path, &args.restrict_to_repository)?,
        rules: Rules {
            append_only: args.append_only,
            quota: args.storage_quota,
        },
    };
    serve(&opts, std::io::stdin(), std::io::stdout())?;
    Ok(Status::Ok)
}
