//! `cairn find GLOB [--archive NAME] [--json-lines]`: which archives hold a file, and where.
//!
//! The pattern follows the rules of `create --exclude`: without '/', it matches a name at any
//! depth; with '/', the whole stored path. Archives are searched oldest first, each listed
//! with the items that match, in the style of `list`.

use std::os::unix::ffi::OsStrExt;

use serde_json::json;

use crate::archive::{self, ArchiveMeta};
use crate::cli::args::FindArgs;
use crate::cli::commands::Status;
use crate::cli::output;
use crate::cli::output::{item_json, item_line, FirstNames};
use crate::error::{Error, Result};
use crate::repo::Repository;
use crate::source::exclude::Excludes;
use crate::util::id::ArchiveId;
use crate::util::text::{did_you_mean, printable_bytes};

pub fn run(repo: &Repository, args: &FindArgs) -> Result<Status> {
    if args.pattern.as_bytes().iter().all(|b| *b == b'/') {
        return Err(Error::invalid("find needs a pattern, such as '*.pdf'"));
    }
    let pattern = Excludes::new(std::slice::from_ref(&args.pattern), false)?;
    let list = archive::load_all(repo)?;
    let archives: Vec<(ArchiveId, ArchiveMeta)> = match &args.archive {
        None => list.archives,
        Some(spec) if spec.starts_with("aid:") => vec![archive::select(repo, spec)?],
        Some(name) => {
            let close = did_you_mean(name, list.archives.iter().map(|(_, m)| m.name.as_str()));
            let of_name: Vec<_> = list
                .archives
                .into_iter()
                .filter(|(_, m)| &m.name == name)
                .collect();
            if of_name.is_empty() {
                return Err(Error::invalid(format!("no archive named {name:?}{close}")));
            }
            of_name
        }
    };
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let mut found = 0u64;
    let mut in_archives = 0u64;
    for (id, meta) in &archives {
        let mut heading = false;
        let mut first_names = FirstNames::default();
        for item in archive::items(repo, &index, meta) {
            let item = item?;
            let link_to = first_names.link_to(&item);
            if !pattern.is_excluded(&item.path) {
                continue;
            }
            found += 1;
            if args.json_lines {
                let mut v = item_json(&item, link_to.as_deref());
                v["archive"] = json!(meta.name);
                v["archive_id"] = json!(id.to_hex());
                v["archive_time"] = json!(meta.start.rfc3339());
                output::line(&v.to_string())?;
                continue;
            }
            if !heading {
                heading = true;
                in_archives += 1;
                output::line(&format!(
                    "{}archive {} of {} (aid:{}):",
                    if in_archives > 1 { "\n" } else { "" },
                    meta.name,
                    output::time(meta.start),
                    &id.to_hex()[..8]
                ))?;
            }
            output::line(&item_line(&item, link_to.as_deref()))?;
        }
    }
    for (id, e) in &list.damaged {
        crate::say!("cairn: archive {id} cannot be read: {e}");
    }
    if found == 0 {
        crate::say!(
            "cairn: nothing matches \"{}\" in {}",
            printable_bytes(args.pattern.as_bytes()),
            output::count(archives.len() as u64, "archive")
        );
        return Ok(Status::Warning);
    }
    Ok(if list.damaged.is_empty() {
        Status::Ok
    } else {
        Status::Warning
    })
}
