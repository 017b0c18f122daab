//! `cairn prune --keep-…`: delete the archives the keep rules do not keep, per name.

use std::collections::{BTreeMap, HashSet};

use globset::GlobMatcher;

use crate::archive;
use crate::cli::args::{GroupKey, PruneArgs};
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::cli::report::Report;
use crate::error::{Error, Result};
use crate::format::item::Timestamp;
use crate::ops::prune::{self, KeepRules};
use crate::util::id::ArchiveId;

pub fn run(ctx: &Ctx, args: &PruneArgs) -> Result<Status> {
    let rules = rules(args)?;
    let glob = matcher(args)?;
    let list = if args.dry_run {
        archive::load_all(&ctx.repo)?
    } else {
        archive::load_all_finishing(&ctx.repo)?
    };
    if !list.damaged.is_empty() {
        return Err(Error::invalid(format!(
            "{} cannot be read; run cairn check before pruning",
            output::count(list.damaged.len() as u64, "archive")
        )));
    }
    // Archives written through an append-only server (as the owner sees them) form series of
    // their own, so that none pushes an archive the owner wrote out of the keep rules, and
    // pruning one sets it aside rather than deleting it (`Repository::set_archive_aside`).
    let appended: HashSet<ArchiveId> = crate::repo::removed::appended(&**ctx.repo.store())?
        .into_iter()
        .collect();
    let filter = crate::cli::chosen::Filter::of(&args.filter)?;
    let considered: Vec<_> = list
        .archives
        .iter()
        .filter(|(_, m)| filter.matches(m) && glob.as_ref().is_none_or(|g| g.is_match(&m.name)))
        .collect();
    let series = series(&considered, &args.group_by.0, &appended);
    let mut report = Report::new(args.json);
    if series.is_empty() && (filter.is_some() || args.glob.is_some()) {
        // Nothing to prune is a result too (the warning below says why).
        figures(&mut report, args.dry_run, (0, 0, 0));
    }
    if series.is_empty() && filter.is_some() {
        crate::say!(
            "warning: no archive has the --tag, --host or --user given: nothing was pruned"
        );
        report.finish(true)?;
        return Ok(Status::Warning);
    }
    if let (Some(g), true) = (&args.glob, series.is_empty()) {
        let names = list.archives.iter().map(|(_, m)| m.name.as_str());
        crate::say!(
            "warning: --glob {g:?} matches no archive{}: nothing was pruned",
            crate::util::text::did_you_mean(g, names)
        );
        report.finish(true)?;
        return Ok(Status::Warning);
    }
    let (counts, removed) = apply(ctx, args, (&series, &appended), &rules, &mut report)?;
    ctx.repo.confirm_removals(&removed)?;
    said(ctx, args.dry_run, counts, &mut report)?;
    report.finish(true)?;
    Ok(Status::Ok)
}

/// Decides each series by the keep rules and prunes (or, with --dry-run, names) what they do
/// not keep: archives written through an append-only server are set aside, not deleted.
/// Returns how many were pruned, kept and set aside, and the removals to confirm.
fn apply(
    ctx: &Ctx,
    args: &PruneArgs,
    (series, appended): (&Series, &HashSet<ArchiveId>),
    rules: &KeepRules,
    report: &mut Report,
) -> Result<((u64, u64, u64), Vec<String>)> {
    let mut set_aside = 0u64;
    let now = Timestamp::now();
    let (mut kept, mut pruned) = (0u64, 0u64);
    let mut removed = Vec::new();
    for archives in series.values() {
        let keys: Vec<_> = archives.iter().map(|(id, m)| (**id, m.start)).collect();
        let decisions = prune::decide(&keys, rules, now, &chrono::Local);
        for ((id, meta), (_, why)) in archives.iter().zip(decisions) {
            let what = format!(
                "{:<24} {}  aid:{}",
                meta.name,
                output::time(meta.start),
                &id.to_hex()[..8]
            );
            match why {
                Some(reason) => {
                    kept += 1;
                    report.archive("kept", (id, meta), &[("reason", reason.to_string().into())]);
                    if args.list {
                        report.line(&format!("Keeping  {what}  ({reason})"))?;
                    }
                }
                None => {
                    pruned += 1;
                    if args.dry_run {
                        report.archive("would-prune", (id, meta), &[]);
                        report.line(&format!("Would prune {what}"))?;
                    } else {
                        let action = if appended.contains(id) {
                            ctx.repo.set_archive_aside(id)?;
                            set_aside += 1;
                            "set-aside"
                        } else {
                            ctx.repo.delete_archive(id)?;
                            "pruned"
                        };
                        report.archive(action, (id, meta), &[]);
                        removed.push(format!("aid:{}", &id.to_hex()[..8]));
                        if args.list {
                            report.line(&format!("Pruned   {what}"))?;
                        }
                    }
                }
            }
        }
    }
    Ok(((pruned, kept, set_aside), removed))
}

