//! `cairn check [--verify-data] [--repair] [--repository-only] [--json]`

use crate::cli::args::CheckArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::cli::settings::Settings;
use crate::error::{Error, Result};
use crate::ops::check::{self, CheckOptions, CheckReport, Severity};
use crate::repo::lock::Lock;
use crate::repo::signals::Interrupt;
use crate::store::Store;
use crate::util::progress::Progress;

pub fn run(ctx: &Ctx, args: &CheckArgs) -> Result<Status> {
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let archives = args
        .archive
        .iter()
        .map(|spec| crate::archive::select(&ctx.repo, spec).map(|(id, _)| id))
        .collect::<Result<Vec<_>>>()?;
    let mut archives = archives;
    if let Some(g) = &args.glob {
        let list = crate::archive::load_all(&ctx.repo)?;
        let found = crate::cli::chosen::matching(&list.archives, g)?;
        archives.extend(found.into_iter().map(|(id, _)| id));
    }
    // The same archive named twice (by name and by id) is checked once.
    archives.sort();
    archives.dedup();
    let opts = CheckOptions {
        verify_data: args.verify_data || args.subset.is_some() || args.max_duration.is_some(),
        repair: args.repair,
        threads: ctx.settings.readers(args.threads, &**ctx.repo.store())?,
        subset: args.subset,
        max_duration: args.max_duration,
        archives,
    };
    let report = check::run(&ctx.repo, opts, &progress, &interrupt)?;
    progress.finish();
    show(&report, args)
}

/// `check --repository-only`: content addresses and clear framing, without the key.
pub fn run_repository_only(
    store: &dyn Store,
    lock: Option<&Lock>,
    settings: &Settings,
    args: &CheckArgs,
) -> Result<Status> {
    let interrupt = Interrupt::install()?;
    let interrupt = match lock {
        Some(lock) => interrupt.watch_lock(lock.health()),
        None => interrupt,
    };
    let progress = Progress::new(args.progress.choice());
    let threads = settings.threads(args.threads)?;
    let report = check::addresses::run(store, threads, &progress, &interrupt)?;
    progress.finish();
    show(&report, args)
}

fn tag(severity: Severity) -> &'static str {
    match severity {
        Severity::Info => "info",
        Severity::Warning => "warning",
        Severity::Error => "error",
    }
}

/// Says the report (as JSON with `--json`); the exit status its findings give.
fn show(report: &CheckReport, args: &CheckArgs) -> Result<Status> {
    figures(report);
    if args.json {
        output::line(&serde_json::to_string_pretty(report).unwrap_or_default())?;
    } else {
        print_text(report, args)?;
    }
    match report.exit_code() {
        0 => Ok(Status::Ok),
        1 => Ok(Status::Warning),
        _ => Err(Error::invalid(if args.repair {
            "the repository is still damaged after the repair (see above)"
        } else {
            "the repository is damaged (see above)"
        })),
    }
}

/// The check's figures, for the summary and the hooks.
fn figures(report: &CheckReport) {
    // After a repair, the state it left is what counts.
    let last = report.after_repair.as_deref().unwrap_or(report);
    use crate::cli::summary::figure;
    figure("archives", last.archives);
    figure("packs", last.packs);
    figure("pack_bytes", last.pack_bytes);
    figure("chunks", last.chunks);
    figure("chunks_verified", report.chunks_verified);
    if let Some(s) = &report.slice {
        figure("packs_verified", s.verified_packs);
        figure("bytes_verified", s.verified_bytes);
        figure("packs_left", s.left_packs);
    }
    if let Some(c) = &report.coverage {
        figure("packs_never_verified", c.never_packs);
        if let Some(age) = c.oldest_age_secs {
            figure("oldest_verified_secs", age);
        }
    }
    figure("unused_bytes", last.unused_bytes);
    figure("errors", last.errors() as u64);
    figure("warnings", last.warnings() as u64);
    figure("repairs", report.repairs.len() as u64);
}

/// The report for people: the findings, the files that use damaged data, the repairs, and a
/// last line with the counts.
fn print_text(report: &CheckReport, args: &CheckArgs) -> Result<()> {
    for f in &report.findings {
        output::line(&format!("{}: {}: {}", tag(f.severity), f.object, f.message))?;
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
    if let Some(after) = &report.after_repair {
        output::line(&format!(
            "Found {} and {}; after the repair:",
            output::count(report.errors() as u64, "error"),
            output::count(report.warnings() as u64, "warning")
        ))?;
        for f in &after.findings {
            output::line(&format!(
                "  {}: {}: {}",
                tag(f.severity),
                f.object,
                f.message
            ))?;
        }
    }
    if args.repository_only {
        output::line(&format!(
            "Checked the content addresses of {} and {} ({}), without the key: {}, {}",
            output::count(report.archives, "archive"),
            output::count(report.packs, "pack"),
            output::size(report.pack_bytes),
            output::count(report.errors() as u64, "error"),
            output::count(report.warnings() as u64, "warning")
        ))?;
    } else {
        // After a repair, the state it left is what counts.
        let final_state = report.after_repair.as_deref().unwrap_or(report);
        output::line(&format!(
            "Checked {}, {} ({}), {}{}: {}, {}",
            output::count(final_state.archives, "archive"),
            output::count(final_state.packs, "pack"),
            output::size(final_state.pack_bytes),
            output::count(final_state.chunks, "chunk"),
            if report.slice.is_some() {
                format!(" ({} verified)", report.chunks_verified)
            } else {
                String::new()
            },
            output::count(final_state.errors() as u64, "error"),
            output::count(final_state.warnings() as u64, "warning")
        ))?;
        print_verified(report)?;
    }
    Ok(())
}

/// What this run read whole, and how much of the repository this client has verified.
fn print_verified(report: &CheckReport) -> Result<()> {
    if let Some(s) = &report.slice {
        output::line(&format!(
            "Read whole and verified {} of {} ({}): {} of {}",
            output::count(s.verified_packs, "pack"),
            output::count(s.chosen_packs, "pack"),
            s.chosen,
            output::size(s.verified_bytes),
            output::size(s.chosen_bytes)
        ))?;
        if s.left_packs > 0 {
            output::line(&format!(
                "Stopped before {} ({}): the next run verifies them first",
                output::count(s.left_packs, "pack"),
                output::size(s.left_bytes)
            ))?;
        }
    }
    if let Some(c) = &report.coverage {
        output::line(&output::coverage_line(c))?;
    }
    Ok(())
}
