//! `cairn completions SHELL` and `cairn man DIR`: generated from the same definitions as the
//! command line itself, so they cannot fall behind it.

use std::path::Path;

use clap::CommandFactory;

use crate::cli::args::{Cli, CompletionsArgs, ManArgs};
use crate::cli::commands::Status;
use crate::cli::output;
use crate::error::{Error, Result};

pub fn completions(args: &CompletionsArgs) -> Result<Status> {
    let mut cmd = Cli::command();
    let mut out = Vec::new();
    clap_complete::generate(args.shell, &mut cmd, "cairn", &mut out);
    std::io::Write::write_all(&mut std::io::stdout().lock(), &out)
        .map_err(|e| Error::io("<stdout>", e))?;
    Ok(Status::Ok)
}

pub fn man(args: &ManArgs) -> Result<Status> {
    std::fs::create_dir_all(&args.dir).map_err(|e| Error::io(&args.dir, e))?;
    // Built, every command carries the global options and is called as it is typed
    // (`cairn key export`); each page is titled so, in a file named for `man cairn-key-export`.
    let mut cmd = Cli::command();
    cmd.build();
    let mut written = 0u64;
    write_page(&args.dir, &cmd, "cairn", &mut written)?;
    // clap's own `help` commands (`cairn help`, `cairn key help`: a copy of every command,
    // with nothing in it) have no page: `man cairn-check` is the one for `cairn help check`.
    for sub in cmd.get_subcommands().filter(|s| s.get_name() != "help") {
        let file = format!("cairn-{}", sub.get_name());
        let title = format!("cairn {}", sub.get_name());
        write_page(
            &args.dir,
            &sub.clone().display_name(&title),
            &file,
            &mut written,
        )?;
        for nested in sub.get_subcommands().filter(|s| s.get_name() != "help") {
            let file = format!("{file}-{}", nested.get_name());
            let title = format!("{title} {}", nested.get_name());
            write_page(
                &args.dir,
                &nested.clone().display_name(title),
                &file,
                &mut written,
            )?;
        }
    }
    output::line(&format!(
        "Wrote {} to {}",
        output::count(written, "man page"),
        args.dir.display()
    ))?;
    Ok(Status::Ok)
}

fn write_page(dir: &Path, cmd: &clap::Command, name: &str, written: &mut u64) -> Result<()> {
    let mut page = Vec::new();
    clap_mangen::Man::new(cmd.clone())
        .render(&mut page)
        .map_err(|e| Error::io(name, e))?;
    let path = dir.join(format!("{name}.1"));
    // Replaced, never written through a link planted in a shared directory.
    crate::cli::outfile::write_whole(
        &path,
        &page,
        crate::cli::outfile::NewFile {
            mode: 0o644,
            replace: true,
        },
    )?;
    *written += 1;
    Ok(())
}
