//! What append-only connections removed, and what they wrote.
//!
//! A `cairn serve --append-only` server never deletes an archive a client asks it to delete:
//! it writes `removed/<archive id>` (the server's time, plain JSON: the server holds no key)
//! and from then on hides the archive from that kind of connection. Every archive such a
//! connection writes gets `appended/<archive id>` first, so that the owner's commands never
//! let it hide or remove an older archive (an archive written in place of another names it,
//! and would otherwise hide it). Neither prefix can be written or deleted by any client of
//! the server; the owner, with direct access, lists removals (`list --removed`), takes them
//! back (`undelete`), and frees what they held only when asked (`compact
//! --removed-older-than`).

use crate::error::{Error, Result};
use crate::store::{Store, StoreResult};
use crate::util::id::ArchiveId;

/// Where removal records live.
pub const REMOVED: &str = "removed";
/// Where the markers of archives written through append-only connections live.
pub const APPENDED: &str = "appended";
/// A record is a few dozen bytes; anything larger is not one.
pub const MAX_RECORD_LEN: u64 = 4096;

/// One archive removed through an append-only connection.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Removal {
    pub id: ArchiveId,
    /// When the server recorded it (seconds since the epoch, the server's clock).
    pub time: i64,
}

#[derive(serde::Serialize, serde::Deserialize)]
struct Record {
    removed: i64,
}

pub fn removal_name(id: &ArchiveId) -> String {
    format!("{REMOVED}/{}", id.to_hex())
}

pub fn appended_name(id: &ArchiveId) -> String {
    format!("{APPENDED}/{}", id.to_hex())
}

/// The archive id an `archives/<hex>` name names.
pub fn archive_of(name: &str) -> Option<ArchiveId> {
    ArchiveId::from_hex(name.strip_prefix("archives/")?).ok()
}

/// The bytes of a removal record made now.
pub fn record_now() -> Vec<u8> {
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs() as i64)
        .unwrap_or(0);
    serde_json::to_vec(&Record { removed: now }).unwrap_or_default()
}

/// Ids named under `prefix` (objects whose names are not ids are not ours and are skipped).
fn ids_under(store: &dyn Store, prefix: &str) -> StoreResult<Vec<ArchiveId>> {
    Ok(store
        .list(prefix)?
        .iter()
        .filter_map(|o| {
            let hex = o.name.strip_prefix(prefix)?.strip_prefix('/')?;
            ArchiveId::from_hex(hex).ok()
        })
        .collect())
}

/// The archives written through append-only connections.
pub fn appended(store: &dyn Store) -> StoreResult<Vec<ArchiveId>> {
    ids_under(store, APPENDED)
}

/// Every removal record, oldest first.
pub fn removals(store: &dyn Store) -> Result<Vec<Removal>> {
    let mut out = Vec::new();
    for id in ids_under(store, REMOVED)? {
        let name = removal_name(&id);
        let bytes = match store.get_bounded(&name, MAX_RECORD_LEN) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => continue,
            Err(e) => return Err(e.into()),
        };
        let record: Record = serde_json::from_slice(&bytes)
            .map_err(|e| Error::corrupt(&name, format!("not a removal record: {e}")))?;
        out.push(Removal {
            id,
            time: record.removed,
        });
    }
    out.sort_by_key(|r| (r.time, r.id.to_hex()));
    Ok(out)
}

/// Takes a removal back: the archive is shown again.
pub fn undo(store: &dyn Store, id: &ArchiveId) -> StoreResult<()> {
    store.delete(&removal_name(id))
}
