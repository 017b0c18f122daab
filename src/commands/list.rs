//! `cairn list [NAME] [--json-lines]`

use serde_json::json;

use crate::archive::item::{Item, ItemKind};
use crate::archive::{self};
use crate::cli::ListArgs;
use crate::commands::{output, Status};
use crate::error::Result;
use crate::repo::Repository;

pub fn item_json(it: &Item) -> serde_json::Value {
    let mut v = json!({
        "path": String::from_utf8_lossy(&it.path),
        "type": match it.kind {
            ItemKind::File => "file",
            ItemKind::Dir => "dir",
            ItemKind::Symlink => "symlink",
            ItemKind::Fifo => "fifo",
            ItemKind::CharDev => "chardev",
            ItemKind::BlockDev => "blockdev",
        },
        "mode": it.mode_string(),
        "user": it.user,
        "group": it.group,
        "uid": it.uid,
        "gid": it.gid,
        "size": it.size,
        "mtime": it.mtime.rfc3339(),
    });
    if it.kind == ItemKind::Symlink {
        v["target"] = json!(String::from_utf8_lossy(&it.link_target));
    }
    if std::str::from_utf8(&it.path).is_err() {
        v["path_hex"] = json!(hex::encode(&it.path));
    }
    v
}

pub fn item_line(it: &Item) -> String {
    let owner = format!(
        "{}/{}",
        if it.user.is_empty() {
            it.uid.to_string()
        } else {
            it.user.clone()
        },
        if it.group.is_empty() {
            it.gid.to_string()
        } else {
            it.group.clone()
        }
    );
    let mut line = format!(
        "{} {:<17} {:>12} {} {}",
        it.mode_string(),
        owner,
        it.size,
        it.mtime.display_local(),
        it.display_path()
    );
    if it.kind == ItemKind::Symlink {
        line.push_str(" -> ");
        line.push_str(&String::from_utf8_lossy(&it.link_target));
    }
    line
}

pub fn run(repo: &Repository, args: &ListArgs) -> Result<Status> {
    let Some(spec) = &args.archive else {
        let list = archive::load_all(repo)?;
        for (id, m) in &list.archives {
            if args.json_lines {
                output::line(
                    &json!({
                        "id": id.to_hex(),
                        "name": m.name,
                        "time": m.start.rfc3339(),
                        "hostname": m.hostname,
                        "username": m.username,
                        "comment": m.comment,
                    })
                    .to_string(),
                )?;
            } else {
                output::line(&format!(
                    "{:<24} {}  aid:{}  {}",
                    m.name,
                    m.start.display_local(),
                    &id.to_hex()[..8],
                    m.hostname
                ))?;
            }
        }
        for (id, e) in &list.damaged {
            eprintln!("cairn: archive {id} cannot be read: {e}");
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
        eprintln!("note: {n}");
    }
    for item in archive::items(repo, &index, &meta) {
        let item = item?;
        if args.json_lines {
            output::line(&item_json(&item).to_string())?;
        } else {
            output::line(&item_line(&item))?;
        }
    }
    Ok(Status::Ok)
}
