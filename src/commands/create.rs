//! `cairn create NAME PATH...`

use serde_json::json;

use crate::cli::CreateArgs;
use crate::commands::{output, Ctx, Status};
use crate::error::{Error, Result};
use crate::exclude::Excludes;
use crate::ops::create::{self, BackupOptions, BackupReport};
use crate::progress::Progress;

/// Archive names are free text, but not empty, not `aid:…` (that selects by id) and without
/// control characters.
pub fn validate_name(name: &str) -> Result<()> {
    if name.trim().is_empty() {
        return Err(Error::invalid("the archive name is empty"));
    }
    if name.starts_with("aid:") {
        return Err(Error::invalid(
            "archive names cannot start with 'aid:' (that prefix selects archives by id)",
        ));
    }
    if name.chars().any(char::is_control) {
        return Err(Error::invalid(
            "archive names cannot contain control characters",
        ));
    }
    Ok(())
}

pub fn run(ctx: &Ctx, args: &CreateArgs) -> Result<Status> {
    let repo = &ctx.repo;
    validate_name(&args.name)?;
    let mut patterns = args.exclude.clone();
    for f in &args.exclude_from {
        patterns.extend(Excludes::read_pattern_file(f)?);
    }
    let opts = BackupOptions {
        name: args.name.clone(),
        comment: args.comment.clone(),
        paths: args.paths.clone(),
        excludes: Excludes::new(&patterns, args.exclude_caches)?,
        one_file_system: args.one_file_system,
        command_line: std::env::args().collect(),
        threads: ctx.settings.threads(args.threads)?,
    };
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let report = create::run(repo, &opts, &progress, &interrupt)?;
    progress.finish();
    if args.json {
        output::line(&serde_json::to_string_pretty(&to_json(&report)).unwrap_or_default())?;
    } else if args.stats {
        print_stats(&report)?;
    } else {
        let s = &report.meta.stats;
        output::line(&format!(
            "Archive {} saved (aid:{}): {} files, {}, {} added in {:.1} s",
            report.meta.name,
            &report.id.to_hex()[..8],
            s.files,
            output::size(s.original_size),
            output::size(s.deduplicated_size),
            report.duration.as_secs_f64()
        ))?;
    }
    if report.warnings.is_empty() {
        Ok(Status::Ok)
    } else {
        eprintln!(
            "cairn: {} warnings (see above); the archive was saved (skipped entries are not in it, changed files are flagged)",
            report.warnings.len()
        );
        Ok(Status::Warning)
    }
}

fn to_json(r: &BackupReport) -> serde_json::Value {
    json!({
        "archive": {
            "name": r.meta.name,
            "id": r.id.to_hex(),
            "start": r.meta.start.rfc3339(),
            "end": r.meta.end.rfc3339(),
            "duration": r.duration.as_secs_f64(),
            "hostname": r.meta.hostname,
            "username": r.meta.username,
            "comment": r.meta.comment,
            "stats": r.meta.stats,
        },
        "warnings": r.warnings,
    })
}

fn print_stats(r: &BackupReport) -> Result<()> {
    let s = &r.meta.stats;
    let mut lines = vec![
        format!("Archive name:      {}", r.meta.name),
        format!("Archive id:        {}", r.id),
        format!("Time (start):      {}", r.meta.start.display_local()),
        format!("Duration:          {:.2} s", r.duration.as_secs_f64()),
    ];
    lines.extend(super::info::count_lines(s));
    lines.extend([
        String::new(),
        format!(
            "{:18}{:>16}{:>18}{:>20}",
            "", "Original size", "Compressed size", "Deduplicated size"
        ),
        format!(
            "{:18}{:>16}{:>18}{:>20}",
            "This archive:",
            output::size(s.original_size),
            output::size(s.compressed_size),
            output::size(s.deduplicated_size)
        ),
    ]);
    output::lines(&lines)
}
