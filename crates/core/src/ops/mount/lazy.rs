//! A tree read lazily: the directories' spans ([`Spans`]) are held, and a directory's
//! listing is read from its span of the item stream when it is asked for, and kept while
//! the listings read since hold fewer than [`BUDGET`] entries (the last two stay however
//! large). Memory is then the directories plus the budget, however many files the archive
//! has.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use super::records::Records;
use super::spans::Spans;
use super::tree::{Defaults, Entry, Listing, Node};
use crate::error::{Error, Result};
use crate::format::item::ItemKind;
use crate::ops::extract::safe_components;

/// Entries kept in the listings read, beyond the last [`KEEP`] (which stay however large).
const BUDGET: usize = 128 * 1024;

/// Listings kept whatever their size: a name hardlinked from another directory is looked up
/// in its own directory's listing and its node in the first name's, so that walking one
/// directory of a `cp -al` snapshot uses two listings at once, and must not read both
/// again for each name.
const KEEP: usize = 2;

pub struct Lazy {
    spans: Spans,
    records: Records,
    d: Defaults,
    cache: Mutex<Cache>,
    budget: usize,
}

/// Listings read, by directory index, with the tick of their last use.
#[derive(Default)]
struct Cache {
    listings: HashMap<u32, (Arc<Listing>, u64)>,
    by_tick: BTreeMap<u64, u32>,
    entries: usize,
    tick: u64,
}

impl Cache {
    fn get(&mut self, dir: u32) -> Option<Arc<Listing>> {
        self.tick += 1;
        let (listing, tick) = self.listings.get_mut(&dir)?;
        self.by_tick.remove(tick);
        *tick = self.tick;
        self.by_tick.insert(self.tick, dir);
        Some(listing.clone())
    }

    fn put(&mut self, dir: u32, listing: Arc<Listing>, budget: usize) {
        self.tick += 1;
        self.entries += listing.entries.len();
        if let Some((old, tick)) = self.listings.insert(dir, (listing, self.tick)) {
            self.entries -= old.entries.len();
            self.by_tick.remove(&tick);
        }
        self.by_tick.insert(self.tick, dir);
        while self.entries > budget && self.listings.len() > KEEP {
            let Some((_, oldest)) = self.by_tick.pop_first() else {
                break;
            };
            if let Some((old, _)) = self.listings.remove(&oldest) {
                self.entries -= old.entries.len();
            }
        }
    }
}

impl Lazy {
    pub fn new(spans: Spans, records: Records, d: Defaults) -> Self {
        Self::with_budget(spans, records, d, BUDGET)
    }

    pub fn with_budget(spans: Spans, records: Records, d: Defaults, budget: usize) -> Self {
        Self {
            spans,
            records,
            d,
            cache: Mutex::new(Cache::default()),
            budget,
        }
    }

    pub fn ids(&self) -> u32 {
        self.spans.ids
    }

    pub fn node(&self, id: u32) -> Result<Option<Arc<Node>>> {
        if id == 0 {
            return Ok(Some(Arc::new(self.dir_node(0)?)));
        }
        if id >= self.spans.ids {
            return Ok(None);
        }
        let holder = match self.spans.dir(id) {
            Some(d) => self.spans.dirs[d as usize].parent,
            None => self.spans.parent_of(id - 1),
        };
        Ok(self.listing_of(holder)?.node(id).cloned())
    }

    pub fn listing(&self, id: u32) -> Result<Option<Arc<Listing>>> {
        match self.spans.dir(id) {
            Some(d) => self.listing_of(d).map(Some),
            None => Ok(None),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn listing_of(&self, dir: u32) -> Result<Arc<Listing>> {
        if let Some(l) = self.lock().get(dir) {
            return Ok(l);
        }
        let listing = Arc::new(self.read_listing(dir)?);
        self.lock().put(dir, listing.clone(), self.budget);
        Ok(listing)
    }

    /// A directory's node: its own record's attributes, or made up.
    fn dir_node(&self, dir: u32) -> Result<Node> {
        let s = &self.spans.dirs[dir as usize];
        let nlink = 2 + s.subdirs;
        Ok(match s.record {
            Some(at) => Node::from_item(self.records.read(at)?.0, nlink),
            None => Node::made_up(self.d, nlink),
        })
    }

    /// Reads directory `dir`'s span, stepping over its subdirectories'.
    fn read_listing(&self, dir: u32) -> Result<Listing> {
        let s = &self.spans.dirs[dir as usize];
        let mut entries = Vec::new();
        let mut subdirs = self.spans.subdirs(dir).peekable();
        let (mut ord, mut off) = (s.body_ord, s.body_off);
        while ord < s.to_ord {
            if let Some(c) = subdirs.next_if(|c| self.spans.dirs[*c as usize].from_ord == ord) {
                let sub = &self.spans.dirs[c as usize];
                entries.push(Entry {
                    name: sub.name.clone(),
                    id: sub.id,
                    kind: ItemKind::Dir,
                    node: Some(Arc::new(self.dir_node(c)?)),
                });
                (ord, off) = (sub.to_ord, sub.to_off);
                continue;
            }
            let (item, next) = self.records.read(off)?;
            let this = ord;
            (ord, off) = (ord + 1, next);
            let Some(comps) = safe_components(&item.path) else {
                continue;
            };
            if comps.len() != s.depth as usize + 1 || item.kind == ItemKind::Dir {
                return Err(Error::corrupt(
                    "item stream",
                    "an item lies outside the directory it was found in",
                ));
            }
            let name = comps[comps.len() - 1].into();
            let link = item.hardlink_id.and_then(|h| self.spans.links.get(&h));
            // A later name of a hardlinked inode is listed as what the first name is.
            let (id, nlink, kind) = link.copied().unwrap_or((this + 1, 1, item.kind));
            let node = (id == this + 1).then(|| Arc::new(Node::from_item(item, nlink)));
            entries.push(Entry {
                name,
                id,
                kind,
                node,
            });
        }
        Ok(Listing::new(self.spans.dirs[s.parent as usize].id, entries))
    }
}

#[cfg(test)]
mod tests;
