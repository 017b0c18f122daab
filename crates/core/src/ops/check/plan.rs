//! What a check reads of each pack, and in what order: the packs its slice chose are read
//! whole first (least recently verified first), then the others' tables of contents; with
//! `--archive`, only the packs the archives need are read at all.

use std::collections::{BTreeMap, HashSet};
use std::time::Instant;

use super::record::Record;
use super::slice::{self, SliceReport};
use super::{CheckOptions, CheckReport, Scan, Severity};
use crate::archive;
use crate::error::Result;
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::util::id::{ArchiveId, PackId};

pub(super) struct Plan {
    /// The packs to read, in order: the ones read whole first.
    pub order: Vec<(PackId, u64)>,
    /// The packs read whole, every blob verified.
    pub whole: HashSet<PackId>,
    /// No whole read starts after this (`--max-duration`).
    pub deadline: Option<Instant>,
    /// When each pack was verified; a verifying check notes each sound pack it reads whole.
    pub record: Record,
    pub slice: SliceReport,
}

pub(super) fn plan(
    repo: &Repository,
    scan: &Scan,
    listed: &BTreeMap<PackId, u64>,
    opts: &CheckOptions,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<Plan> {
    let mut record = Record::load(repo);
    if record.rejected > 0 {
        report.add(
            Severity::Warning,
            "verification record",
            format!(
                "{} entries of this client's record of verified packs do not authenticate (a torn write, or someone changed it): ignored, those packs count as not verified",
                record.rejected
            ),
        );
    }
    if let Some(why) = &record.unusable {
        report.add(
            Severity::Warning,
            "verification record",
            format!("this client's record of verified packs cannot be read ({why}): ignored, and written anew by a verifying check"),
        );
    }
    let reading = if opts.archives.is_empty() {
        listed.clone()
    } else {
        archive_packs(repo, scan, &opts.archives, listed, interrupt)?
    };
    let chosen = if opts.verify_data {
        slice::choose(&reading, &record, opts.subset)
    } else {
        Vec::new()
    };
    let whole: HashSet<PackId> = chosen.iter().map(|(p, _)| *p).collect();
    // A slice reads only its packs; a whole check (or an archive's) reads every other pack's
    // table of contents after them.
    let mut order = chosen.clone();
    if opts.reads_every_pack() || !opts.archives.is_empty() {
        order.extend(
            reading
                .iter()
                .filter(|(p, _)| !whole.contains(p))
                .map(|(p, s)| (*p, *s)),
        );
    }
    let slice = SliceReport {
        chosen: match (&opts.subset, opts.archives.len()) {
            (Some(s), _) => s.describe(),
            (None, 0) => "all".into(),
            (None, n) => format!(
                "the packs of {}",
                crate::util::progress::count(n as u64, "archive")
            ),
        },
        chosen_packs: chosen.len() as u64,
        chosen_bytes: chosen.iter().map(|(_, s)| s).sum(),
        ..SliceReport::default()
    };
    if opts.verify_data {
        if let Err(e) = record.begin(listed) {
            report.add(
                Severity::Warning,
                "verification record",
                format!("cannot keep this client's record of verified packs in the cache ({e}): what this run verifies is forgotten, and slices are chosen at random among the packs"),
            );
        }
    }
    Ok(Plan {
        order,
        whole,
        deadline: opts.max_duration.map(|d| Instant::now() + d),
        record,
        slice,
    })
}

/// The listed packs that hold the chunks of `archives`: their item streams' and their
/// files'. An item stream that cannot be read is reported when the archive is traced.
fn archive_packs(
    repo: &Repository,
    scan: &Scan,
    archives: &[ArchiveId],
    listed: &BTreeMap<PackId, u64>,
    interrupt: &Interrupt,
) -> Result<BTreeMap<PackId, u64>> {
    let mut packs: HashSet<PackId> = HashSet::new();
    let mut add = |id: &crate::util::id::ChunkId| {
        if let Some((p, _)) = scan.index.stored(id) {
            packs.insert(p);
        }
    };
    for (_, meta) in scan.archives.iter().filter(|(a, _)| archives.contains(a)) {
        meta.items.iter().for_each(|c| add(&c.id));
        for item in archive::items(repo, &scan.index, meta) {
            interrupt.check()?;
            let Ok(item) = item else { break };
            item.chunks.iter().for_each(|c| add(&c.id));
        }
    }
    Ok(listed
        .iter()
        .filter(|(p, _)| packs.contains(p))
        .map(|(p, s)| (*p, *s))
        .collect())
}
