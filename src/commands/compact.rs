//! `cairn compact [--threshold PERCENT]`

use crate::cli::CompactArgs;
use crate::commands::{output, Ctx, Status};
use crate::error::{Error, Result};
use crate::ops::compact::{self, CompactOptions};
use crate::progress::Progress;

pub fn run(ctx: &Ctx, args: &CompactArgs) -> Result<Status> {
    if !(0.0..=100.0).contains(&args.threshold) {
        return Err(Error::invalid("--threshold must be between 0 and 100"));
    }
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let opts = CompactOptions {
        threshold_percent: args.threshold,
        dry_run: args.dry_run,
    };
    let r = compact::run(&ctx.repo, &opts, &progress, &interrupt)?;
    progress.finish();
    let (delete, rewrite) = if args.dry_run {
        ("Would delete", "rewrite")
    } else {
        ("Deleted", "rewrote")
    };
    output::line(&format!(
        "{delete} {} packs and {rewrite} {} ({} chunks unused, {} live).",
        r.packs_deleted, r.packs_rewritten, r.chunks_dropped, r.chunks_live
    ))?;
    for d in &r.damaged_packs_kept {
        eprintln!("warning: left a pack with damaged data alone: {d} (run cairn check)");
    }
    output::line(&format!(
        "Repository: {} packs, {} → {} packs, {}; {} {}.",
        r.packs_before,
        crate::commands::output::size(r.bytes_before),
        r.packs_after,
        output::size(r.bytes_after),
        output::size(r.freed().max(0) as u64),
        if args.dry_run {
            "would be freed"
        } else {
            "freed"
        }
    ))?;
    if r.damaged_packs_kept.is_empty() {
        Ok(Status::Ok)
    } else {
        Ok(Status::Warning)
    }
}
