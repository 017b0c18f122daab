//! `cairn compact [--threshold PERCENT]`

use crate::cli::args::CompactArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::cli::report::Report;
use crate::error::{Error, Result};
use crate::ops::compact::{self, CompactOptions, CompactReport};
use crate::util::progress::Progress;

pub fn run(ctx: &Ctx, args: &CompactArgs) -> Result<Status> {
    if !(0.0..=100.0).contains(&args.threshold) {
        return Err(Error::invalid("--threshold must be between 0 and 100"));
    }
    let removed_older_than = args
        .removed_older_than
        .as_deref()
        .map(crate::ops::prune::parse_interval)
        .transpose()?;
    let mut report = Report::new(args.json);
    report.figure("dry_run", args.dry_run);
    if ctx.repo.store().append_only() {
        report.figure("append_only", true);
        report.line(
            "The repository's server is append-only: nothing is freed from here. Space is freed on the server, by its owner (cairn compact there).",
        )?;
        report.finish(false)?;
        return Ok(Status::Ok);
    }
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let opts = CompactOptions {
        threshold_percent: args.threshold,
        dry_run: args.dry_run,
        removed_older_than,
    };
    let r = compact::run(&ctx.repo, &opts, &progress, &interrupt)?;
    progress.finish();
    report.figures_of(&r);
    report.figure("freed_bytes", r.freed());
    let (delete, rewrite) = if args.dry_run {
        ("Would delete", "rewrite")
    } else {
        ("Deleted", "rewrote")
    };
    report.line(&format!(
        "{delete} {} and {rewrite} {}, {} {} ({} live).",
        output::count(r.packs_deleted, "pack"),
        r.packs_rewritten,
        if args.dry_run { "freeing" } else { "freed" },
        output::count(r.chunks_dropped, "unused chunk"),
        r.chunks_live
    ))?;
    if r.hidden_removed > 0 && args.dry_run {
        report.line(&format!(
            "{} hidden by archives written in place of {} would be removed first.",
            output::count(r.hidden_removed, "archive"),
            if r.hidden_removed == 1 { "it" } else { "them" }
        ))?;
    }
    if r.removed_freed > 0 {
        report.line(&format!(
            "{} removed through an append-only server {} for good.",
            output::count(r.removed_freed, "archive"),
            if args.dry_run {
                "would be removed"
            } else {
                "removed"
            }
        ))?;
    }
    if r.chunks_unused_kept > 0 {
        report.line(&unused_kept(&r, args.dry_run))?;
    }
    for d in &r.damaged_packs_kept {
        crate::say!("warning: left a pack with damaged data alone: {d} (run cairn check)");
    }
    report.line(&format!(
        "Repository: {}, {} → {}, {}; {} {}.",
        output::count(r.packs_before, "pack"),
        output::size(r.bytes_before),
        output::count(r.packs_after, "pack"),
        output::size(r.bytes_after),
        output::size(r.freed().max(0) as u64),
        if args.dry_run {
            "would be freed"
        } else {
            "freed"
        }
    ))?;
    if r.packs_waiting > 0 {
        report.line(&waiting(&r, args.dry_run))?;
    }
    report.finish(false)?;
    if r.damaged_packs_kept.is_empty() {
        Ok(Status::Ok)
    } else {
        Ok(Status::Warning)
    }
}

/// The unused chunks a compact leaves (or would leave) in packs it does not rewrite, and why.
fn unused_kept(r: &CompactReport, dry_run: bool) -> String {
    let them = if r.chunks_unused_kept == 1 {
        "it"
    } else {
        "them"
    };
    let (where_, later) = if r.rewrites_wait {
        (
            "in packs nothing is rewritten in while a broken lock's grace runs",
            format!("a compact after it frees {them}"),
        )
    } else {
        (
            "in packs below the threshold",
            format!("a later compact frees {them} (--threshold 0 frees {them} now)"),
        )
    };
    format!(
        "{} ({}) {} {where_}; {later}.",
        output::count(r.chunks_unused_kept, "unused chunk"),
        output::size(r.bytes_unused_kept),
        match (dry_run, r.chunks_unused_kept) {
            (true, _) => "would stay",
            (false, 1) => "stays",
            (false, _) => "stay",
        },
    )
}

/// The packs whose space waits for a broken lock's grace, and until when.
fn waiting(r: &CompactReport, dry_run: bool) -> String {
    let until = crate::util::clock::Timestamp::from_system(
        crate::util::clock::now() + std::time::Duration::from_secs(r.wait_seconds),
    );
    format!(
        "{} in {} {} to be freed, by a compact after {} (a lock was removed by another client, whose command may still need them; this client counts the wait on its own clock).",
        output::size(r.bytes_waiting),
        output::count(r.packs_waiting, "pack"),
        if dry_run { "would wait" } else { "wait" },
        output::time(until)
    )
}
