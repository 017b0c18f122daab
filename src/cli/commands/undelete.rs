//! `cairn list --removed` and `cairn undelete ARCHIVE... | --all`: what clients removed
//! through an append-only server, and bringing it back (`crate::repo::removed`).

use serde_json::json;

use crate::archive;
use crate::cli::args::UndeleteArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::{Error, Result};
use crate::repo::archives::RemovedArchive;
use crate::repo::removed;
use crate::repo::Repository;
use crate::util::clock::Timestamp;

/// `list --removed`: the removed archives, oldest removal first, with when.
pub fn list(repo: &Repository, json_lines: bool) -> Result<Status> {
    let list = archive::load_all(repo)?;
    let mut all = list.removed;
    all.sort_by_key(|r| (r.time, r.meta.start.secs));
    for r in &all {
        let when = Timestamp {
            secs: r.time,
            nanos: 0,
        };
        if json_lines {
            output::line(
                &json!({
                    "id": r.id.to_hex(),
                    "name": r.meta.name,
                    "time": r.meta.start.rfc3339(),
                    "hostname": r.meta.hostname,
                    "removed": when.rfc3339(),
                })
                .to_string(),
            )?;
        } else {
            output::line(&format!(
                "{:<24} {}  aid:{}  {}  removed {}",
                r.meta.name,
                output::time(r.meta.start),
                &r.id.to_hex()[..8],
                r.meta.hostname,
                output::time(when)
            ))?;
        }
    }
    if all.is_empty() && !json_lines {
        crate::say!("No archive was removed through an append-only server.");
    }
    Ok(Status::Ok)
}

/// `undelete`: takes the removal records of the chosen archives back.
pub fn run(ctx: &Ctx, args: &UndeleteArgs) -> Result<Status> {
    let repo = &ctx.repo;
    if repo.store().append_only() {
        return Err(Error::invalid(
            "the repository's server is append-only: removed archives are brought back on the server, by its owner (cairn undelete there)",
        ));
    }
    let removed = archive::load_all(repo)?.removed;
    let chosen: Vec<&RemovedArchive> = if args.all {
        removed.iter().collect()
    } else {
        let mut chosen = Vec::new();
        for spec in &args.archives {
            let matching: Vec<&RemovedArchive> =
                removed.iter().filter(|r| matches(r, spec)).collect();
            if matching.is_empty() {
                return Err(Error::invalid(format!(
                    "{spec:?}: no removed archive of that name or id (cairn list --removed shows them)"
                )));
            }
            chosen.extend(matching);
        }
        chosen
    };
    for r in &chosen {
        removed::undo(&**repo.store(), &r.id)?;
        output::line(&format!(
            "Brought back {} {} (aid:{})",
            r.meta.name,
            output::time(r.meta.start),
            &r.id.to_hex()[..8]
        ))?;
    }
    if chosen.is_empty() {
        crate::say!("No archive was removed through an append-only server.");
    }
    Ok(Status::Ok)
}

fn matches(r: &RemovedArchive, spec: &str) -> bool {
    match spec.strip_prefix("aid:") {
        Some(prefix) => {
            !prefix.is_empty() && r.id.to_hex().starts_with(&prefix.to_ascii_lowercase())
        }
        None => r.meta.name == spec,
    }
}
