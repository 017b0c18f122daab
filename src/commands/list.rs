//! `cairn list [NAME] [--json-lines]`

use std::collections::HashMap;

use serde_json::json;

use crate::archive::item::{Item, ItemKind};
use crate::archive::{self};
use crate::cli::ListArgs;
use crate::commands::{output, Status};
use crate::error::Result;
use crate::fsmeta;
use crate::repo::Repository;
use crate::text::printable;

/// The first name of each hardlinked inode, for the later ones.
#[derive(Default)]
pub struct FirstNames(HashMap<[u8; 16], Vec<u8>>);

impl FirstNames {
    /// For a later name of a hardlinked inode, its first name; the first one is remembered.
    pub fn link_to(&mut self, item: &Item) -> Option<Vec<u8>> {
        let h = item.hardlink_id?;
        match self.0.get(&h) {
            Some(first) => Some(first.clone()),
            None => {
                self.0.insert(h, item.path.clone());
                None
            }
        }
    }
}

/// One item as JSON; `link_to`: the first name of the inode, for a later hardlink.
pub fn item_json(it: &Item, link_to: Option<&[u8]>) -> serde_json::Value {
    let mut v = json!({
        "path": String::from_utf8_lossy(&it.path),
        "type": it.kind.name(),
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
    if let Some(first) = link_to {
        v["hardlink_to"] = json!(String::from_utf8_lossy(first));
    }
    let mut names = Vec::new();
    for (k, value) in &it.xattrs {
        match k.as_slice() {
            fsmeta::ACL_ACCESS => v["acl_access"] = json!(fsmeta::acl_text(value)),
            fsmeta::ACL_DEFAULT => v["acl_default"] = json!(fsmeta::acl_text(value)),
            _ => names.push(String::from_utf8_lossy(k).into_owned()),
        }
    }
    if !names.is_empty() {
        v["xattrs"] = json!(names);
    }
    if it.inode_flags != 0 {
        v["flags"] = json!(fsmeta::flag_names(it.inode_flags));
    }
    if std::str::from_utf8(&it.path).is_err() {
        v["path_hex"] = json!(hex::encode(&it.path));
    }
    v
}

/// One item as a line, `ls -l` style, names escaped; a later name of a hardlinked inode says
/// `link to` its first.
pub fn item_line(it: &Item, link_to: Option<&[u8]>) -> String {
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
    // As `ls -l`: a `+` after the mode when the item has an access ACL.
    let acl = if it.xattrs.iter().any(|(k, _)| k == fsmeta::ACL_ACCESS) {
        "+"
    } else {
        " "
    };
    let mut line = format!(
        "{}{acl}{:<17} {:>12} {} {}",
        it.mode_string(),
        owner,
        it.size,
        output::time(it.mtime),
        it.display_path()
    );
    if it.kind == ItemKind::Symlink {
        line.push_str(" -> ");
        line.push_str(&printable(&String::from_utf8_lossy(&it.link_target)));
    }
    if let Some(first) = link_to {
        line.push_str(" link to ");
        line.push_str(&printable(&String::from_utf8_lossy(first)));
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
                        "copied_from": m.copied_from.map(|a| a.to_hex()),
                    })
                    .to_string(),
                )?;
            } else {
                output::line(&format!(
                    "{:<24} {}  aid:{}  {}",
                    m.name,
                    output::time(m.start),
                    &id.to_hex()[..8],
                    m.hostname
                ))?;
            }
        }
        for (id, e) in &list.damaged {
            crate::say!("cairn: archive {id} cannot be read: {e}");
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
