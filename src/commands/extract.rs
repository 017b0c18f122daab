//! `cairn extract NAME [PATH...] [--target DIR]`

use crate::archive;
use crate::cli::ExtractArgs;
use crate::commands::{Ctx, Status};
use crate::error::{Error, Result};
use crate::ops::create::stored_path;
use crate::ops::extract::{self, RestoreOptions};
use crate::progress::Progress;

pub fn run(ctx: &Ctx, args: &ExtractArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let (_, meta) = archive::select(repo, &args.archive)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        eprintln!("note: {n}");
    }
    let target = match &args.target {
        Some(t) => t.clone(),
        None => std::env::current_dir().map_err(|e| Error::io(".", e))?,
    };
    let opts = RestoreOptions {
        target,
        filters: args
            .paths
            .iter()
            .map(|p| stored_path(p))
            .filter(|p| !p.is_empty())
            .collect(),
        threads: ctx.settings.threads(args.threads)?,
    };
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let report = extract::run(repo, &index, &meta, &opts, &progress, &interrupt)?;
    progress.finish();
    if !opts.filters.is_empty() && report.items == 0 {
        return Err(Error::invalid(
            "no item in the archive matches the given paths",
        ));
    }
    if !report.errors.is_empty() {
        return Err(Error::invalid(format!(
            "{} items could not be restored (see above)",
            report.errors.len()
        )));
    }
    if !report.warnings.is_empty() {
        eprintln!("cairn: {} warnings (see above)", report.warnings.len());
        return Ok(Status::Warning);
    }
    Ok(Status::Ok)
}
