//! Archives: one object per backup, `archives/<id>`, whose presence is the commit point
//! (the object's layout: [`crate::format::archive`]). Here: sealing one
//! ([`seal`]), writing its item stream ([`stream`]), choosing one by name ([`select`]) and
//! reading files' contents back ([`content`]); reading archives from the repository is
//! [`crate::repo::archives`], re-exported here.

pub mod content;
pub mod stream;

pub use crate::format::archive::{
    check_object, ArchiveMeta, ArchiveStats, MAX_OBJECT_LEN, OBJECT_MAGIC,
};
pub use crate::repo::archives::{
    all_items, chunks_of, items, list_ids, load, load_all, open_object, ArchiveList, Replaced,
    FINISHERS,
};

use std::collections::HashSet;

use crate::error::{Error, Result};
use crate::format::blob::{self, BlobKind};
use crate::repo::session::SealedArchive;
use crate::repo::Repository;
use crate::util::id::{sha256, ArchiveId};
use crate::util::text::did_you_mean;

/// Seals `meta` into an archive object, named by its sha256. It is committed by a write
/// session's end ([`crate::repo::session::WriteSession::commit_archive`]), which writes it
/// only once the chunks it references are durable and indexed and the lock is verified.
pub fn seal(repo: &Repository, meta: &ArchiveMeta) -> Result<SealedArchive> {
    let mut object = OBJECT_MAGIC.to_vec();
    object.extend_from_slice(&blob::seal_object(
        repo.crypto(),
        BlobKind::Archive,
        &meta.encode(),
        OBJECT_MAGIC.len(),
    )?);
    Ok(SealedArchive {
        id: ArchiveId(sha256(&object)),
        object,
    })
}

/// Removes the archives that others replace (see [`ArchiveList::replaced`]): the second step
/// of a rename, comment, rewrite or repair that was stopped before it. Needs the exclusive
/// lock; each removal is said. Returns how many archives were removed.
///
/// The replacing archive must be whole first: every chunk of its item stream in the index, in
/// a pack that exists. One that is not (its writer was stopped before
/// its archive landed, and another client deleted its unreferenced data meanwhile: issue 44)
/// is the one removed, and the archive it was to replace stays: removing that one instead
/// left an archive that did not restore and lost the one that did.
pub fn finish_replaced(repo: &Repository, list: &ArchiveList) -> Result<usize> {
    if list.replaced.is_empty() {
        return Ok(0);
    }
    let (index, _) = repo.load_index_for_reading()?;
    let packs = crate::index::persist::list_packs(&**repo.store())?;
    // A pack an interrupted compact is deleting still counts: the compact that finishes it
    // copies out what a kept archive references first.
    let whole = |meta: &ArchiveMeta| {
        meta.items.iter().all(|c| {
            index
                .stored(&c.id)
                .is_some_and(|(p, _)| packs.contains_key(&p))
        })
    };
    let meta_of = |id: &ArchiveId| {
        list.archives
            .iter()
            .find(|(a, _)| a == id)
            .map(|(_, m)| m)
            .or_else(|| list.replaced.iter().find(|r| r.id == *id).map(|r| &r.meta))
    };
    let mut removed = 0;
    for r in &list.replaced {
        let new_whole = meta_of(&r.by).is_some_and(whole);
        if new_whole {
            repo.delete_archive(&r.id)?;
            crate::say!(
                "note: removed archive {} (aid:{}), which aid:{} was written in place of: the command that wrote it stopped before it removed the old one",
                r.meta.name,
                &r.id.to_hex()[..8],
                &r.by.to_hex()[..8]
            );
        } else {
            repo.delete_archive(&r.by)?;
            crate::say!(
                "note: removed archive aid:{}, written in place of {} (aid:{}) by a command that was stopped: part of its data was deleted meanwhile, so it did not restore; aid:{} is kept",
                &r.by.to_hex()[..8],
                r.meta.name,
                &r.id.to_hex()[..8],
                &r.id.to_hex()[..8]
            );
        }
        removed += 1;
    }
    Ok(removed)
}

/// The hidden archive (see [`ArchiveList::replaced`]) that `spec` names by id, if it names
/// one (`aid:PREFIX`, unambiguous among the hidden ones).
pub fn hidden<'l>(list: &'l ArchiveList, spec: &str) -> Option<&'l Replaced> {
    let prefix = spec.strip_prefix("aid:")?.to_ascii_lowercase();
    let mut found = list
        .replaced
        .iter()
        .filter(|r| !prefix.is_empty() && r.id.to_hex().starts_with(&prefix));
    match (found.next(), found.next()) {
        (Some(r), None) => Some(r),
        _ => None,
    }
}

/// Refuses a change to an archive that another one replaces (it is about to be removed).
pub fn refuse_hidden(list: &ArchiveList, spec: &str) -> Result<()> {
    match hidden(list, spec) {
        Some(r) => Err(Error::invalid(format!(
            "archive {} ({spec}) is hidden: aid:{} was written in place of it by a command that stopped before it removed this one; change aid:{} instead",
            r.meta.name,
            &r.by.to_hex()[..8],
            &r.by.to_hex()[..8]
        ))),
        None => Ok(()),
    }
}

/// Loads every archive and removes those others replace ([`finish_replaced`]); what is left,
/// loaded again when anything was removed.
pub fn load_all_finishing(repo: &Repository) -> Result<ArchiveList> {
    let list = load_all(repo)?;
    if finish_replaced(repo, &list)? == 0 {
        return Ok(list);
    }
    load_all(repo)
}

