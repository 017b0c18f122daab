//! What the restore says as it goes: warnings and errors (each kept for the report), items
//! not restored (a target that is full, or that refuses item after item the same way, stops
//! the restore), and the progress line.

use std::sync::atomic::Ordering;

use super::{lossy, Restorer, Stopped, SAME_ERROR_STOPS};
use crate::format::item::Item;
use crate::util::log::Warning;

impl Restorer<'_> {
    pub(super) fn warn(&mut self, msg: String) {
        self.progress.println(&format!("warning: {msg}"));
        self.report.warnings.push(msg);
    }

    /// A warning about the item at `path` (`msg` names it): in `--log-json` with its path,
    /// `kind` and the system's error number the message carries.
    pub(super) fn warn_at(&mut self, path: &[u8], kind: &'static str, msg: String) {
        let w = Warning::at(path, kind, msg);
        self.progress.say_about(&w, false);
        self.report.warnings.push(w.message);
    }

    /// An error about the item at `path`, as [`Self::warn_at`].
    fn error_at(&mut self, path: &[u8], kind: &'static str, msg: String) {
        let w = Warning::at(path, kind, msg);
        self.progress.say_about(&w, true);
        self.report.errors.push(w.message);
    }

    /// A file (or other item) that could not be made for lack of space: the first is named
    /// with the cause, the rest are counted.
    pub(super) fn target_full(&mut self, path: &[u8], reason: &str) {
        self.report.files_not_restored += 1;
        if self.report.stopped.is_none() {
            self.report.stopped = Some(Stopped {
                cause: reason.to_string(),
                full: true,
            });
            self.error_at(
                path,
                "target-full",
                format!(
                    "{}: not restored: {reason}; the target is full, stopping",
                    lossy(path)
                ),
            );
        }
    }

    /// An item that could not be restored, for `reason`. Once stopped, only counted. A
    /// `cause` from the target's file system (it carries an OS error number) that repeats
    /// item after item stops the restore instead of flooding the terminal.
    pub(super) fn not_restored(&mut self, path: &[u8], reason: &str, cause: &str) {
        if self.report.stopped.is_some() {
            self.report.files_not_restored += 1;
            return;
        }
        let msg = format!("{}: not restored: {reason}", lossy(path));
        self.error_at(path, "not-restored", msg);
        if !cause.contains("(os error ") {
            return;
        }
        match &mut self.repeated {
            Some((last, n)) if last == cause => *n += 1,
            other => *other = Some((cause.to_string(), 1)),
        }
        if self
            .repeated
            .as_ref()
            .is_some_and(|(_, n)| *n >= SAME_ERROR_STOPS)
        {
            self.report.stopped = Some(Stopped {
                cause: cause.to_string(),
                full: false,
            });
        }
    }

    /// The progress line, after `item`: bytes restored, files, bytes fetched and bytes that
    /// were there already.
    pub(super) fn show_progress(&self, item: &Item) {
        let (files, bytes) = (self.report.files, self.report.bytes);
        let kept = self.report.kept_bytes;
        self.progress.set(|| {
            let figures = crate::util::progress::Figures {
                bytes_done: Some(bytes),
                bytes_total: self.total,
                files_done: Some(files),
                bytes_fetched: Some(self.fetched.load(Ordering::Relaxed)),
                bytes_present: Some(kept),
                current: Some(item.display_path()),
                ..Default::default()
            };
            let mut line = format!(
                "{}, {}; {} fetched",
                crate::util::progress::done_of(bytes, self.total, self.started.elapsed()),
                crate::util::progress::count(files, "file"),
                crate::util::progress::size(self.fetched.load(Ordering::Relaxed)),
            );
            if kept > 0 {
                line.push_str(&format!(
                    ", {} there already",
                    crate::util::progress::size(kept)
                ));
            }
            crate::util::progress::Shown {
                message: format!("{line}: {}", item.display_path()),
                figures,
            }
        });
    }
}

#[cfg(test)]
mod tests {
    /// Found by the attack on --log-json: a directory named "d (os error 28)" gave its
    /// warnings errno 28.
    #[test]
    fn the_errno_is_the_reasons_never_the_paths() {
        let w = super::Warning::at(
            b"d (os error 28)/x",
            "skipped",
            "d (os error 28)/x: a directory of another user is in the way; skipped".into(),
        );
        assert_eq!(w.errno, None);
        let w = super::Warning::at(
            b"d (os error 28)/x",
            "not-restored",
            "d (os error 28)/x: not restored: Permission denied (os error 13)".into(),
        );
        assert_eq!(w.errno, Some(13));
    }
}
