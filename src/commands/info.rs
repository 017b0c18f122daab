//! `cairn info`: repository statistics.

use serde::Serialize;

use crate::cli::InfoArgs;
use crate::commands::{output, Status};
use crate::error::Result;
use crate::index::persist;
use crate::repo::Repository;

#[derive(Serialize)]
pub struct RepoInfo {
    pub id: String,
    pub format_version: u32,
    pub encryption: String,
    pub packs: u64,
    pub pack_bytes: u64,
    pub index_fragments: u64,
    pub chunks: u64,
    pub chunk_stored_bytes: u64,
    pub chunk_plain_bytes: u64,
}

pub fn repo_info(repo: &Repository) -> Result<RepoInfo> {
    let packs = persist::list_packs(&**repo.store())?;
    let (index, load) = repo.load_index()?;
    let (mut stored, mut plain, mut chunks) = (0u64, 0u64, 0u64);
    for (_, _, loc) in index.iter_stored() {
        chunks += 1;
        stored += u64::from(loc.len);
        plain += u64::from(loc.plain_len);
    }
    Ok(RepoInfo {
        id: repo.id_hex(),
        format_version: repo.config().version,
        encryption: repo.config().encryption.clone(),
        packs: packs.len() as u64,
        pack_bytes: packs.values().sum(),
        index_fragments: (load.fragments.len() + load.damaged_fragments.len()) as u64,
        chunks,
        chunk_stored_bytes: stored,
        chunk_plain_bytes: plain,
    })
}

pub fn run(repo: &Repository, args: &InfoArgs) -> Result<Status> {
    let info = repo_info(repo)?;
    if args.json {
        output::line(&serde_json::to_string_pretty(&info).unwrap_or_default())?;
        return Ok(Status::Ok);
    }
    output::line(&format!("Repository ID:   {}", info.id))?;
    output::line(&format!("Format version:  {}", info.format_version))?;
    output::line(&format!("Encryption:      {}", info.encryption))?;
    output::line(&format!(
        "Packs:           {} ({})",
        info.packs,
        output::size(info.pack_bytes)
    ))?;
    output::line(&format!("Index fragments: {}", info.index_fragments))?;
    output::line(&format!(
        "Chunks:          {} (original {}, stored {})",
        info.chunks,
        output::size(info.chunk_plain_bytes),
        output::size(info.chunk_stored_bytes)
    ))?;
    Ok(Status::Ok)
}
