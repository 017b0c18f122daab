//! `cairn create NAME PATH...`

use serde_json::json;

use crate::cli::args::CreateArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::{Error, Result};
use crate::format::compress::Codec;
use crate::source::exclude::Excludes;
use std::path::Path;

use crate::ops::create::paths::{self, PathList};
use crate::ops::create::source::StdinSource;
use crate::ops::create::{self, stored_path, BackupOptions, BackupReport};
use crate::util::progress::Progress;

/// What a backup lists first, while the key is derived (see [`crate::repo::open::open_locked`]):
/// the index and the packs, and the archives when there is no files cache to rebuild.
pub fn first_listings(repo_id: &str, name: &str) -> Vec<&'static str> {
    let cached = crate::source::files_cache::cache_path(repo_id, name).is_some_and(|p| p.exists());
    if cached {
        vec!["index", "packs", "retired"]
    } else {
        vec!["index", "packs", "retired", "archives"]
    }
}

pub fn run(ctx: &Ctx, args: &CreateArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let opts = options(ctx, args)?;
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    if args.dry_run {
        return dry_run(repo, &opts, args, &progress, &interrupt);
    }
    let report = if args.list {
        let mut each = |letter: char, item: &crate::format::item::Item| {
            listed(letter, item, args, &progress);
        };
        create::run_listing(repo, &opts, (&progress, &interrupt), Some(&mut each))?
    } else {
        create::run(repo, &opts, &progress, &interrupt)?
    };
    progress.finish();
    show(&report, args)
}

/// `--list`: one item's status, when `--filter` lets it through: a line on standard output,
/// or with `--log-json` a `file` record on standard error.
fn listed(letter: char, item: &crate::format::item::Item, args: &CreateArgs, progress: &Progress) {
    if args.filter.as_ref().is_some_and(|f| !f.contains(letter)) {
        return;
    }
    if crate::util::log::is_json() {
        let mut record = serde_json::Map::new();
        record.insert("type".into(), "file".into());
        record.insert("status".into(), letter.to_string().into());
        record.insert("path".into(), item.display_path().into());
        crate::util::log::emit(record);
    } else {
        let _ = progress.suspend(|| output::line(&format!("{letter} {}", item.display_path())));
    }
}

/// The backup's options from the arguments: the name checked, the exclude patterns read,
/// the paths gathered (or standard input).
fn options(ctx: &Ctx, args: &CreateArgs) -> Result<BackupOptions> {
    crate::archive::check_name(&args.name)?;
    let mut patterns = args.exclude.clone();
    for f in &args.exclude_from {
        patterns.extend(Excludes::read_pattern_file(f)?);
    }
    let mut folded = args.iexclude.clone();
    for f in &args.iexclude_from {
        folded.extend(Excludes::read_pattern_file(f)?);
    }
    if args.paths.is_empty() && args.files_from.is_none() && args.files_from0.is_none() {
        return Err(Error::invalid(
            "no path to back up: give PATH..., --files-from FILE, or a profile with [create] paths",
        ));
    }
    let stdin = stdin_source(args)?;
    let paths = match stdin {
        Some(_) => Vec::new(),
        None => paths::gather(&args.paths, path_list(args), args.one_file_system)?,
    };
    Ok(BackupOptions {
        name: args.name.clone(),
        comment: args.comment.clone(),
        paths,
        excludes: Excludes::folding(&patterns, &folded, args.exclude_caches)?
            .if_present(args.exclude_if_present.clone(), args.keep_exclude_tags)?
            .larger_than(args.exclude_larger_than),
        one_file_system: args.one_file_system,
        meta: args.meta.options(),
        exclude_nodump: args.exclude_nodump,
        // As typed, a name that is not UTF-8 escaped (std::env::args would panic on it).
        command_line: std::env::args_os()
            .map(|a| crate::util::text::printable_bytes(a.as_encoded_bytes()))
            .collect(),
        threads: ctx.settings.threads(args.threads)?,
        compression: match args.compression.as_deref() {
            Some(spec) => Codec::parse(spec)?,
            None => Codec::default(),
        },
        stdin,
        never: crate::cli::commands::own_dirs(ctx, "written"),
        tags: crate::archive::check_tags(&args.tags)?,
        time: args.timestamp,
    })
}

