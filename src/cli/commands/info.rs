//! `cairn info`: repository statistics.

use serde::Serialize;

use crate::cli::args::InfoArgs;
use crate::cli::commands::Status;
use crate::cli::output;
use crate::error::Result;
use crate::index::persist;
use crate::repo::Repository;

#[derive(Serialize)]
pub struct RepoInfo {
    pub id: String,
    pub format_version: u32,
    pub encryption: String,
    pub padding: String,
    pub packs: u64,
    pub pack_bytes: u64,
    pub index_fragments: u64,
    pub chunks: u64,
    pub chunk_stored_bytes: u64,
    pub chunk_plain_bytes: u64,
    pub archives: u64,
    /// How much of the repository this client verified, and when.
    pub verification: crate::ops::check::record::Coverage,
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
        padding: repo.config().padding.clone(),
        packs: packs.len() as u64,
        pack_bytes: packs.values().sum(),
        index_fragments: (load.fragments.len() + load.damaged_fragments.len()) as u64,
        chunks,
        chunk_stored_bytes: stored,
        chunk_plain_bytes: plain,
        archives: crate::archive::list_ids(repo)?.len() as u64,
        verification: crate::ops::check::record::Record::load(repo)
            .coverage(&packs, crate::util::clock::now_secs()),
    })
}

pub fn run(repo: &Repository, args: &InfoArgs) -> Result<Status> {
    if let Some(spec) = &args.archive {
        return archive_info(repo, spec, args.json);
    }
    let info = repo_info(repo)?;
    if args.json {
        output::line(&serde_json::to_string_pretty(&info).unwrap_or_default())?;
        return Ok(Status::Ok);
    }
    let lines = [
        format!("Repository ID:   {}", info.id),
        format!("Format version:  {}", info.format_version),
        format!("Encryption:      {}", info.encryption),
        format!("Padding:         {}", info.padding),
        format!("Archives:        {}", info.archives),
        format!(
            "Packs:           {} ({})",
            info.packs,
            output::size(info.pack_bytes)
        ),
        format!("Index fragments: {}", info.index_fragments),
        format!(
            "Chunks:          {} (original {}, stored {})",
            info.chunks,
            output::size(info.chunk_plain_bytes),
            output::size(info.chunk_stored_bytes)
        ),
        output::coverage_line(&info.verification),
    ];
    output::lines(&lines)?;
    Ok(Status::Ok)
}

fn archive_info(repo: &Repository, spec: &str, json: bool) -> Result<Status> {
    let (id, m) = crate::archive::select(repo, spec)?;
    let duration = (m.end.secs - m.start.secs) as f64
        + (f64::from(m.end.nanos) - f64::from(m.start.nanos)) / 1e9;
    if json {
        let v = serde_json::json!({
            "id": id.to_hex(),
            "name": m.name,
            "comment": m.comment,
            "hostname": m.hostname,
            "username": m.username,
            "start": m.start.rfc3339(),
            "end": m.end.rfc3339(),
            "duration": duration,
            "command_line": m.command_line,
            "stats": m.stats,
            "copied_from": m.copied_from.map(|a| a.to_hex()),
        });
        output::line(&serde_json::to_string_pretty(&v).unwrap_or_default())?;
        return Ok(Status::Ok);
    }
    let s = &m.stats;
    let mut lines = vec![
        format!("Archive name:      {}", m.name),
        format!("Archive id:        {id}"),
        format!("Comment:           {}", m.comment),
        format!("Hostname:          {}", m.hostname),
        format!("Username:          {}", m.username),
        format!("Time (start):      {}", output::time(m.start)),
        format!("Time (end):        {}", output::time(m.end)),
        format!("Duration:          {duration:.2} s"),
        format!("Command line:      {}", m.command_line.join(" ")),
    ];
    if let Some(original) = m.copied_from {
        lines.push(format!("Copied from:       aid:{original}"));
    }
    lines.extend(output::count_lines(s));
    lines.extend([
        format!("Original size:     {}", output::size(s.original_size)),
        format!("Compressed size:   {}", output::size(s.compressed_size)),
        format!("Deduplicated size: {}", output::size(s.deduplicated_size)),
    ]);
    output::lines(&lines)?;
    Ok(Status::Ok)
}