/// Archive names are free text, but not empty, not `aid:…` (that selects by id), without `/`
/// (a path given where the name belongs, as in `cairn create /etc/hostname backup`) and
/// without control characters.
pub fn check_name(name: &str) -> Result<()> {
    if name.trim().is_empty() {
        return Err(Error::invalid("the archive name is empty"));
    }
    if name.contains('/') {
        return Err(Error::invalid(format!(
            "archive names cannot contain '/' ({name:?} looks like a path: the name comes first, as in `cairn create NAME PATH...`)"
        )));
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

/// The longest a tag may be, in bytes.
pub const MAX_TAG_LEN: usize = 128;

/// Tags as given (repeated, or separated by commas): trimmed, each once, sorted; an empty tag,
/// a long one or one with control characters is an error.
pub fn check_tags(given: &[String]) -> Result<Vec<String>> {
    let mut tags: Vec<String> = Vec::new();
    for t in given.iter().flat_map(|g| g.split(',')).map(str::trim) {
        if t.is_empty() {
            return Err(Error::invalid(
                "an empty tag: give --tag NAME (or NAME,NAME)",
            ));
        }
        if t.len() > MAX_TAG_LEN || t.chars().any(char::is_control) {
            return Err(Error::invalid(format!(
                "tag {t:?}: at most {MAX_TAG_LEN} bytes, without control characters"
            )));
        }
        tags.push(t.to_string());
    }
    tags.sort();
    tags.dedup();
    Ok(tags)
}

/// Resolves `NAME` (the newest archive of that name) or `aid:PREFIX` (the archive whose id
/// starts with PREFIX; ambiguous is an error).
pub fn select(repo: &Repository, spec: &str) -> Result<(ArchiveId, ArchiveMeta)> {
    if let Some(prefix) = spec.strip_prefix("aid:") {
        let prefix = prefix.to_ascii_lowercase();
        if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(Error::invalid(format!(
                "{spec:?}: aid: needs a hexadecimal id prefix"
            )));
        }
        let matches: Vec<ArchiveId> = list_ids(repo)?
            .into_iter()
            .filter(|id| id.to_hex().starts_with(&prefix))
            .collect();
        return match matches.as_slice() {
            [] => Err(Error::invalid(format!("no archive with id {prefix}…"))),
            [id] => Ok((*id, load(repo, id)?)),
            many => Err(Error::invalid(format!(
                "archive id prefix {prefix} is ambiguous: {}",
                many.iter()
                    .map(|i| i.to_hex()[..16].to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            ))),
        };
    }
    let list = load_all(repo)?;
    let names: Vec<String> = list.archives.iter().map(|(_, m)| m.name.clone()).collect();
    match newest_of(list.archives, spec) {
        Some(found) => Ok(found),
        None => {
            let hint = if list.damaged.is_empty() {
                String::new()
            } else {
                format!(
                    " ({} could not be read; run cairn check)",
                    crate::util::progress::count(list.damaged.len() as u64, "archive")
                )
            };
            let close = did_you_mean(spec, names.iter().map(String::as_str));
            Err(Error::invalid(format!(
                "no archive named {spec:?}{close}{hint}"
            )))
        }
    }
}

/// The archives of `repo` that `specs` name, oldest first: all of them when there is no spec;
/// `NAME`, every archive of that name; `aid:PREFIX`, the one archive. Archives that
/// cannot be read are returned apart, with why, when no spec was given (a spec that names one
/// fails).
pub fn select_many(repo: &Repository, specs: &[String], place: &str) -> Result<Selected> {
    let list = load_all(repo)?;
    let damaged = list
        .damaged
        .iter()
        .map(|(id, e)| {
            format!(
                "archive {} in {place} cannot be read ({e})",
                id.object_name()
            )
        })
        .collect();
    if specs.is_empty() {
        return Ok(Selected {
            archives: list.archives,
            damaged,
        });
    }
    let mut chosen: HashSet<ArchiveId> = HashSet::new();
    for spec in specs {
        if spec.starts_with("aid:") {
            chosen.insert(select(repo, spec)?.0);
            continue;
        }
        let named = list.archives.iter().filter(|(_, m)| m.name == *spec);
        if named.map(|(id, _)| chosen.insert(*id)).count() == 0 {
            let hint = if list.damaged.is_empty() {
                ""
            } else {
                " (some of its archives cannot be read; run cairn check on it)"
            };
            let close = did_you_mean(spec, list.archives.iter().map(|(_, m)| m.name.as_str()));
            return Err(Error::invalid(format!(
                "{place} has no archive named {spec:?}{close}{hint}"
            )));
        }
    }
    let archives = list
        .archives
        .into_iter()
        .filter(|(id, _)| chosen.contains(id))
        .collect();
    Ok(Selected {
        archives,
        damaged: Vec::new(),
    })
}

/// What [`select_many`] chose.
#[derive(Default)]
pub struct Selected {
    pub archives: Vec<(ArchiveId, ArchiveMeta)>,
    /// Archives left out because they cannot be read (when no spec was given).
    pub damaged: Vec<String>,
}

/// The newest archive named `name` among `archives`.
pub fn newest_of(
    archives: Vec<(ArchiveId, ArchiveMeta)>,
    name: &str,
) -> Option<(ArchiveId, ArchiveMeta)> {
    archives
        .into_iter()
        .filter(|(_, m)| m.name == name)
        .max_by_key(|(_, m)| m.start)
}
