//! `cairn export-tar NAME FILE [PATH...]`: an archive as a PAX tar file (see [`crate::ops::tar`]).

use std::io::{BufWriter, IsTerminal, Write};

use crate::archive::content::Contents;
use crate::archive::item::Item;
use crate::archive::{self};
use crate::cli::ExportTarArgs;
use crate::commands::outfile::{NewFile, OutFile};
use crate::commands::{output, Ctx, Status};
use crate::error::{Error, Result};
use crate::ops::extract::Selection;
use crate::ops::tar::TarWriter;

/// What a tar stream held.
pub struct Written {
    pub entries: u64,
    pub bytes: u64,
    pub unmatched: Vec<String>,
    /// Files left out (their data is missing), with why; already said on stderr.
    pub skipped: Vec<String>,
}

/// Writes the items `selection` picks as tar entries to `out`, and the end of the stream.
pub fn write(
    contents: Contents<'_>,
    items: impl Iterator<Item = Result<Item>>,
    mut selection: Selection,
    out: impl Write,
    sink: &str,
) -> Result<Written> {
    let mut tar = TarWriter::new(BufWriter::with_capacity(1 << 20, out), sink, contents);
    let mut skipped = Vec::new();
    for item in items {
        if let Some(item) = selection.pick(item?) {
            let name = item.path.clone();
            if let Some(why) = tar.append(&item, &name)? {
                crate::say!("warning: {why}");
                skipped.push(why);
            }
        }
    }
    let (entries, bytes) = (tar.entries, tar.bytes);
    tar.finish()?;
    Ok(Written {
        entries,
        bytes,
        unmatched: selection.unmatched(),
        skipped,
    })
}

pub fn run(ctx: &Ctx, args: &ExportTarArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let (_, meta) = archive::select(repo, &args.archive)?;
    let to_stdout = args.file.as_os_str() == "-";
    if to_stdout && std::io::stdout().is_terminal() {
        return Err(Error::invalid(
            "refusing to write a tar stream to a terminal: give a file, or redirect stdout",
        ));
    }
    let (given, selection) = super::extract::selection(&args.paths, &args.reshape)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let contents = Contents::new(repo, &index);
    let items = archive::items(repo, &index, &meta);
    let written = if to_stdout {
        write(
            contents,
            items,
            selection,
            std::io::stdout().lock(),
            "<stdout>",
        )?
    } else {
        // A new or regular file is written beside the name and renamed over it once complete
        // (a failed export leaves no half tar file behind, nor destroys an older one); a
        // device or this user's FIFO is written into; nothing through a link
        // (`commands/outfile.rs`).
        let out = OutFile::create(
            &args.file,
            NewFile {
                mode: 0o644,
                replace: true,
            },
        )?;
        let sink = args.file.display().to_string();
        let written = write(contents, items, selection, out.writer(), &sink)?;
        out.finish()?;
        written
    };
    for u in &written.unmatched {
        crate::say!("warning: {u}: matches nothing in archive {}", meta.name);
    }
    if !to_stdout {
        output::line(&format!(
            "Wrote {} ({} of file contents) of archive {} to {}",
            output::count(written.entries, "item"),
            output::size(written.bytes),
            meta.name,
            args.file.display()
        ))?;
    }
    if !given.is_empty() && written.entries == 0 {
        return Err(Error::invalid(
            "no item in the archive matches the given paths; the tar file holds nothing",
        ));
    }
    Ok(
        if written.unmatched.is_empty() && written.skipped.is_empty() {
            Status::Ok
        } else {
            Status::Warning
        },
    )
}
