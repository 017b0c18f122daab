//! `cairn extract NAME [PATH...] [--target DIR]`

use std::path::PathBuf;

use crate::archive::{self, ArchiveMeta};
use crate::cli::args::{ExtractArgs, OverwriteArg};
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::{Error, Result};
use crate::index::ChunkIndex;
use crate::ops::extract::dry_run::{self, DryRunOptions, DryRunReport};
use crate::ops::extract::{self, Overwrite, RestoreOptions, RestoreReport, Stopped};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::progress::Progress;

pub fn run(ctx: &Ctx, args: &ExtractArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let (_, meta) = archive::select(repo, &args.archive)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let target = target(args)?;
    let selection = crate::cli::select::selection(&args.paths, &args.reshape)?;
    let overwrite = match args.overwrite {
        OverwriteArg::IfChanged => Overwrite::IfChanged,
        OverwriteArg::Always => Overwrite::Always,
        OverwriteArg::Never => Overwrite::Never,
    };
    let interrupt = ctx.interrupt()?;
    if args.dry_run {
        let opts = DryRunOptions {
            target,
            selection,
            overwrite,
            delete: args.delete,
            numeric_ids: args.meta.options().numeric_ids,
            own: crate::cli::commands::own_dirs(ctx, "read"),
            root_ok: args.no_preserve_root,
        };
        return run_dry_run(repo, &index, &meta, opts, &interrupt, args);
    }
    if args.verify && overwrite == Overwrite::Never {
        return Err(Error::invalid(
            "--verify reads back what the restore wrote, and --overwrite never keeps files without writing them: use one or the other",
        ));
    }
    let verify = match args.verify {
        true => Some(crate::cli::select::selection(&args.paths, &args.reshape)?),
        false => None,
    };
    let opts = RestoreOptions {
        target,
        meta: args.meta.options(),
        selection,
        verify,
        threads: ctx.settings.threads(args.threads)?,
        overwrite,
        delete: args.delete,
        own: crate::cli::commands::own_dirs(ctx, "read"),
        root_ok: args.no_preserve_root,
    };
    let progress = Progress::new(args.progress.choice());
    let started = std::time::Instant::now();
    let report = extract::run(repo, &index, &meta, opts, &progress, &interrupt)?;
    progress.finish();
    figures(&report, &meta.name, started);
    if report.items > 0 || report.untouched > 0 || report.deleted > 0 {
        output::line(&summary(&report, &meta.name, started.elapsed()))?;
    }
    for u in &report.unmatched {
        output::unmatched(u, &meta.name);
    }
    if let Some(back) = &report.read_back {
        said_read_back(back)?;
    }
    outcome(&report, args)
}

/// The directory to restore into: `--target`, else the working directory (but `--delete`
/// needs `--target`).
fn target(args: &ExtractArgs) -> Result<PathBuf> {
    match &args.target {
        Some(t) => Ok(t.clone()),
        // Deleting is asked for where it happens, never implied by the working directory.
        None if args.delete => Err(Error::invalid(
            "--delete removes what the archive does not hold from the target; name the target with --target",
        )),
        None => std::env::current_dir().map_err(|e| Error::io(".", e)),
    }
}

/// `extract --dry-run [--list]`: what a restore would do, said path by path with `--list`.
fn run_dry_run(
    repo: &Repository,
    index: &ChunkIndex,
    meta: &ArchiveMeta,
    opts: DryRunOptions,
    interrupt: &Interrupt,
    args: &ExtractArgs,
) -> Result<Status> {
    let report = dry_run::run(repo, index, meta, opts, interrupt, |planned, path, dir| {
        if args.list && planned != dry_run::Planned::Same {
            let slash = if dir { "/" } else { "" };
            output::line(&format!(
                "{:<6} {}{slash}",
                planned.word(),
                crate::util::text::printable_bytes(path)
            ))?;
        }
        Ok(())
    })?;
    dry_run_summary(&report, &meta.name, args)
}

/// The restore's figures, for the summary and the hooks.
fn figures(report: &RestoreReport, name: &str, started: std::time::Instant) {
    use crate::cli::summary::figure;
    figure("archive", name.to_string());
    figure("files", report.files);
    figure("bytes", report.bytes);
    figure("fetched_bytes", report.fetched);
    figure("present_files", report.kept_files);
    figure("present_bytes", report.kept_bytes);
    figure("untouched", report.untouched);
    figure("deleted", report.deleted);
    figure("errors", report.errors.len() as u64);
    figure(
        "duration_secs",
        (started.elapsed().as_secs_f64() * 10.0).round() / 10.0,
    );
}

