//! `cairn extract NAME [PATH...] [--target DIR]`

use crate::archive;
use crate::cli::args::ExtractArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::{Error, Result};
use crate::ops::extract::{self, RestoreOptions};
use crate::util::progress::Progress;

pub fn run(ctx: &Ctx, args: &ExtractArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let (_, meta) = archive::select(repo, &args.archive)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let target = match &args.target {
        Some(t) => t.clone(),
        None => std::env::current_dir().map_err(|e| Error::io(".", e))?,
    };
    let selection = crate::cli::select::selection(&args.paths, &args.reshape)?;
    let opts = RestoreOptions {
        target,
        meta: args.meta.options(),
        selection,
        threads: ctx.settings.threads(args.threads)?,
    };
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let started = std::time::Instant::now();
    let report = extract::run(repo, &index, &meta, opts, &progress, &interrupt)?;
    progress.finish();
    if report.items > 0 {
        let kept = if report.kept_files > 0 {
            format!(
                "; {} ({}) were there already, only their metadata was set",
                output::count(report.kept_files, "file"),
                output::size(report.kept_bytes)
            )
        } else {
            String::new()
        };
        output::line(&format!(
            "Restored {} ({}) of archive {} in {:.1} s{kept}",
            output::count(report.files, "file"),
            output::size(report.bytes),
            meta.name,
            started.elapsed().as_secs_f64()
        ))?;
    }
    for u in &report.unmatched {
        crate::say!("warning: {u}: matches nothing in archive {}", meta.name);
    }
    if !args.paths.is_empty() && report.items == 0 && report.files_not_restored == 0 {
        return Err(Error::invalid(
            "no item in the archive matches the given paths; nothing was restored",
        ));
    }
    if let Some(stop) = &report.stopped {
        let cause = &stop.cause;
        return Err(Error::invalid(if stop.full {
            format!(
                "the target is full ({cause}): {} not restored{}",
                output::count(report.files_not_restored, "file"),
                if report.errors.len() > 1 {
                    format!(
                        ", and {} failed (see above)",
                        output::count(report.errors.len() as u64 - 1, "other item")
                    )
                } else {
                    String::new()
                }
            )
        } else {
            format!(
                "the target gave the same error for {} in a row ({cause}), so the restore stopped: {} not restored besides those",
                output::count(u64::from(extract::SAME_ERROR_STOPS), "item"),
                output::count(report.files_not_restored, "file")
            )
        }));
    }
    if !report.errors.is_empty() {
        return Err(Error::invalid(format!(
            "{} could not be restored (see above)",
            output::count(report.errors.len() as u64, "item")
        )));
    }
    for what in &report.unset {
        crate::say!(
            "warning: {what} could not be set without root; the files themselves were restored"
        );
    }
    // The summary counts every warning line printed: the files', the paths that matched
    // nothing, what could not be set without root, and what opening the repository said.
    if !report.warnings.is_empty() || !report.unmatched.is_empty() || !report.unset.is_empty() {
        let warned = crate::util::progress::warnings_said();
        crate::say!("cairn: {} (see above)", output::count(warned, "warning"));
        return Ok(Status::Warning);
    }
    Ok(Status::Ok)
}
