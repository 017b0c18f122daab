//! Objects under `packs/` that no fragment names and that are not packs this repository can
//! use (a failed table of contents, a wrong hash, larger than any pack): remembered per
//! repository in the cache (`unusable-packs`), so that each is read and reported once, not by
//! every backup. A host can plant such objects for free; without the memory every backup
//! would read them again (1 GiB of zeros under a pack's name cost each backup 5–17 s). They
//! stay where they are: `check` reports them, and `check --repair` removes them.

use std::collections::BTreeSet;
use std::path::PathBuf;

use crate::util::id::PackId;

pub struct Unusable {
    path: Option<PathBuf>,
    packs: BTreeSet<String>,
}

impl Unusable {
    /// The memory of the repository `repo_id` (none without a cache directory: then every
    /// backup judges them again, which costs time, not safety).
    pub fn open(repo_id: &str) -> Unusable {
        let path =
            crate::repo::cache_dir::for_repository(repo_id).map(|d| d.join("unusable-packs"));
        let packs = path
            .as_ref()
            .and_then(|p| std::fs::read(p).ok())
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Unusable { path, packs }
    }

    /// The packs remembered as unusable.
    pub fn packs(&self) -> impl Iterator<Item = PackId> + '_ {
        self.packs.iter().filter_map(|h| PackId::from_hex(h).ok())
    }

    /// Remembers `found` (object names) as unusable, forgets what no longer `exists`, and saves
    /// (best effort).
    pub fn remember<'a>(
        &mut self,
        found: impl IntoIterator<Item = &'a str>,
        exists: impl Fn(&PackId) -> bool,
    ) {
        let before = self.packs.clone();
        for name in found {
            if let Some(p) = crate::index::persist::pack_id_of(name) {
                self.packs.insert(p.to_hex());
            }
        }
        self.packs
            .retain(|h| PackId::from_hex(h).is_ok_and(|p| exists(&p)));
        if self.packs != before {
            if let (Some(path), Ok(bytes)) = (&self.path, serde_json::to_vec(&self.packs)) {
                let _ = crate::repo::cache_dir::write_private(path, &bytes);
            }
        }
    }
}
