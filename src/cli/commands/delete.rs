//! `cairn delete ARCHIVE...`

use crate::archive;
use crate::cli::args::DeleteArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::cli::report::Report;
use crate::error::Result;
use crate::repo::lock::LockKind;
use crate::util::id::ArchiveId;
use std::time::Duration;

/// Whether delete asks before it removes: what --glob or --all chose, without --yes or
/// --dry-run.
pub fn asks(args: &DeleteArgs) -> bool {
    (args.glob.is_some() || args.all) && !args.yes && !args.dry_run
}

/// Lists what --glob or --all chose and asks, with the repository's lock let go meanwhile (a
/// prompt left open must not lock out every backup), then takes the lock again. Returns the
/// archives confirmed: only those are deleted, whatever another client did meanwhile.
pub fn ask_unlocked(ctx: &mut Ctx, args: &DeleteArgs, wait: Duration) -> Result<Vec<ArchiveId>> {
    let list = archive::load_all(&ctx.repo)?;
    let chosen = wholesale(&list, args)?;
    ctx.repo.release_lock();
    let asked = ask(&chosen, args);
    ctx.repo.lock(LockKind::Exclusive, "delete", wait)?;
    asked?;
    Ok(chosen.into_iter().map(|(id, _)| id).collect())
}

pub fn run(ctx: &Ctx, args: &DeleteArgs, confirmed: Option<&[ArchiveId]>) -> Result<Status> {
    // A hidden archive named by its id goes with the others hidden (which any removing
    // command removes first): said as deleted, never "no archive with that id". Every spec is
    // resolved before anything is removed: a spec that names nothing removes nothing.
    let list = archive::load_all(&ctx.repo)?;
    let hidden: Vec<&archive::Replaced> = args
        .archives
        .iter()
        .filter_map(|spec| archive::hidden(&list, spec))
        .collect();
    let mut chosen = Vec::new();
    for spec in &args.archives {
        if archive::hidden(&list, spec).is_some() {
            continue;
        }
        let (id, meta) = archive::select(&ctx.repo, spec)?;
        if !chosen.iter().any(|(i, _)| *i == id) {
            chosen.push((id, meta));
        }
    }
    let wholesale = match confirmed {
        Some(ids) => still_there(&list, ids),
        None => wholesale(&list, args)?,
    };
    let mut report = Report::new(args.json);
    report.figure("dry_run", args.dry_run);
    if args.all && wholesale.is_empty() && chosen.is_empty() {
        report.figure("deleted", 0);
        report.line("The repository holds no archive: nothing to delete.")?;
        report.finish(true)?;
        return Ok(Status::Ok);
    }
    for (id, meta) in &wholesale {
        if !chosen.iter().any(|(i, _)| i == id) {
            chosen.push((*id, meta.clone()));
        }
    }
    if !args.dry_run {
        archive::finish_replaced(&ctx.repo, &list)?;
    }
    delete_hidden(ctx, args, &hidden, &mut report)?;
    let mut removed = Vec::new();
    for (id, meta) in &chosen {
        let what = format!(
            "{} {} (aid:{})",
            meta.name,
            output::time(meta.start),
            &id.to_hex()[..8]
        );
        if args.dry_run {
            report.archive("would-delete", (id, meta), &[]);
            report.line(&format!("Would delete archive {what}"))?;
        } else {
            ctx.repo.delete_archive(id)?;
            removed.push(format!("aid:{}", &id.to_hex()[..8]));
            report.archive("deleted", (id, meta), &[]);
            report.line(&format!("Deleted archive {what}"))?;
        }
    }
    ctx.repo.confirm_removals(&removed)?;
    report.figure("deleted", (hidden.len() + chosen.len()) as u64);
    if !args.dry_run {
        report.line(crate::cli::output::after_removal(&ctx.repo))?;
    }
    report.finish(true)?;
    Ok(Status::Ok)
}

/// Deletes the hidden archives named by their ids (kept by the finishing when their
/// replacement had lost its data: asked for, so removed now).
fn delete_hidden(
    ctx: &Ctx,
    args: &DeleteArgs,
    hidden: &[&archive::Replaced],
    report: &mut Report,
) -> Result<()> {
    for r in hidden {
        if !args.dry_run {
            ctx.repo.delete_archive(&r.id)?;
        }
        report.archive(
            if args.dry_run {
                "would-delete"
            } else {
                "deleted"
            },
            (&r.id, &r.meta),
            &[("hidden_by", r.by.to_hex().into())],
        );
        report.line(&format!(
            "{} archive {} {} (aid:{}), hidden: aid:{} was written in place of it",
            if args.dry_run {
                "Would delete"
            } else {
                "Deleted"
            },
            r.meta.name,
            output::time(r.meta.start),
            &r.id.to_hex()[..8],
            &r.by.to_hex()[..8]
        ))?;
    }
    Ok(())
}

/// The archives confirmed before the lock was taken again that are still there (one another
/// client deleted meanwhile is said).
fn still_there(
    list: &archive::ArchiveList,
    ids: &[ArchiveId],
) -> Vec<(ArchiveId, archive::ArchiveMeta)> {
    let there: Vec<_> = list
        .archives
        .iter()
        .filter(|(id, _)| ids.contains(id))
        .cloned()
        .collect();
    if there.len() < ids.len() {
        crate::say!(
            "note: {} of those confirmed were deleted by another client meanwhile",
            output::count((ids.len() - there.len()) as u64, "archive")
        );
    }
    there
}

/// The archives `--glob` or `--all` chose.
fn wholesale(
    list: &archive::ArchiveList,
    args: &DeleteArgs,
) -> Result<Vec<(ArchiveId, archive::ArchiveMeta)>> {
    if args.all {
        return Ok(list.archives.clone());
    }
    match &args.glob {
        Some(g) => crate::cli::chosen::matching(&list.archives, g),
        None => Ok(Vec::new()),
    }
}

/// Asks before deleting what a pattern or `--all` chose, listing it first on a terminal.
fn ask(chosen: &[(ArchiveId, archive::ArchiveMeta)], args: &DeleteArgs) -> Result<()> {
    if !args.yes && std::io::IsTerminal::is_terminal(&std::io::stdin()) {
        for (id, meta) in chosen {
            crate::say!(
                "  {} {} (aid:{})",
                meta.name,
                output::time(meta.start),
                &id.to_hex()[..8]
            );
        }
    }
    let by = match &args.glob {
        Some(g) if !args.all => format!("--glob {g:?}"),
        _ => "--all".to_string(),
    };
    crate::cli::chosen::confirm(
        &format!(
            "delete {} chosen by {by}",
            output::count(chosen.len() as u64, "archive")
        ),
        args.yes,
    )
}
