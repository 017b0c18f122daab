//! A tar of one path of an archive, as the page downloads it: written whole to a temporary
//! file first (under the repository's lock, at the speed of the disk), then sent from there,
//! so that a download the browser pauses or a slow connection holds no lock on the repository
//! and keeps no other request of the ui waiting. Only what a download is for: at most
//! [`LIMIT`] bytes of file contents; more is for a restore.

use std::io::{Seek, SeekFrom};

use crate::error::{Error, Result};
use crate::ui::browse;
use crate::ui::repos::UiRepo;
use crate::util::text::printable_bytes;

/// The most file contents one download holds.
pub const LIMIT: u64 = 1 << 30;

/// The tar of `path` in archive `id` (hex) of `repo`, in an unnamed temporary file, from its
/// start; and its length.
pub fn spool(repo: &UiRepo, id: &str, path: &[u8]) -> Result<(std::fs::File, u64)> {
    let aid = repo.read(|rp| browse::select(rp, id))?.0;
    let tree = repo.tree(aid, |rp| {
        let (_, meta) = browse::select(rp, id)?;
        browse::build_tree(rp, &meta)
    })?;
    let node = tree.find(path)?;
    let bytes = tree.size_below(node);
    if bytes > LIMIT {
        return Err(Error::invalid(format!(
            "{} holds {} of files, more than a download is for ({}): restore it instead",
            printable_bytes(path),
            crate::cli::output::size(bytes),
            crate::cli::output::size(LIMIT)
        )));
    }
    let mut file = tempfile::tempfile()
        .map_err(|e| Error::invalid(format!("cannot make a temporary file: {e}")))?;
    repo.read(|rp| {
        let (_, meta) = browse::select(rp, id)?;
        browse::tar(rp, &meta, path, std::io::BufWriter::new(&mut file))
    })?;
    let len = file
        .seek(SeekFrom::End(0))
        .and_then(|len| file.seek(SeekFrom::Start(0)).map(|_| len))
        .map_err(|e| Error::invalid(format!("the temporary file: {e}")))?;
    Ok((file, len))
}

/// A name for the downloaded file: the path's last name, in letters a file system takes.
pub fn file_name(path: &[u8]) -> String {
    let last = path.rsplit(|b| *b == b'/').next().unwrap_or_default();
    let name: String = String::from_utf8_lossy(last)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{name}.tar")
}
