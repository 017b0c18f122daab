//! `cairn delete ARCHIVE...`

use crate::archive;
use crate::cli::args::DeleteArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::Result;

pub fn run(ctx: &Ctx, args: &DeleteArgs) -> Result<Status> {
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
    let wholesale = wholesale(&list, args)?;
    for (id, meta) in &wholesale {
        if !chosen.iter().any(|(i, _)| i == id) {
            chosen.push((*id, meta.clone()));
        }
    }
    if !wholesale.is_empty() && !args.dry_run {
        ask(&wholesale, args)?;
    }
    if !args.dry_run {
        archive::finish_replaced(&ctx.repo, &list)?;
    }
    for r in &hidden {
        if !args.dry_run {
            // Kept by the finishing when its replacement had lost its data: asked for, so
            // removed now.
            ctx.repo.delete_archive(&r.id)?;
        }
        output::line(&format!(
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
    let mut removed = Vec::new();
    for (id, meta) in &chosen {
        let what = format!(
            "{} {} (aid:{})",
            meta.name,
            output::time(meta.start),
            &id.to_hex()[..8]
        );
        if args.dry_run {
            output::line(&format!("Would delete archive {what}"))?;
        } else {
            ctx.repo.delete_archive(id)?;
            removed.push(format!("aid:{}", &id.to_hex()[..8]));
            output::line(&format!("Deleted archive {what}"))?;
        }
    }
    ctx.repo.confirm_removals(&removed)?;
    if !args.dry_run {
        output::line(crate::cli::output::after_removal(&ctx.repo))?;
    }
    Ok(Status::Ok)
}

/// The archives `--glob` or `--all` chose.
fn wholesale(
    list: &archive::ArchiveList,
    args: &DeleteArgs,
) -> Result<Vec<(crate::util::id::ArchiveId, archive::ArchiveMeta)>> {
    if args.all {
        return Ok(list.archives.clone());
    }
    match &args.glob {
        Some(g) => crate::cli::chosen::matching(&list.archives, g),
        None => Ok(Vec::new()),
    }
}

/// Asks before deleting what a pattern or `--all` chose, listing it first on a terminal.
fn ask(
    chosen: &[(crate::util::id::ArchiveId, archive::ArchiveMeta)],
    args: &DeleteArgs,
) -> Result<()> {
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
