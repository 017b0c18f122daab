//! `check --repair`: the index rebuilt from the packs (what still authenticates in damaged
//! packs salvaged into new ones), and files whose chunks are gone marked damaged.

use std::collections::{HashMap, HashSet};

use super::{CheckReport, Scan};
use crate::archive::stream::ItemStreamWriter;
use crate::archive::{self, ArchiveMeta};
use crate::error::Result;
use crate::format::blob::BlobKind;
use crate::format::item::{Item, FLAG_DAMAGED};
use crate::index::ChunkIndex;
use crate::pack::format;
use crate::repo::maintenance::Maintenance;
use crate::repo::retire::Mode;
use crate::repo::session::{Commit, IndexReplaced, WriteSession};
use crate::repo::signals::Interrupt;
use crate::repo::Repository;
use crate::store::StoreError;
use crate::util::id::{ArchiveId, ChunkId, PackId};
use crate::util::progress::Progress;

/// The index rebuilt from the packs: every chunk of every sound pack, minus chunks found
/// damaged, plus what still authenticates in damaged packs (salvaged into new packs). It
/// replaces every fragment, and the damaged packs go, through the write session's steps for
/// deleting packs (`repo/session/sweep.rs`). Packs another run was deleting are finished off
/// (their chunks not found elsewhere copied out first); deferred packs are indexed and left to
/// wait; while a broken lock's record is younger than the grace interval, the damaged and
/// redundant packs are deferred rather than deleted (`repo/maintenance.rs`).
pub(super) fn rebuild_index(
    repo: &Repository,
    scan: &mut Scan,
    progress: &Progress,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<()> {
    let state = Maintenance::load(repo)?;
    let retired = state.retired.all();
    let (index, damaged_packs, doomed_packs) = index_sound_packs(repo, scan, &state.doomed());
    // Sound packs all of whose chunks the new index places elsewhere (two sessions stored the
    // same chunks, or a compact was interrupted) hold nothing the index needs: removed with
    // the damaged ones, so that no pack is left that no fragment names.
    let named: HashSet<PackId> = index.iter_stored().map(|(_, p, _)| p).collect();
    let redundant: Vec<PackId> = scan
        .packs
        .iter()
        .filter(|(p, ps)| ps.sound() && !named.contains(p) && !retired.contains(p))
        .map(|(p, _)| *p)
        .collect();
    // Salvage what still authenticates from damaged packs into new packs: the blobs their
    // TOC lists, or, when it does not open, the ones the index placed there. Packs being
    // deleted give up the chunks no other pack has the same way.
    let mut going: Vec<PackId> = damaged_packs.iter().chain(&redundant).copied().collect();
    let mut waiting = Vec::new();
    if state.deferring.is_some() {
        waiting = std::mem::take(&mut going);
    }
    going.extend(&doomed_packs);
    let known: HashSet<ArchiveId> = scan.archives.iter().map(|(id, _)| *id).collect();
    let finished: Vec<String> = state
        .retired
        .records
        .iter()
        .filter(|r| r.mode == Mode::Deleting)
        .map(|r| r.name.clone())
        .collect();
    let fragments = scan.fragments.clone();
    let done = repo.write(index, |session| {
        for (pack, damaged) in damaged_packs
            .iter()
            .map(|p| (p, true))
            .chain(doomed_packs.iter().map(|p| (p, false)))
        {
            interrupt.check()?;
            progress.set(|| format!("salvaging {}", pack.object_name()));
            report
                .repairs
                .push(salvage(repo, session, scan, pack, damaged)?);
        }
        let announced = session.announce(&going, &waiting, &known)?;
        Ok(Commit::index_replacing(
            &fragments,
            going,
            announced,
            finished,
            |_| {},
        ))
    })?;
    state.expire(repo)?;
    say_rebuilt(&done, &redundant, report);
    if !waiting.is_empty() {
        report.repairs.push(format!(
            "{} to remove wait until this client has watched the record of a broken lock for {} (the lock's holder may still need them)",
            crate::util::progress::count(waiting.len() as u64, "pack"),
            crate::repo::lock::human(repo.lock_timing().grace)
        ));
    }
    scan.index = done.index;
    Ok(())
}

/// The index of the sound packs' chunks, the damaged packs and the packs being deleted.
///
/// A chunk that several packs hold is read from a copy that authenticates (its blob opens
/// and its id is recomputed): a pack's table of contents is authentic when the pack is, but
/// says nothing of its blobs, and a client holding the key can write a pack whose contents
/// list the repository's chunks over junk. The others are recorded as second copies (compact
/// frees them), and the packs that end up named by no entry are removed as redundant: so no
/// real copy ever goes before the copy that replaces it has been read. The same holds for a
/// chunk `--verify-data` found bad in one pack: another pack's copy that authenticates is
/// used, and for a chunk a pack being deleted holds. A chunk with one copy, not found bad and
/// in no pack being deleted, is indexed without reading it, as before.
fn index_sound_packs(
    repo: &Repository,
    scan: &mut Scan,
    doomed: &HashSet<PackId>,
) -> (ChunkIndex, Vec<PackId>, Vec<PackId>) {
    let mut copies: HashMap<ChunkId, Vec<(PackId, crate::index::StoredLoc)>> = HashMap::new();
    let mut order: Vec<ChunkId> = Vec::new();
    let mut damaged_packs = Vec::new();
    let mut doomed_packs = Vec::new();
    for (pack, ps) in &scan.packs {
        match &ps.toc {
            // Being deleted by some run (perhaps a stopped one): never kept, never deferred.
            _ if doomed.contains(pack) => doomed_packs.push(*pack),
            Some(entries) if ps.sound() => {
                for e in entries.iter().filter(|e| e.kind == BlobKind::Chunk) {
                    let loc = crate::index::StoredLoc {
                        pack: 0,
                        offset: e.offset,
                        len: e.len,
                        plain_len: e.plain_len,
                    };
                    let held = copies.entry(e.id).or_default();
                    if held.is_empty() {
                        order.push(e.id);
                    }
                    held.push((*pack, loc));
                }
            }
            _ => damaged_packs.push(*pack),
        }
    }
    // Chunks a pack being deleted holds: whether that pack's copy may go is decided by the
    // copy the index keeps, which is then read too (a forged deleting record beside a forged
    // pack would otherwise take the real copies with the doomed packs).
    let in_doomed: HashSet<ChunkId> = doomed_packs
        .iter()
        .filter_map(|p| scan.packs.get(p).and_then(|ps| ps.toc.as_ref()))
        .flat_map(|entries| entries.iter().map(|e| e.id))
        .collect();
    let mut index = ChunkIndex::new();
    for id in order {
        let held = &copies[&id];
        let alone = held.len() == 1 && !scan.bad.contains_key(&id) && !in_doomed.contains(&id);
        let chosen = if alone {
            Some(0)
        } else {
            held.iter()
                .position(|(pack, loc)| repo.copy_authenticates(pack, loc, &id))
        };
        let Some(chosen) = chosen else {
            // No copy authenticates: the chunk stays out (bad), its packs judged as before.
            scan.bad
                .entry(id)
                .or_insert_with(|| "no copy of it authenticates".to_string());
            continue;
        };
        scan.bad.remove(&id);
        let (pack, loc) = held[chosen];
        index.insert_stored(id, pack, loc.offset, loc.len, loc.plain_len, false);
        for (i, (pack, loc)) in held.iter().enumerate() {
            if i != chosen {
                // A second copy: recorded, so that compact can free it.
                index.add_spare(id, *pack, *loc);
            }
        }
    }
    (index, damaged_packs, doomed_packs)
}

/// What a rebuild did, in the report: the new fragment, and every pack rewritten or removed.
fn say_rebuilt(done: &IndexReplaced, redundant: &[PackId], report: &mut CheckReport) {
    report.repairs.push(format!(
        "wrote a rebuilt index ({}) as {}",
        crate::util::progress::count(done.index.len() as u64, "chunk"),
        done.fragment
    ));
    for pack in &done.kept {
        // A salvaged pack can be byte-identical to the original of a damaged one (say, after
        // garbage was appended to it), and so carry its name: it was just rewritten whole.
        report.repairs.push(format!(
            "rewrote damaged pack {} whole from its intact blobs",
            pack.object_name()
        ));
    }
    for pack in &done.deleted {
        report.repairs.push(if redundant.contains(pack) {
            format!(
                "removed pack {}: every chunk in it is stored in another pack",
                pack.object_name()
            )
        } else {
            format!(
                "removed damaged pack {} (its intact chunks were saved)",
                pack.object_name()
            )
        });
    }
}

/// Salvages what still authenticates in one damaged pack into the session's new packs: the
/// blobs its TOC lists or, when it does not open, the ones the index placed there. Says what
/// it did.
fn salvage(
    repo: &Repository,
    session: &mut WriteSession<'_>,
    scan: &mut Scan,
    pack: &PackId,
    damaged: bool,
) -> Result<String> {
    let name = pack.object_name();
    let bytes = match format::read_whole(&**repo.store(), pack) {
        Ok(b) => b,
        Err(crate::error::Error::Store(e @ StoreError::TooLarge { .. })) => {
            return Ok(format!("nothing salvaged from {name}: {e}"));
        }
        Err(e) => return Err(e),
    };
    let candidates: Vec<(ChunkId, u32, u32, u32)> = match &scan.packs[pack].toc {
        Some(entries) => entries
            .iter()
            .filter(|e| e.kind == BlobKind::Chunk)
            .map(|e| (e.id, e.offset, e.len, e.plain_len))
            .collect(),
        None => scan
            .by_pack
            .entries(&scan.index, pack)
            .into_iter()
            .map(|(id, l)| (id, l.offset, l.len, l.plain_len))
            .collect(),
    };
    let mut saved = 0;
    for (id, offset, len, plain_len) in candidates {
        if session.has(&id) {
            continue;
        }
        let Some(b) = bytes.get(offset as usize..offset as usize + len as usize) else {
            continue;
        };
        if repo
            .open_chunk(&id, b, &name)
            .is_ok_and(|p| p.len() == plain_len as usize)
        {
            session.add_blob(id, plain_len, b)?;
            scan.bad.remove(&id);
            saved += 1;
        }
    }
    Ok(if damaged {
        format!("salvaged {saved} intact chunks out of damaged pack {name}")
    } else {
        format!(
            "copied {saved} chunks found nowhere else out of pack {name}, which was being deleted"
        )
    })
}

/// Marks the files whose chunks are gone, by rewriting their archives with the `damaged`
/// flag (the new archive is durable before the old one is removed).
pub(super) fn mark_damaged_files(
    repo: &Repository,
    scan: &mut Scan,
    affected: &HashMap<ArchiveId, HashSet<Vec<u8>>>,
    interrupt: &Interrupt,
    report: &mut CheckReport,
) -> Result<()> {
    let missing =
        |item: &Item, index: &ChunkIndex| item.chunks.iter().any(|c| !index.contains(&c.id));
    for (aid, meta) in &scan.archives {
        if !affected.contains_key(aid) {
            continue;
        }
        interrupt.check()?;
        let mut items: Vec<Item> = match archive::all_items(repo, &scan.index, meta) {
            Ok(i) => i,
            Err(e) => {
                report.repairs.push(format!(
                    "archive {} (aid:{}) not marked: its items cannot be read ({e})",
                    meta.name,
                    &aid.to_hex()[..8]
                ));
                continue;
            }
        };
        let mut marked = 0;
        for item in &mut items {
            if missing(item, &scan.index) && item.flags & FLAG_DAMAGED == 0 {
                item.flags |= FLAG_DAMAGED;
                marked += 1;
            }
        }
        if marked == 0 {
            continue;
        }
        let done = repo.write(std::mem::take(&mut scan.index), |session| {
            let mut w = ItemStreamWriter::new(repo.metadata_chunker()?);
            for item in &items {
                w.push(item, session)?;
            }
            let new_meta = ArchiveMeta {
                items: w.finish(session)?,
                replaces: Some(*aid),
                ..meta.clone()
            };
            let sealed = archive::seal(repo, &new_meta)?;
            Ok(Commit::archive_replacing(*aid, sealed))
        })?;
        let new_id = done.id;
        scan.index = done.index;
        if let Some(w) = done.warning {
            report.repairs.push(w);
        }
        report.repairs.push(format!(
            "archive {}: marked {marked} files as damaged (aid:{} replaces aid:{})",
            meta.name,
            &new_id.to_hex()[..8],
            &aid.to_hex()[..8]
        ));
    }
    Ok(())
}