/// How the restore ended: an error when the paths matched nothing, when it stopped, or when
/// items could not be restored; else a warning for each warning said, or success.
fn outcome(report: &RestoreReport, args: &ExtractArgs) -> Result<Status> {
    if !args.paths.is_empty()
        && report.items == 0
        && report.untouched == 0
        && report.skipped == 0
        && report.files_not_restored == 0
    {
        return Err(Error::invalid(
            "no item in the archive matches the given paths; nothing was restored",
        ));
    }
    if let Some(stop) = &report.stopped {
        return Err(stopped(report, stop));
    }
    if !report.errors.is_empty() {
        return Err(Error::invalid(format!(
            "{} could not be restored (see above)",
            output::count(report.errors.len() as u64, "item")
        )));
    }
    if let Some(back) = report.read_back.as_ref().filter(|b| !b.failures.is_empty()) {
        return Err(Error::invalid(format!(
            "{} restored did not read back as the archive holds {} (see above): the target's disk or file system lost or changed what was written",
            output::count(back.failures.len() as u64, "file"),
            if back.failures.len() == 1 { "it" } else { "them" }
        )));
    }
    for what in &report.unset {
        crate::say!(
            "warning: {what} could not be set without root; the files themselves were restored"
        );
    }
    // The summary counts every warning line printed: the files', the paths that matched
    // nothing, what could not be set without root, what could not be read back, and what
    // opening the repository said.
    let unread = report
        .read_back
        .as_ref()
        .is_some_and(|b| !b.unread.is_empty());
    if !report.warnings.is_empty()
        || !report.unmatched.is_empty()
        || !report.unset.is_empty()
        || unread
    {
        let warned = crate::util::progress::warnings_said();
        crate::say!("cairn: {} (see above)", output::count(warned, "warning"));
        return Ok(Status::Warning);
    }
    Ok(Status::Ok)
}

/// The error of a restore that stopped: on a full target, or after the same error many times
/// in a row.
fn stopped(report: &RestoreReport, stop: &Stopped) -> Error {
    let cause = &stop.cause;
    Error::invalid(if stop.full {
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
    })
}

/// "Restored 24 files (1.0 GiB) of archive NAME in 2.1 s: 130 MiB fetched; 21 files (900 MiB)
/// were there already, only their metadata was set; 3 items were left as they were; 2
/// entries deleted".
fn summary(report: &RestoreReport, name: &str, took: std::time::Duration) -> String {
    let mut line = format!(
        "Restored {} ({}) of archive {name} in {:.1} s: {} fetched",
        output::count(report.files, "file"),
        output::size(report.bytes),
        took.as_secs_f64(),
        output::size(report.fetched)
    );
    if report.kept_files > 0 {
        line.push_str(&format!(
            "; {} ({}) were there already, only their metadata was set",
            output::count(report.kept_files, "file"),
            output::size(report.kept_bytes)
        ));
    }
    if report.untouched > 0 {
        line.push_str(&format!(
            "; {} already there left as {} (--overwrite never)",
            output::count(report.untouched, "item"),
            if report.untouched == 1 {
                "it was"
            } else {
                "they were"
            }
        ));
    }
    if report.deleted > 0 {
        line.push_str(&format!(
            "; {} the archive does not hold deleted",
            output::count(report.deleted, "item")
        ));
    }
    line
}

/// `extract --dry-run`'s last line, and its exit status.
fn dry_run_summary(report: &DryRunReport, name: &str, args: &ExtractArgs) -> Result<Status> {
    for n in &report.notes {
        crate::say!("note: {n}");
    }
    for w in &report.warnings {
        w.say(false);
    }
    for e in &report.errors {
        e.say(true);
    }
    for u in &report.unmatched {
        output::unmatched(u, name);
    }
    let mut line = format!(
        "Dry run of archive {name}: {} would be written ({} in {}), {} would have only metadata set, {} ({}) are as in the archive",
        output::count(report.write_items, "item"),
        output::size(report.write_bytes),
        output::count(report.write_files, "file"),
        output::count(report.fix, "item"),
        output::count(report.same, "item"),
        output::size(report.same_bytes),
    );
    if report.keep > 0 {
        line.push_str(&format!(
            ", {} would be left as they are",
            output::count(report.keep, "item")
        ));
    }
    if report.skip > 0 {
        line.push_str(&format!(
            ", {} would be skipped (see the warnings)",
            output::count(report.skip, "item")
        ));
    }
    if args.delete {
        line.push_str(&format!(
            ", {} would be deleted",
            output::count(report.delete, "item")
        ));
    }
    line.push_str(". Nothing was changed.");
    output::line(&line)?;
    let selected = report.write_items + report.fix + report.same + report.keep + report.skip;
    if !args.paths.is_empty() && selected == 0 {
        return Err(Error::invalid(
            "no item in the archive matches the given paths; nothing would be restored",
        ));
    }
    if !report.errors.is_empty() {
        return Err(Error::invalid(format!(
            "{} could not be restored (see above); nothing was changed",
            output::count(report.errors.len() as u64, "item")
        )));
    }
    Ok(
        if report.warnings.is_empty() && report.unmatched.is_empty() {
            Status::Ok
        } else {
            Status::Warning
        },
    )
}

/// `--verify`: each file that did not read back as the archive holds it, and a line that says
/// what was read back.
fn said_read_back(back: &extract::ReadBack) -> Result<()> {
    use crate::cli::summary::figure;
    figure("verified_files", back.files);
    figure("verify_failures", back.failures.len() as u64);
    for f in &back.failures {
        crate::say!("error: read back: {f}");
    }
    for f in &back.unread {
        crate::say!("warning: read back: {f}");
    }
    output::line(&format!(
        "Read back {} ({}) from the target: {}",
        output::count(back.files, "file"),
        output::size(back.bytes),
        match back.failures.len() {
            0 => "every one as the archive holds it".to_string(),
            n => format!("{} missing or different", output::count(n as u64, "file")),
        }
    ))
}
