//! `create -` and `--stdin-from-command`: one file made from a stream, standard input or what
//! a command writes to its standard output. A read error, or a command that fails, fails the
//! backup.

use std::ffi::OsString;
use std::process::{Child, Command, Stdio};

use super::{FileEnd, Source, Stamp, Stop, Unit};
use crate::error::{Error, Result};
use crate::format::item::{Item, ItemKind, Timestamp};

/// `create -` and `--stdin-from-command`: one file made from a stream.
#[derive(Clone, Debug)]
pub struct StdinSource {
    /// The stored path (`--stdin-name`).
    pub name: Vec<u8>,
    /// Permission bits (`--stdin-mode`, 0600 by default).
    pub mode: u32,
    /// The command whose output is stored, instead of standard input.
    pub command: Option<Vec<OsString>>,
}

impl Source<'_> {
    /// Stores standard input, or what a command writes to its standard output, as one file.
    /// A read error or a command that fails fails the backup.
    pub(super) fn stdin(&mut self, stdin: &StdinSource) -> Result<()> {
        let now = Timestamp::now();
        let item = self.stdin_item(stdin, now);
        let stopped = || Error::Interrupted(0);
        let mut child = match &stdin.command {
            Some(argv) => Some(spawn(argv)?),
            None => None,
        };
        self.send(Unit::FileStart(item)).map_err(|_| stopped())?;
        let mut buf = std::mem::take(&mut self.buf);
        let read = match child.as_mut().and_then(|c| c.stdout.take()) {
            Some(out) => self.chunks_of(out, &mut buf),
            None => self.chunks_of(std::io::stdin().lock(), &mut buf),
        };
        self.buf = buf;
        let what = match &stdin.command {
            Some(argv) => format!(
                "the output of {}",
                argv.first()
                    .map_or(String::new(), |p| p.to_string_lossy().into_owned())
            ),
            None => "standard input".to_string(),
        };
        let read = match read {
            Ok(r) => r,
            Err(Stop) => {
                if let Some(c) = child.as_mut() {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(stopped());
            }
        };
        if let Some(c) = child {
            wait_for(c, &what)?;
        }
        let size = read.map_err(|e| Error::invalid(format!("reading {what}: {e}")))?;
        let stamp = Stamp {
            dev: 0,
            inode: 0,
            size,
            mtime: now,
            ctime: now,
        };
        // The rest as for a file not read: not changed, not cacheable, no link, no attributes.
        self.send(Unit::FileEnd(FileEnd {
            ok: true,
            start: Some(stamp),
            size,
            ..FileEnd::failed()
        }))
        .map_err(|_| stopped())
    }

    /// The item the stream is stored as: `stdin`'s name and mode, the running user's (by
    /// name too, unless `--numeric-ids`), its times `now`.
    fn stdin_item(&mut self, stdin: &StdinSource, now: Timestamp) -> Box<Item> {
        let mut item = Box::new(Item::new(ItemKind::File, stdin.name.clone()));
        item.mode = stdin.mode;
        let (uid, gid) = (
            rustix::process::getuid().as_raw(),
            rustix::process::getgid().as_raw(),
        );
        (item.uid, item.gid) = (uid, gid);
        if !self.opts.meta.numeric_ids {
            item.user = self.names.user(uid);
            item.group = self.names.group(gid);
        }
        item.mtime = now;
        item.ctime = now;
        item
    }
}

/// Starts the command of `--stdin-from-command` (`argv`), its standard output piped.
fn spawn(argv: &[OsString]) -> Result<Child> {
    let (program, args) = argv
        .split_first()
        .ok_or_else(|| Error::invalid("--stdin-from-command needs a command"))?;
    crate::util::secrets::scrub(&mut Command::new(program))
        .args(args)
        .stdout(Stdio::piped())
        .spawn()
        .map_err(|e| Error::invalid(format!("cannot run {}: {e}", program.to_string_lossy())))
}

/// Waits for the command whose output (`what`) was read: one that fails fails the backup.
fn wait_for(mut child: Child, what: &str) -> Result<()> {
    let status = child
        .wait()
        .map_err(|e| Error::invalid(format!("waiting for {what}: {e}")))?;
    if !status.success() {
        return Err(Error::invalid(format!(
            "{} failed ({status}); nothing was saved",
            what.trim_start_matches("the output of ")
        )));
    }
    Ok(())
}
