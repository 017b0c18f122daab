//! `cairn create NAME PATH...`

use serde_json::json;

use crate::cli::args::CreateArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::{Error, Result};
use crate::format::compress::Codec;
use crate::source::exclude::Excludes;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

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
    let paths = if stdin.is_some() {
        Vec::new()
    } else {
        let mut given = args.paths.clone();
        given.extend(files_from(args)?);
        merge_paths(&given, args.one_file_system)
    };
    if stdin.is_none() && !paths.iter().any(|p| std::fs::symlink_metadata(p).is_ok()) {
        let shown: Vec<String> = paths.iter().map(|p| p.display().to_string()).collect();
        return Err(Error::invalid(format!(
            "none of the paths to back up exists ({}); nothing was saved",
            shown.join(", ")
        )));
    }
    let opts = BackupOptions {
        name: args.name.clone(),
        comment: args.comment.clone(),
        paths,
        excludes: Excludes::folding(&patterns, &folded, args.exclude_caches)?
            .if_present(args.exclude_if_present.clone(), args.keep_exclude_tags)?
            .larger_than(args.exclude_larger_than),
        one_file_system: args.one_file_system,
        meta: args.meta.options(),
        exclude_nodump: args.exclude_nodump,
        command_line: std::env::args().collect(),
        threads: ctx.settings.threads(args.threads)?,
        compression: match args.compression.as_deref() {
            Some(spec) => Codec::parse(spec)?,
            None => Codec::default(),
        },
        stdin,
        never: crate::cli::commands::own_dirs(ctx, "written"),
    };
    let interrupt = ctx.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    if args.dry_run {
        return dry_run(repo, &opts, args, &progress, &interrupt);
    }
    let report = create::run(repo, &opts, &progress, &interrupt)?;
    progress.finish();
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
        output::line(&serde_json::to_string_pretty(&to_json(&report)).unwrap_or_default())?;
    } else if args.stats {
        print_stats(&report)?;
    } else {
        let s = &report.meta.stats;
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
        if args.list {
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

/// `--files-from FILE` (one path per line) and `--files-from0 FILE` (NUL-separated); `-`
/// reads standard input. Empty entries are skipped.
fn files_from(args: &CreateArgs) -> Result<Vec<PathBuf>> {
    use std::io::Read;
    let (file, sep) = match (&args.files_from, &args.files_from0) {
        (Some(f), _) => (f, b'\n'),
        (None, Some(f)) => (f, 0u8),
        (None, None) => return Ok(Vec::new()),
    };
    let mut bytes = Vec::new();
    if file.as_os_str() == "-" {
        std::io::stdin()
            .read_to_end(&mut bytes)
            .map_err(|e| Error::io("<stdin>", e))?;
    } else {
        bytes = std::fs::read(file).map_err(|e| Error::io(file, e))?;
    }
    let paths: Vec<PathBuf> = bytes
        .split(|b| *b == sep)
        .map(|l| {
            if sep == b'\n' {
                l.strip_suffix(b"\r").unwrap_or(l)
            } else {
                l
            }
        })
        .filter(|l| !l.is_empty())
        .map(|l| PathBuf::from(std::ffi::OsStr::from_bytes(l)))
        .collect();
    if paths.is_empty() && args.paths.is_empty() {
        return Err(Error::invalid(format!(
            "{} lists no path to back up; nothing was saved",
            file.display()
        )));
    }
    Ok(paths)
}

/// The paths to back up, each once: a path given twice (`./b`, `b/`, `b`) is kept the first
/// time, and a path that the walk of another given directory reaches anyway (`b/c` with `b`)
/// is dropped. A path is only dropped when the walk really reaches it: through directories,
/// not symlinks, and on the same file system with `--one-file-system`.
fn merge_paths(paths: &[PathBuf], one_file_system: bool) -> Vec<PathBuf> {
    let keys: Vec<Vec<u8>> = paths.iter().map(|p| stored_path(p)).collect();
    let mut kept = Vec::new();
    for (i, p) in paths.iter().enumerate() {
        let again = keys[..i].contains(&keys[i]);
        let inside = paths.iter().enumerate().any(|(j, a)| {
            j != i && keys[j] != keys[i] && reaches(a, &keys[j], &keys[i], one_file_system)
        });
        if !again && !inside {
            kept.push(p.clone());
        }
    }
    kept
}

/// Whether walking `root` (stored as `root_key`) reaches the path stored as `key`.
fn reaches(root: &Path, root_key: &[u8], key: &[u8], one_file_system: bool) -> bool {
    let rel = if root_key.is_empty() {
        key
    } else {
        match key.strip_prefix(root_key) {
            Some(rest) if rest.first() == Some(&b'/') => &rest[1..],
            _ => return false,
        }
    };
    let Ok(mut md) = std::fs::symlink_metadata(root) else {
        return false;
    };
    let root_dev = md.dev();
    // Every directory on the way, from the root down to the path's parent, must be one the
    // walk descends into.
    let comps: Vec<&[u8]> = rel.split(|b| *b == b'/').collect();
    let mut dir = root.to_path_buf();
    for c in &comps {
        if !md.is_dir() || (one_file_system && md.dev() != root_dev) {
            return false;
        }
        dir.push(std::ffi::OsStr::from_bytes(c));
        md = match std::fs::symlink_metadata(&dir) {
            Ok(m) => m,
            // Missing (or unreadable): kept, so that the backup names it in a warning.
            Err(_) => return false,
        };
    }
    !one_file_system || md.dev() == root_dev
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