/// The backup's report: its figures for the summary and the hooks, then the report itself
/// (JSON, `--stats`, or one line), and the exit status its warnings give.
fn show(report: &BackupReport, args: &CreateArgs) -> Result<Status> {
    let s = &report.meta.stats;
    use crate::cli::summary::figure;
    figure("archive", report.meta.name.clone());
    figure("archive_id", report.id.to_hex());
    figure("files", s.files);
    figure("bytes", s.original_size);
    figure("added_bytes", s.deduplicated_size);
    figure(
        "duration_secs",
        (report.duration.as_secs_f64() * 10.0).round() / 10.0,
    );
    figure("warnings", report.warnings.len() as u64);
    if args.json {
        output::line(&serde_json::to_string_pretty(&to_json(report)).unwrap_or_default())?;
    } else if args.stats {
        print_stats(report)?;
    } else {
        output::line(&format!(
            "Archive {} saved (aid:{}): {}, {}, {} added in {:.1} s",
            report.meta.name,
            &report.id.to_hex()[..8],
            output::count(s.files, "file"),
            output::size(s.original_size),
            output::size(s.deduplicated_size),
            report.duration.as_secs_f64()
        ))?;
    }
    if report.warnings.is_empty() {
        Ok(Status::Ok)
    } else {
        crate::say!(
            "cairn: {} (see above); the archive was saved (skipped entries are not in it, changed files are flagged)",
            output::count(report.warnings.len() as u64, "warning")
        );
        Ok(Status::Warning)
    }
}

/// `create --dry-run [--list]`.
fn dry_run(
    repo: &crate::repo::Repository,
    opts: &BackupOptions,
    args: &CreateArgs,
    progress: &Progress,
    interrupt: &crate::repo::signals::Interrupt,
) -> Result<Status> {
    let report = create::dry_run::run(repo, opts, progress, interrupt, |letter, item| {
        if args.list && args.filter.as_ref().is_none_or(|f| f.contains(letter)) {
            progress.suspend(|| output::line(&format!("{letter} {}", item.display_path())))
        } else {
            Ok(())
        }
    })?;
    progress.finish();
    if args.json {
        output::line(
            &serde_json::to_string_pretty(&json!({
                "dry_run": true,
                "items": report.items,
                "files": report.files,
                "bytes": report.bytes,
                "files_read": report.files_read,
                "bytes_read": report.bytes_read,
                "new_bytes": report.new_bytes,
                "new_stored_bytes": report.new_stored,
                "warnings": report.warnings.len(),
            }))
            .unwrap_or_default(),
        )?;
    } else {
        output::line(&format!(
            "Dry run: archive {} would hold {} ({}); {} ({}) would be read, {} of it new ({} stored). Nothing was written.",
            opts.name,
            output::count(report.files, "file"),
            output::size(report.bytes),
            output::count(report.files_read, "file"),
            output::size(report.bytes_read),
            output::size(report.new_bytes),
            output::size(report.new_stored),
        ))?;
    }
    Ok(if report.warnings.is_empty() {
        Status::Ok
    } else {
        Status::Warning
    })
}

/// `-` or `--stdin-from-command`: the one file to make from a stream.
fn stdin_source(args: &CreateArgs) -> Result<Option<StdinSource>> {
    let dash = args.paths.iter().any(|p| p.as_os_str() == "-");
    if !dash && !args.stdin_from_command {
        return Ok(None);
    }
    if args.stdin_from_command && args.paths.is_empty() {
        return Err(Error::invalid(
            "--stdin-from-command needs the command after '--': cairn create NAME --stdin-from-command -- pg_dump mydb",
        ));
    }
    if !args.stdin_from_command && args.paths.len() > 1 {
        return Err(Error::invalid(
            "'-' (standard input) is backed up alone: give no other path with it",
        ));
    }
    if args.files_from.is_some() || args.files_from0.is_some() {
        return Err(Error::invalid(
            "--files-from cannot be combined with standard input",
        ));
    }
    let name = stored_path(Path::new(&args.stdin_name));
    if name.is_empty() {
        return Err(Error::invalid(format!(
            "--stdin-name {:?} is not a file name",
            args.stdin_name
        )));
    }
    let mode = u32::from_str_radix(args.stdin_mode.trim_start_matches("0o"), 8)
        .ok()
        .filter(|m| *m <= 0o7777)
        .ok_or_else(|| {
            Error::invalid(format!(
                "--stdin-mode {:?} is not an octal mode such as 0640",
                args.stdin_mode
            ))
        })?;
    Ok(Some(StdinSource {
        name,
        mode,
        command: args.stdin_from_command.then(|| {
            args.paths
                .iter()
                .map(|p| p.as_os_str().to_owned())
                .collect()
        }),
    }))
}

/// The list file of `--files-from FILE` (one path per line) or `--files-from0 FILE`
/// (NUL-separated), if one is given.
fn path_list(args: &CreateArgs) -> Option<PathList<'_>> {
    match (&args.files_from, &args.files_from0) {
        (Some(f), _) => Some(PathList::Lines(f)),
        (None, Some(f)) => Some(PathList::Nul(f)),
        (None, None) => None,
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
        format!("Time (start):      {}", output::time(r.meta.start)),
        format!("Duration:          {:.2} s", r.duration.as_secs_f64()),
    ];
    lines.extend(crate::cli::output::count_lines(s));
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
