//! `cairn rename ARCHIVE NEWNAME` and `cairn comment ARCHIVE TEXT`: the archive written again
//! with another label (a new id), the old one removed in the same commit.

use crate::archive;
use crate::cli::args::{CommentArgs, RenameArgs, TagArgs};
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::cli::report::Report;
use crate::error::{Error, Result};
use crate::ops::rewrite::{self, Change};
use crate::util::progress::Progress;

pub fn rename(ctx: &Ctx, args: &RenameArgs) -> Result<Status> {
    archive::check_name(&args.new_name)?;
    let change = Change {
        name: Some(args.new_name.clone()),
        ..Change::default()
    };
    let mut report = Report::new(args.json);
    let status = relabel(ctx, &args.archive, change, "Renamed", &mut report)?;
    report.figure("changed", report.not("unchanged"));
    report.finish(true)?;
    Ok(status)
}

pub fn comment(ctx: &Ctx, args: &CommentArgs) -> Result<Status> {
    if args.text.chars().any(|c| c.is_control() && c != '\t') {
        return Err(Error::invalid(
            "a comment cannot contain control characters (newlines among them)",
        ));
    }
    let change = Change {
        comment: Some(args.text.clone()),
        ..Change::default()
    };
    let mut report = Report::new(args.json);
    let status = relabel(ctx, &args.archive, change, "Commented", &mut report)?;
    report.figure("changed", report.not("unchanged"));
    report.finish(true)?;
    Ok(status)
}

pub fn tag(ctx: &Ctx, args: &TagArgs) -> Result<Status> {
    let set = match &args.set {
        Some(s) if s.trim().is_empty() => Some(Vec::new()),
        Some(s) => Some(archive::check_tags(std::slice::from_ref(s))?),
        None => None,
    };
    let (add, remove) = (
        archive::check_tags(&args.add)?,
        archive::check_tags(&args.remove)?,
    );
    // Every archive named is found before any is changed: a typo in the last name must not
    // leave the first ones changed and unreported.
    for spec in &args.archives {
        archive::select(&ctx.repo, spec)?;
    }
    let mut status = Status::Ok;
    let mut report = Report::new(args.json);
    for spec in &args.archives {
        let (_, meta) = archive::select(&ctx.repo, spec)?;
        let mut tags = set.clone().unwrap_or(meta.tags);
        tags.retain(|t| !remove.contains(t));
        tags.extend(add.iter().cloned());
        tags.sort();
        tags.dedup();
        let change = Change {
            tags: Some(tags),
            ..Change::default()
        };
        if relabel(ctx, spec, change, "Tagged", &mut report)? == Status::Warning {
            status = Status::Warning;
        }
    }
    report.figure("changed", report.not("unchanged"));
    report.finish(true)?;
    Ok(status)
}

fn relabel(
    ctx: &Ctx,
    spec: &str,
    mut change: Change,
    did: &str,
    report: &mut Report,
) -> Result<Status> {
    let repo = &ctx.repo;
    let list = archive::load_all(repo)?;
    archive::refuse_hidden(&list, spec)?;
    archive::finish_replaced(repo, &list)?;
    let (id, meta) = archive::select(repo, spec)?;
    let before = format!("{} {}", meta.name, output::time(meta.start));
    let index = crate::ops::create::load_index(repo, &Progress::hidden())?;
    let interrupt = ctx.interrupt()?;
    let (_, done) = rewrite::rewrite(
        repo,
        (index, None),
        (id, meta),
        &mut change,
        false,
        &interrupt,
        |_| {},
    )?;
    let old = &id.to_hex()[..8];
    let warned = done.warning.clone();
    let action = match done.new {
        Some(_) => did.to_ascii_lowercase(),
        None => "unchanged".to_string(),
    };
    let mut more = vec![
        ("tags", done.meta.tags.clone().into()),
        ("comment", done.meta.comment.clone().into()),
    ];
    if let Some(new) = done.new {
        more.push(("new_id", new.to_hex().into()));
    }
    report.archive(&action, (&id, &done.meta), &more);
    match done.new {
        Some(new) => report.line(&format!(
            "{did} archive {before}: aid:{} replaces aid:{old}",
            &new.to_hex()[..8]
        ))?,
        None => report.line(&format!(
            "Archive {before} (aid:{old}) already has that {}; left as it is",
            match did {
                "Renamed" => "name",
                "Tagged" => "tags",
                _ => "comment",
            }
        ))?,
    }
    Ok(super::warned(warned))
}
