//! Where each directory's contents lie in an archive's item stream, found in one pass.
//!
//! create writes items in tree order ([`tree_order`]): a directory's contents come right
//! after it, so each directory's subtree is one span of records. Knowing the spans, a
//! directory is listed by reading its span and stepping over its subdirectories' spans; only
//! the directories are held, not the files.
//!
//! Node ids (an inode less the archive's base): 0 is the root, item `n` of the stream is
//! `n + 1` (the later names of a hardlinked inode take the first one's), and the directories
//! an archive does not hold (`create /home/alice` stores no `home`) come after the items.

use std::cmp::Ordering;
use std::collections::HashMap;

use crate::error::{Error, Result};
use crate::format::item::{tree_order, ChunkRef, ItemKind, ItemReader};
use crate::ops::extract::safe_components;

/// One directory's span. Offsets are bytes in the stream; ordinals count items.
pub struct DirSpan {
    /// Its name in its parent (empty for the root).
    pub name: Box<[u8]>,
    /// The parent's index in [`Spans::dirs`] (the root is its own).
    pub parent: u32,
    pub id: u32,
    /// Its own record, or `None` when made up.
    pub record: Option<u64>,
    /// Where the span starts: its own record, or its first content's when made up.
    pub from_ord: u32,
    /// Its first content.
    pub body_ord: u32,
    pub body_off: u64,
    /// Just past its last content.
    pub to_ord: u32,
    pub to_off: u64,
    /// The index in [`Spans::dirs`] just past its last descendant directory.
    pub after: u32,
    pub subdirs: u32,
    /// Components from the root.
    pub depth: u32,
}

pub struct Spans {
    /// In tree order; the root first.
    pub dirs: Vec<DirSpan>,
    /// The directories' indexes by node id.
    by_id: HashMap<u32, u32>,
    /// Per hardlinked inode: the first name's id and kind, and how many names it has.
    pub links: HashMap<[u8; 16], (u32, u32, ItemKind)>,
    /// Node ids are below this.
    pub ids: u32,
}

impl Spans {
    /// One pass over the stream; `None` when it is not in tree order.
    pub fn scan<F: FnMut(&ChunkRef) -> Result<Vec<u8>>>(
        mut items: ItemReader<F>,
    ) -> Result<Option<Self>> {
        let mut s = Scan {
            dirs: vec![DirSpan {
                name: Box::default(),
                parent: 0,
                id: 0,
                record: None,
                from_ord: 0,
                body_ord: 0,
                body_off: 0,
                to_ord: 0,
                to_off: 0,
                after: 0,
                subdirs: 0,
                depth: 0,
            }],
            open: vec![0],
        };
        let mut links: HashMap<[u8; 16], (u32, u32, ItemKind)> = HashMap::new();
        let mut last: Option<Vec<u8>> = None;
        let mut ord = 0u32;
        loop {
            let off = items.offset();
            let Some(item) = items.next() else { break };
            let item = item?;
            let this = ord;
            ord = ord.checked_add(1).ok_or_else(too_many)?;
            let Some(comps) = safe_components(&item.path) else {
                continue;
            };
            match &mut last {
                Some(l) if tree_order(l, &item.path) != Ordering::Less => return Ok(None),
                Some(l) => {
                    l.clear();
                    l.extend_from_slice(&item.path);
                }
                None => last = Some(item.path.clone()),
            }
            let (name, parents) = comps.split_last().expect("safe paths have a component");
            s.enter(parents, this, off);
            if item.kind == ItemKind::Dir {
                s.push(name, Some(off), this, this + 1, items.offset());
            } else if let Some(h) = item.hardlink_id {
                links.entry(h).or_insert((this + 1, 0, item.kind)).1 += 1;
            }
        }
        let end = items.offset();
        s.enter(&[], ord, end);
        let after = s.dirs.len() as u32;
        let root = &mut s.dirs[0];
        (root.to_ord, root.to_off, root.after) = (ord, end, after);
        let mut next = ord.checked_add(1).ok_or_else(too_many)?;
        let mut by_id = HashMap::with_capacity(s.dirs.len());
        for (k, d) in s.dirs.iter_mut().enumerate() {
            if d.record.is_none() && k > 0 {
                d.id = next;
                next = next.checked_add(1).ok_or_else(too_many)?;
            }
            by_id.insert(d.id, k as u32);
        }
        Ok(Some(Self {
            dirs: s.dirs,
            by_id,
            links,
            ids: next,
        }))
    }

    /// The directory with node id `id`.
    pub fn dir(&self, id: u32) -> Option<u32> {
        self.by_id.get(&id).copied()
    }

    /// The directory whose listing holds item `ord`.
    pub fn parent_of(&self, ord: u32) -> u32 {
        let mut d = self
            .dirs
            .partition_point(|s| s.body_ord <= ord)
            .saturating_sub(1);
        while d != 0 && ord >= self.dirs[d].to_ord {
            d = self.dirs[d].parent as usize;
        }
        d as u32
    }

    /// The directories right below `d`, in tree order.
    pub fn subdirs(&self, d: u32) -> impl Iterator<Item = u32> + '_ {
        let after = self.dirs[d as usize].after;
        let next = move |c: &u32| self.dirs.get(*c as usize).map(|s| s.after);
        std::iter::successors(Some(d + 1), next).take_while(move |c| *c < after)
    }
}

fn too_many() -> Error {
    Error::corrupt("item stream", "too many items to mount")
}

struct Scan {
    dirs: Vec<DirSpan>,
    /// The directories the current item lies in, from the root.
    open: Vec<u32>,
}

impl Scan {
    /// Closes the open directories `parents` does not name, and opens (made up) the ones
    /// it names that are not open.
    fn enter(&mut self, parents: &[&[u8]], ord: u32, off: u64) {
        let mut keep = 1;
        while keep < self.open.len()
            && keep <= parents.len()
            && *self.dirs[self.open[keep] as usize].name == *parents[keep - 1]
        {
            keep += 1;
        }
        let after = self.dirs.len() as u32;
        for d in self.open.drain(keep..) {
            let d = &mut self.dirs[d as usize];
            (d.to_ord, d.to_off, d.after) = (ord, off, after);
        }
        for name in &parents[keep - 1..] {
            self.push(name, None, ord, ord, off);
        }
    }

    /// Opens a directory in the innermost open one.
    fn push(&mut self, name: &[u8], record: Option<u64>, from: u32, body: u32, body_off: u64) {
        let parent = *self.open.last().expect("the root stays open");
        self.dirs[parent as usize].subdirs += 1;
        let depth = self.open.len() as u32;
        self.open.push(self.dirs.len() as u32);
        self.dirs.push(DirSpan {
            name: name.into(),
            parent,
            id: from + 1,
            record,
            from_ord: from,
            body_ord: body,
            body_off,
            to_ord: 0,
            to_off: 0,
            after: 0,
            subdirs: 0,
            depth,
        });
    }
}
