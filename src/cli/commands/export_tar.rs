//! `cairn export-tar NAME FILE [PATH...]`: an archive as a PAX tar file (see [`crate::ops::tar`]).

use std::io::IsTerminal;

use crate::archive::content::Contents;
use crate::archive::{self};
use crate::cli::args::ExportTarArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::outfile::{NewFile, OutFile};
use crate::cli::output;
use crate::error::{Error, Result};

pub fn run(ctx: &Ctx, args: &ExportTarArgs) -> Result<Status> {
    let repo = &ctx.repo;
    let (_, meta) = archive::select(repo, &args.archive)?;
    let to_stdout = args.file.as_os_str() == "-";
    if to_stdout && std::io::stdout().is_terminal() {
        return Err(Error::invalid(
            "refusing to write a tar stream to a terminal: give a file, or redirect stdout",
        ));
    }
    let selection = crate::cli::select::selection(&args.paths, &args.reshape)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let threads = ctx.settings.threads(args.threads)?;
    let contents = Contents::new(repo, &index).with_threads(threads);
    let items = archive::items(repo, &index, &meta);
    let written = if to_stdout {
        crate::cli::outfile::widen_stdout_pipe();
        crate::ops::tar::write_selected(
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
        let written =
            crate::ops::tar::write_selected(contents, items, selection, out.writer(), &sink)?;
        out.finish()?;
        written
    };
    for u in &written.unmatched {
        output::unmatched(u, &meta.name);
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
    if !args.paths.is_empty() && written.entries == 0 {
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
