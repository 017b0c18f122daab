//! `cairn delete ARCHIVE...`

use crate::archive;
use crate::cli::args::DeleteArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::Result;

pub fn run(ctx: &Ctx, args: &DeleteArgs) -> Result<Status> {
    if !args.dry_run {
        archive::load_all_finishing(&ctx.repo)?;
    }
    let mut chosen = Vec::new();
    for spec in &args.archives {
        let (id, meta) = archive::select(&ctx.repo, spec)?;
        if !chosen.iter().any(|(i, _)| *i == id) {
            chosen.push((id, meta));
        }
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
        output::line("Run cairn compact to free the space.")?;
    }
    Ok(Status::Ok)
}
