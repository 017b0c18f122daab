//! `cairn mount [ARCHIVE] MOUNTPOINT` and `cairn umount MOUNTPOINT`.
//!
//! Without `--foreground`, cairn starts itself again as the server (with the same arguments
//! and `CAIRN_MOUNT_DAEMON` set) and waits until that copy says it has mounted, so that the
//! command returns only once the mount can be used, and with the server's error if it cannot.
//! The server asks for the passphrase on the terminal if it needs one, then leaves the
//! terminal's session. Either way, SIGINT or SIGTERM to the server unmounts cleanly, and so
//! does `cairn umount` (or `fusermount -u`), after which the server exits.

use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Command as Process, Stdio};
use std::time::Duration;

use fuser::{Config, MountOption};

use crate::archive::{self};
use crate::cli::args::{MountArgs, UmountArgs};
use crate::cli::commands::{Ctx, Status};
use crate::cli::output;
use crate::error::{Error, Result};
use crate::ops::mount::{ArchiveFs, Layout, Mounted};
use crate::repo::Repository;

/// Set in the server started by a background mount.
const DAEMON_ENV: &str = "CAIRN_MOUNT_DAEMON";
/// What the server writes to its parent once mounted.
const READY: &str = "mounted";

/// Whether this process is to mount in the background: start a server and wait for it.
pub fn in_background(args: &MountArgs) -> bool {
    !args.foreground && std::env::var_os(DAEMON_ENV).is_none()
}

fn split(args: &MountArgs) -> Result<(Option<&str>, &Path)> {
    match args.targets.as_slice() {
        [m] => Ok((None, Path::new(m))),
        [a, m] => Ok((Some(a.as_str()), Path::new(m))),
        _ => Err(Error::invalid("mount takes [ARCHIVE] MOUNTPOINT")),
    }
}

/// Checks what can be checked before the repository is opened.
fn preflight(mountpoint: &Path) -> Result<()> {
    match std::fs::metadata(mountpoint) {
        Ok(m) if m.is_dir() => {}
        Ok(_) => {
            return Err(Error::invalid(format!(
                "{}: not a directory",
                mountpoint.display()
            )))
        }
        Err(e) => return Err(Error::io(mountpoint, e)),
    }
    if let Err(e) = std::fs::metadata("/dev/fuse") {
        return Err(Error::invalid(format!(
            "FUSE is not available on this system (/dev/fuse: {e}); load the fuse module or use extract, dump or export-tar"
        )));
    }
    Ok(())
}

/// Why a mount may have failed, when this process cannot open `/dev/fuse` itself (the
/// setuid `fusermount3` often can, so this is said only once the mount failed).
fn fuse_hint(open_error: Option<&std::io::Error>) -> String {
    match open_error {
        None => String::new(),
        Some(e) if e.kind() == std::io::ErrorKind::PermissionDenied => format!(
            " (this user has no access to /dev/fuse: {e}; join the group that owns it, or mount as a user who has access)"
        ),
        Some(e) => format!(" (/dev/fuse cannot be opened: {e})"),
    }
}

/// Starts the server and returns once it has mounted (or exits with its status).
pub fn background(args: &MountArgs) -> Result<Status> {
    let (_, mountpoint) = split(args)?;
    preflight(mountpoint)?;
    let exe = std::env::current_exe().map_err(|e| Error::io("the cairn executable", e))?;
    let mut child = Process::new(&exe)
        .args(std::env::args_os().skip(1))
        .env(DAEMON_ENV, "1")
        .stdin(Stdio::inherit())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .map_err(|e| Error::io(&exe, e))?;
    let mut said = String::new();
    if let Some(out) = child.stdout.take() {
        // EOF without the word: the server failed (and said why on stderr).
        let _ = BufReader::new(out).read_line(&mut said);
    }
    if said.trim_end() == READY {
        output::line(&format!(
            "Mounted at {}; unmount with: cairn umount {}",
            mountpoint.display(),
            mountpoint.display()
        ))?;
        return Ok(Status::Ok);
    }
    let status = child.wait().map_err(|e| Error::io(&exe, e))?;
    std::process::exit(status.code().unwrap_or(2));
}

