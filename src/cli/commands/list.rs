//! `cairn list [NAME] [--json-lines]`

use serde_json::json;

use crate::archive::{self};
use crate::cli::args::ListArgs;
use crate::cli::commands::Status;
use crate::cli::output;
use crate::cli::output::{item_json, item_line, FirstNames};
use crate::error::Result;
use crate::repo::Repository;

pub fn run(repo: &Repository, args: &ListArgs) -> Result<Status> {
    let Some(spec) = &args.archive else {
        let list = archive::load_all(repo)?;
        let filter = crate::cli::chosen::Filter::of(&args.filter)?;
        for (id, m) in list.archives.iter().filter(|(_, m)| filter.matches(m)) {
            if args.json_lines {
                output::line(
                    &json!({
                        "id": id.to_hex(),
                        "name": m.name,
                        "time": m.start.rfc3339(),
                        "hostname": m.hostname,
                        "username": m.username,
                        "comment": m.comment,
                        "tags": m.tags,
                        "copied_from": m.copied_from.map(|a| a.to_hex()),
                    })
                    .to_string(),
                )?;
            } else {
                output::line(&format!(
                    "{:<24} {}  aid:{}  {}{}",
                    m.name,
                    output::time(m.start),
                    &id.to_hex()[..8],
                    m.hostname,
                    if m.tags.is_empty() {
                        String::new()
                    } else {
                        format!("  [{}]", m.tags.join(","))
                    }
                ))?;
            }
        }
        for (id, e) in &list.damaged {
            crate::say!("cairn: archive {id} cannot be read: {e}");
        }
        for r in &list.replaced {
            crate::say!(
                "note: archive {} (aid:{}) is hidden: aid:{} was written in place of it by a command that stopped before it removed the old one; {} removes it",
                r.meta.name,
                &r.id.to_hex()[..8],
                &r.by.to_hex()[..8],
                archive::FINISHERS
            );
        }
        return Ok(if list.damaged.is_empty() {
            Status::Ok
        } else {
            Status::Warning
        });
    };
    let (_, meta) = archive::select(repo, spec)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let mut first_names = FirstNames::default();
    for item in archive::items(repo, &index, &meta) {
        let item = item?;
        let link_to = first_names.link_to(&item);
        if args.json_lines {
            output::line(&item_json(&item, link_to.as_deref()).to_string())?;
        } else {
            output::line(&item_line(&item, link_to.as_deref()))?;
        }
    }
    Ok(Status::Ok)
}
