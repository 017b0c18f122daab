//! `cairn -r DST copy --from-repo SRC [ARCHIVE...]`

use crate::cli::args::CopyArgs;
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::{Error, Result};
use crate::ops::copy::{self, Copier, Outcome};
use crate::util::progress::Progress;

/// Copies the chosen archives of `src` into the destination (`dst`, locked to write); `src`
/// is open and locked to read.
pub fn run(dst: &Ctx, src: &Ctx, args: &CopyArgs) -> Result<Status> {
    if src.repo.id() == dst.repo.id() {
        return Err(Error::invalid(
            "the source and the destination are the same repository",
        ));
    }
    let interrupt = dst.interrupt()?;
    let progress = Progress::new(args.progress.choice());
    let chosen = copy::select(&src.repo, &args.archives)?;
    for d in &chosen.damaged {
        progress.println(&format!(
            "warning: {d}; it is not copied (run cairn check on the source)"
        ));
    }
    let mut present = copy::present(&dst.repo, &progress)?;
    if src.repo.config().chunker != dst.repo.config().chunker
        || src.repo.crypto().chunker_key() != dst.repo.crypto().chunker_key()
    {
        progress.println(
            "note: the repositories chunk files differently, so copied archives will not \
             deduplicate with backups made in the destination (init --copy-chunker-params-from \
             makes a destination that chunks like its source)",
        );
    }
    progress.set(|| String::from("reading the indexes"));
    let (src_index, damaged) = src.repo.load_index_for_reading()?;
    for d in damaged {
        progress.println(&format!("note: source index: {d}"));
    }
    let mut index = crate::ops::create::load_index(&dst.repo, &progress)?;
    let mut copier = Copier::new(&src.repo, &src_index, &dst.repo);
    let (mut copied, mut skipped) = (0u64, 0u64);
    for (source, meta) in chosen.archives {
        let origin = meta.copied_from.unwrap_or(source);
        let outcome = if present.contains(&source) || present.contains(&origin) {
            Outcome::Present { source, meta }
        } else {
            let (outcome, next) =
                copier.copy_archive(index, source, &meta, &progress, &interrupt)?;
            index = next;
            // A second archive of the source with the same original is not copied again.
            present.insert(origin);
            outcome
        };
        match &outcome {
            Outcome::Copied { .. } => copied += 1,
            Outcome::Present { .. } => skipped += 1,
        }
        let line = said(&outcome);
        progress.suspend(|| output::line(&line))?;
    }
    progress.finish();
    output::line(&format!(
        "{} copied, {} already there.",
        output::count(copied, "archive"),
        skipped
    ))?;
    Ok(if chosen.damaged.is_empty() {
        Status::Ok
    } else {
        Status::Warning
    })
}

/// What came of one archive: copied (as what, and what it added), or already there.
fn said(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Copied {
            source,
            id,
            meta,
            new_chunks,
            new_bytes,
        } => format!(
            "Copied {} {} (aid:{}) as aid:{}: {}, {} new",
            meta.name,
            output::time(meta.start),
            short(source),
            short(id),
            output::count(*new_chunks, "new chunk"),
            output::size(*new_bytes)
        ),
        Outcome::Present { source, meta } => format!(
            "Skipped {} {} (aid:{}): already in the destination",
            meta.name,
            output::time(meta.start),
            short(source)
        ),
    }
}

fn short(id: &crate::util::id::ArchiveId) -> String {
    id.to_hex()[..8].to_string()
}