/// The figures of the result: how many archives were pruned, kept and set aside.
fn figures(report: &mut Report, dry_run: bool, (pruned, kept, set_aside): (u64, u64, u64)) {
    report.figure("dry_run", dry_run);
    report.figure("pruned", pruned);
    report.figure("kept", kept);
    report.figure("set_aside", set_aside);
}

/// The closing lines: how many archives were pruned and kept, and those set aside.
fn said(
    ctx: &Ctx,
    dry_run: bool,
    (pruned, kept, set_aside): (u64, u64, u64),
    report: &mut Report,
) -> Result<()> {
    figures(report, dry_run, (pruned, kept, set_aside));
    report.line(&format!(
        "{pruned} archives {}, {kept} kept.{}{}",
        if dry_run { "would be pruned" } else { "pruned" },
        if dry_run || pruned == 0 { "" } else { " " },
        if dry_run || pruned == 0 {
            ""
        } else {
            crate::cli::output::after_removal(&ctx.repo)
        }
    ))?;
    if set_aside > 0 {
        report.line(&format!(
            "{} written through an append-only server {} set aside, not deleted: cairn list --removed shows them, cairn undelete brings them back, compact --removed-older-than frees them.",
            output::count(set_aside, "archive"),
            if set_aside == 1 { "was" } else { "were" }
        ))?;
    }
    Ok(())
}

/// The archives considered, by series: by the keys of `--group-by` (each name on its own by
/// default), and the archives written through an append-only server apart from the owner's.
type Series<'a> = BTreeMap<(String, bool), Vec<(&'a ArchiveId, &'a archive::ArchiveMeta)>>;

fn series<'a>(
    archives: &[&'a (ArchiveId, archive::ArchiveMeta)],
    keys: &[GroupKey],
    appended: &HashSet<ArchiveId>,
) -> Series<'a> {
    let mut series: Series<'a> = BTreeMap::new();
    for (id, meta) in archives.iter().map(|a| (&a.0, &a.1)) {
        series
            .entry((group_of(meta, keys), appended.contains(id)))
            .or_default()
            .push((id, meta));
    }
    series
}

/// The series `meta` belongs to, by `keys`: e.g. `host=laptop tags=daily,home`.
fn group_of(meta: &archive::ArchiveMeta, keys: &[GroupKey]) -> String {
    keys.iter()
        .map(|k| match k {
            GroupKey::Name => format!("name={}", meta.name),
            GroupKey::Host => format!("host={}", meta.hostname),
            GroupKey::User => format!("user={}", meta.username),
            GroupKey::Tags => format!("tags={}", meta.tags.join(",")),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

/// The keep rules the arguments give; none is an error (every archive would go).
fn rules(args: &PruneArgs) -> Result<KeepRules> {
    let rules = KeepRules {
        within: args
            .keep_within
            .as_deref()
            .map(prune::parse_interval)
            .transpose()?,
        last: args.keep_last,
        minutely: args.keep_minutely,
        hourly: args.keep_hourly,
        daily: args.keep_daily,
        weekly: args.keep_weekly,
        monthly: args.keep_monthly,
        yearly: args.keep_yearly,
    };
    if rules.is_empty() {
        return Err(Error::invalid(
            "no keep rule given (--keep-last, --keep-within, --keep-daily, …): refusing to delete every archive",
        ));
    }
    Ok(rules)
}

/// `--glob`: the archive names pruned, if not all.
fn matcher(args: &PruneArgs) -> Result<Option<GlobMatcher>> {
    args.glob
        .as_deref()
        .map(crate::cli::chosen::glob)
        .transpose()
}
