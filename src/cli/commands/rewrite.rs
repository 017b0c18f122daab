//! `cairn rewrite ARCHIVE... --exclude GLOB... [--comment TEXT] [--dry-run [--list]]`

use crate::archive;
use crate::cli::args::RewriteArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::cli::report::Report;
use crate::error::{Error, Result};
use crate::ops::extract::Selection;
use crate::ops::rewrite::{self, Change, Rewritten};
use crate::source::exclude::Excludes;
use crate::util::clock::Timestamp;
use crate::util::id::ArchiveId;
use crate::util::progress::Progress;

pub fn run(ctx: &Ctx, args: &RewriteArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let patterns = patterns(args)?;
    let list = archive::load_all(repo)?;
    for spec in &args.archives {
        archive::refuse_hidden(&list, spec)?;
    }
    if !args.dry_run {
        archive::finish_replaced(repo, &list)?;
    }
    let mut chosen = match args.archives.is_empty() {
        true => archive::Selected::default(),
        false => archive::select_many(repo, &args.archives, "the repository")?,
    };
    if let Some(g) = &args.glob {
        for (id, meta) in crate::cli::chosen::matching(&list.archives, g)? {
            if !chosen.archives.iter().any(|(i, _)| *i == id) {
                chosen.archives.push((id, meta));
            }
        }
    }
    let reading = repo.load_index_for_reading()?.0;
    let mut index = if args.dry_run {
        crate::index::ChunkIndex::new()
    } else {
        crate::ops::create::load_index(repo, &Progress::hidden())?
    };
    let interrupt = ctx.interrupt()?;
    // The patterns are not kept: a secret's file name is what a rewrite often removes.
    let note = format!("rewritten {}", output::time(Timestamp::now()));
    let mut written = 0u64;
    let mut warnings = Vec::new();
    let mut report = Report::new(args.json);
    for (id, meta) in chosen.archives {
        let before = format!("{} {}", meta.name, output::time(meta.start));
        let mut change = Change {
            remove: (!patterns.is_empty())
                .then(|| Selection::default().excluding(&patterns))
                .transpose()?,
            comment: args.comment.clone(),
            note: Some(note.clone()),
            ..Change::default()
        };
        let mut listed = Ok(());
        let (after, done) = rewrite::rewrite(
            repo,
            (index, Some(&reading)),
            (id, meta),
            &mut change,
            args.dry_run,
            &interrupt,
            |item| {
                if args.list && listed.is_ok() {
                    listed = report.line(&format!("remove {}", item.display_path()));
                }
            },
        )?;
        listed?;
        index = after;
        warnings.extend(done.warning.clone());
        if done.new.is_some() || (args.dry_run && done.changed) {
            written += 1;
        }
        report.line(&outcome(&before, &id, &done))?;
        report.archive(action(&done), (&id, &done.meta), &rewritten(&done));
    }
    report.figure("dry_run", args.dry_run);
    report.figure("rewritten", written);
    if written > 0 && !args.dry_run {
        report.line("Run cairn compact to free the space the removed items used.")?;
    }
    report.finish(true)?;
    let mut status = Status::Ok;
    for w in warnings {
        status = super::warned(Some(w));
    }
    Ok(status)
}

/// The exclude patterns (`--exclude`, `--exclude-from`), each checked before anything is
/// written; none and no `--comment` is an error (nothing to change).
fn patterns(args: &RewriteArgs) -> Result<Vec<String>> {
    let mut patterns = args.exclude.clone();
    for f in &args.exclude_from {
        patterns.extend(Excludes::read_pattern_file(f)?);
    }
    if patterns.is_empty() && args.comment.is_none() {
        return Err(Error::invalid(
            "nothing to change: give --exclude GLOB, --exclude-from FILE or --comment TEXT",
        ));
    }
    // Every pattern is checked before anything is written.
    Selection::default().excluding(&patterns)?;
    Ok(patterns)
}

/// What was done with one archive, for `--json`.
pub fn action(done: &Rewritten) -> &'static str {
    match (done.new, done.changed) {
        (Some(_), _) => "rewritten",
        (None, true) => "would-rewrite",
        (None, false) => "unchanged",
    }
}

/// The fields of one archive's entry besides its own: the archive written in its place and
/// what was left out.
pub fn rewritten(done: &Rewritten) -> Vec<(&'static str, serde_json::Value)> {
    let mut more = vec![
        ("removed_items", done.removed.into()),
        ("removed_bytes", done.removed_bytes.into()),
    ];
    if let Some(new) = done.new {
        more.push(("new_id", new.to_hex().into()));
    }
    more
}

/// What came of one archive (`before`: its name and time; `id`: its id before the rewrite).
fn outcome(before: &str, id: &ArchiveId, done: &Rewritten) -> String {
    let removed = format!(
        "{} ({}) removed",
        output::count(done.removed, "item"),
        output::size(done.removed_bytes)
    );
    let old = &id.to_hex()[..8];
    match (done.new, done.changed) {
        (Some(new), _) => format!(
            "Rewrote archive {before}: aid:{} replaces aid:{old}; {removed}",
            &new.to_hex()[..8]
        ),
        (None, true) => format!("Would rewrite archive {before} (aid:{old}): {removed}"),
        (None, false) => {
            format!("Archive {before} (aid:{old}): nothing to change, left as it is")
        }
    }
}
