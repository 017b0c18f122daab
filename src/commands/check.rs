//! `cairn check [--verify-data] [--repair] [--json]`

use crate::check::{self, CheckOptions, Severity};
use crate::cli::CheckArgs;
use crate::commands::{output, Ctx, Status};
use crate::error::{Error, Result};
use crate::progress::Progress;

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
    if args.json {
        output::line(&serde_json::to_string_pretty(&report).unwrap_or_default())?;
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