/// Mounts and serves until unmounted or interrupted.
pub fn run(ctx: Ctx, args: &MountArgs) -> Result<Status> {
    let (spec, mountpoint) = split(args)?;
    preflight(mountpoint)?;
    let interrupt = ctx.interrupt()?;
    let threads = ctx.settings.threads(None)?;
    let repo = ctx.repo;
    let (archives, layout) = mounted(&repo, spec)?;
    let (index, notes) = repo.load_index_for_reading()?;
    for n in notes {
        crate::say!("note: {n}");
    }
    let what = match (layout, archives.first()) {
        (Layout::OneArchive, Some(a)) => format!("archive {}", a.meta.name),
        _ => output::count(archives.len() as u64, "archive"),
    };
    let cache = usize::try_from(args.cache_mib.max(1) << 20).unwrap_or(usize::MAX);
    let fs = ArchiveFs::new(repo, index, archives, layout, cache, threads);
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::RO,
        MountOption::NoAtime,
        MountOption::DefaultPermissions,
        MountOption::FSName("cairn".into()),
        MountOption::Subtype("cairn".into()),
    ];
    config.n_threads = Some(threads.clamp(1, 16));
    let session = fuser::spawn_mount(fs, mountpoint, &config).map_err(|e| {
        let fuse = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/fuse");
        Error::invalid(format!(
            "cannot mount at {}: {e}{}",
            mountpoint.display(),
            fuse_hint(fuse.err().as_ref())
        ))
    })?;
    if std::env::var_os(DAEMON_ENV).is_some() {
        detach()?;
    } else {
        crate::say!(
            "Mounted {what} at {}; Ctrl-C or 'cairn umount {}' unmounts",
            mountpoint.display(),
            mountpoint.display()
        );
    }
    loop {
        std::thread::sleep(Duration::from_millis(100));
        if session.guard.is_finished() {
            return match session.join() {
                Ok(()) => Ok(Status::Ok),
                Err(e) => Err(Error::invalid(format!(
                    "the mount ended with an error: {e}"
                ))),
            };
        }
        if interrupt.check().is_err() {
            session
                .umount_and_join()
                .map_err(|e| Error::invalid(format!("unmounting {}: {e}", mountpoint.display())))?;
            return Ok(Status::Ok);
        }
    }
}

/// The archives to mount: the one `spec` names, or every archive of the repository, each in
/// a directory of its own (an archive that cannot be read is left out, with a warning).
fn mounted(repo: &Repository, spec: Option<&str>) -> Result<(Vec<Mounted>, Layout)> {
    Ok(match spec {
        Some(spec) => {
            let (id, meta) = archive::select(repo, spec)?;
            (vec![Mounted::new(id, meta, Vec::new())], Layout::OneArchive)
        }
        None => {
            let list = archive::load_all(repo)?;
            for (id, e) in &list.damaged {
                crate::say!("warning: archive {id} cannot be read ({e}); it is not in the mount");
            }
            let archives = list
                .archives
                .into_iter()
                .map(|(id, meta)| {
                    let name = dir_name(&meta.name, meta.start, &id.to_hex());
                    Mounted::new(id, meta, name.into_bytes())
                })
                .collect();
            (archives, Layout::Repository)
        }
    })
}

/// Tells the waiting parent that the mount is up, then leaves the terminal: a session of
/// its own, and standard streams on /dev/null.
fn detach() -> Result<()> {
    let mut out = std::io::stdout().lock();
    writeln!(out, "{READY}")
        .and_then(|()| out.flush())
        .map_err(|e| Error::io("<stdout>", e))?;
    drop(out);
    let null = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open("/dev/null")
        .map_err(|e| Error::io("/dev/null", e))?;
    let _ = rustix::process::setsid();
    for r in [
        rustix::stdio::dup2_stdin(&null),
        rustix::stdio::dup2_stdout(&null),
        rustix::stdio::dup2_stderr(&null),
    ] {
        r.map_err(|e| Error::io("/dev/null", e.into()))?;
    }
    Ok(())
}

/// An archive's directory in a repository mount: name, time and short id, so that a series
/// of one name stays readable and sorted (`home-2026-12-03T19:16:03-1a2b3c4d`).
fn dir_name(name: &str, start: crate::util::clock::Timestamp, id_hex: &str) -> String {
    format!("{name}-{}-{}", output::time_for_name(start), &id_hex[..8])
}

/// `cairn umount MOUNTPOINT`.
pub fn umount(args: &UmountArgs) -> Result<Status> {
    let m = &args.mountpoint;
    let mut said = Vec::new();
    for (tool, flags) in [
        ("fusermount3", &["-u"][..]),
        ("fusermount", &["-u"][..]),
        ("umount", &[][..]),
    ] {
        match Process::new(tool).args(flags).arg(m).output() {
            Ok(out) if out.status.success() => return Ok(Status::Ok),
            Ok(out) => said.push(String::from_utf8_lossy(&out.stderr).trim().to_string()),
            // Not installed: the next.
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => said.push(format!("{tool}: {e}")),
        }
    }
    said.retain(|s| !s.is_empty());
    Err(Error::invalid(format!(
        "cannot unmount {}{}",
        m.display(),
        if said.is_empty() {
            ": no fusermount or umount found".to_string()
        } else {
            format!(": {}", said.join("; "))
        }
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archive_directories_carry_name_time_and_short_id() {
        output::show_times_in_utc(true);
        let t = crate::util::clock::Timestamp {
            secs: 1_700_000_000,
            nanos: 5,
        };
        assert_eq!(
            dir_name("home", t, "1a2b3c4d5e6f"),
            "home-2023-11-14T22:13:20-1a2b3c4d"
        );
    }

    #[test]
    fn a_failed_mount_names_dev_fuse_when_it_cannot_be_opened() {
        assert_eq!(fuse_hint(None), "");
        let denied = std::io::Error::from_raw_os_error(13);
        let hint = fuse_hint(Some(&denied));
        assert!(
            hint.contains("no access to /dev/fuse") && hint.contains("Permission denied"),
            "{hint}"
        );
        let gone = std::io::Error::from_raw_os_error(2);
        assert!(fuse_hint(Some(&gone)).contains("/dev/fuse cannot be opened"));
    }
}
