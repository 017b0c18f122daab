//! `cairn check [--verify-data] [--repair] [--repository-only] [--json]`

use crate::check::{self, CheckOptions, CheckReport, Severity};
use crate::cli::CheckArgs;
use crate::commands::{output, Ctx, Status};
use crate::error::{Error, Result};
use crate::lock::Lock;
use crate::progress::Progress;
use crate::signals::Interrupt;
use crate::store::Store;

pub fn run(ctx: &Ctx, args: &CheckArgs) -> Result<Status> {
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let opts = CheckOptions {
        verify_data: args.verify_data,
        repair: args.repair,
        threads: crate::parallel::threads(args.threads)?,
    };
    let report = check::run(&ctx.repo, opts, &progress, &interrupt)?;
    progress.finish();
    show(&report, args)
}

/// `check --repository-only`: content addresses and clear framing, without the key.
pub fn run_repository_only(store: &dyn Store, lock: &Lock, args: &CheckArgs) -> Result<Status> {
    let interrupt = Interrupt::install()?.watch_lock(lock.lost_flag());
    let progress = Progress::new(args.progress.choice());
    let threads = crate::parallel::threads(args.threads)?;
    let report = check::addresses::run(store, threads, &progress, &interrupt)?;
    progress.finish();
    show(&report, args)
}

fn show(report: &CheckReport, args: &CheckArgs) -> Result<Status> {
    if args.json {
        output::line(&serde_json::to_string_pretty(report).unwrap_or_default())?;
    } else {
        for f in &report.findings {
            let tag = match f.severity {
                Severity::Warning => "warning",
                Severity::Error => "error",
            };
            output::line(&format!("{tag}: {}: {}", f.object, f.message))?;
        }
        if !report.affected.is_empty() {
            output::line("Files using missing or damaged data:")?;
            for a in &report.affected {
                output::line(&format!(
                    "  {} (aid:{}): {} ({} bad chunks)",
                    a.archive,
                    &a.archive_id[..8],
                    a.path,
                    a.bad_chunks
                ))?;
            }
        }
        for r in &report.repairs {
            output::line(&format!("repaired: {r}"))?;
        }
        if args.repository_only {
            output::line(&format!(
                "Checked the content addresses of {} archives and {} packs ({}), without the key: {} errors, {} warnings",
                report.archives,
                report.packs,
                output::size(report.pack_bytes),
                report.errors(),
                report.warnings()
            ))?;
        } else {
            output::line(&format!(
                "Checked {} archives, {} packs ({}), {} chunks{}: {} errors, {} warnings",
                report.archives,
                report.packs,
                output::size(report.pack_bytes),
                report.chunks,
                if args.verify_data {
                    format!(" ({} verified)", report.chunks_verified)
                } else {
                    String::new()
                },
                report.errors(),
                report.warnings()
            ))?;
        }
    }
    match report.exit_code() {
        0 => Ok(Status::Ok),
        1 => Ok(Status::Warning),
        _ => Err(Error::invalid(if args.repair {
            "the repository had damage (see above; repairs were made where possible — run check again)"
        } else {
            "the repository is damaged (see above)"
        })),
    }
}
