//! `cairn dump NAME PATH`: one file's bytes to stdout (`restic dump`, `borg extract --stdout`);
//! a directory as a tar stream of itself and what is below it.

use std::io::{IsTerminal, Write};

use crate::archive;
use crate::archive::content::Contents;
use crate::cli::args::DumpArgs;
use crate::cli::commands::{Ctx, Status};
use crate::error::{Error, Result};
use crate::format::item::{Item, ItemKind};
use crate::ops::create::stored_path;
use crate::ops::extract::Selection;

const STDOUT: &str = "<stdout>";

pub fn run(ctx: &Ctx, args: &DumpArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let (_, meta) = archive::select(repo, &args.archive)?;
    let wanted = stored_path(&args.path);
    if wanted.is_empty() {
        return Err(Error::invalid(
            "dump needs a path inside the archive; for the whole archive, use export-tar",
        ));
    }
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let threads = ctx.settings.threads(None)?;
    let contents = Contents::new(repo, &index).with_threads(threads);
    let mut items = archive::items(repo, &index, &meta);
    let item: Item = loop {
        match items.next() {
            Some(item) => {
                let item = item?;
                if item.path == wanted {
                    break item;
                }
            }
            None => {
                return Err(Error::invalid(format!(
                    "{}: no such path in archive {}",
                    args.path.display(),
                    meta.name
                )))
            }
        }
    };
    crate::cli::outfile::widen_stdout_pipe();
    match item.kind {
        ItemKind::File => {
            let mut out = std::io::stdout().lock();
            contents.write_to(&item.chunks, &mut out, STDOUT)?;
            out.flush().map_err(|e| Error::io(STDOUT, e))?;
            Ok(Status::Ok)
        }
        ItemKind::Dir => {
            if std::io::stdout().is_terminal() {
                return Err(Error::invalid(format!(
                    "{} is a directory, written as a tar stream: redirect it to a file or a pipe ('| tar -tv')",
                    item.display_path()
                )));
            }
            let selection = Selection::path(wanted.clone());
            let rest = std::iter::once(Ok(item)).chain(items);
            let written = crate::ops::tar::write_selected(
                contents,
                rest,
                selection,
                std::io::stdout().lock(),
                STDOUT,
            )?;
            Ok(if written.skipped.is_empty() {
                Status::Ok
            } else {
                Status::Warning
            })
        }
        ItemKind::Symlink => Err(Error::invalid(format!(
            "{} is a symbolic link to {}; dump its target instead",
            item.display_path(),
            String::from_utf8_lossy(&item.link_target)
        ))),
        other => Err(Error::invalid(format!(
            "{} is a {}, which has no contents to dump",
            item.display_path(),
            other.name()
        ))),
    }
}
