//! What cairn says on standard error: plain lines, or, with `--log-json`, one JSON object per
//! line (the fields are in `docs/json.md`). Every line goes through [`say`] (the
//! [`crate::say`] macro), which counts warnings and, in JSON, tells the kinds apart by the
//! prefixes cairn's lines already carry.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};

use serde_json::{json, Map, Value};

static JSON: AtomicBool = AtomicBool::new(false);

/// Where JSON records go instead of standard error (`cairn ui` hands them to the page that
/// started the work).
pub type Sink = Arc<dyn Fn(&str) + Send + Sync>;

static SINK: RwLock<Option<Sink>> = RwLock::new(None);

/// Sends every JSON record to `sink` instead of standard error (`None`: standard error again).
pub fn set_sink(sink: Option<Sink>) {
    *SINK.write().unwrap_or_else(|p| p.into_inner()) = sink;
}

/// Switches standard error to JSON lines (`--log-json`).
pub fn set_json(on: bool) {
    JSON.store(on, Ordering::Relaxed);
}

pub fn is_json() -> bool {
    JSON.load(Ordering::Relaxed)
}

/// Says `line` on standard error, as it is or as a JSON object.
pub fn say(line: &str) {
    if line.starts_with("warning:") {
        crate::util::progress::count_warning();
    }
    if is_json() {
        // A blank line (spacing for people) is not a record.
        if !line.trim().is_empty() {
            emit(classify(line));
        }
    } else {
        // One line, whatever a name inside it holds (a newline, ESC, CR).
        let line = crate::util::text::safe_line(line);
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

/// A warning about one path (a source file that could not be read, an item not restored as
/// it was): said as `warning: MESSAGE`, and in JSON with its `path`, `kind` and `errno`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Warning {
    /// The whole text, the path included.
    pub message: String,
    /// The path, printable (as [`crate::util::text::printable_path`] gives it).
    pub path: String,
    /// What went wrong, one word for programs: `unreadable`, `vanished`, `changed`,
    /// `replaced`, `attributes`, `not-restored`, … (`docs/json.md` lists them).
    pub kind: &'static str,
    /// The system's error number, when an error of the system was the cause.
    pub errno: Option<i32>,
}

impl Warning {
    /// A warning about `path`: `PATH: what`.
    pub fn about(
        path: &std::path::Path,
        kind: &'static str,
        what: impl std::fmt::Display,
    ) -> Warning {
        let path = crate::util::text::printable_path(path);
        Warning {
            message: format!("{path}: {what}"),
            path,
            kind,
            errno: None,
        }
    }

    /// A warning about no path in particular.
    pub fn plain(message: impl Into<String>) -> Warning {
        Warning {
            message: message.into(),
            path: String::new(),
            kind: "",
            errno: None,
        }
    }

    /// A warning about `path` (its bytes) of `kind`: `message` names it; the errno is the one
    /// the message's reason carries, never one a path that looks like one seems to.
    pub fn at(path: &[u8], kind: &'static str, message: String) -> Warning {
        let shown = crate::util::text::printable_bytes(path);
        let reason = message.strip_prefix(shown.as_str()).unwrap_or(&message);
        Warning {
            errno: Warning::errno_in(reason),
            message: message.clone(),
            path: shown,
            kind,
        }
    }

    /// A warning about `path` caused by `e`: its kind is `vanished` when the path no longer
    /// exists, else `kind`.
    pub fn io(
        path: &std::path::Path,
        kind: &'static str,
        what: &str,
        e: &std::io::Error,
    ) -> Warning {
        let kind = match e.kind() {
            std::io::ErrorKind::NotFound => "vanished",
            _ => kind,
        };
        let text = if what.is_empty() {
            e.to_string()
        } else {
            format!("{what}: {e}")
        };
        Warning {
            errno: e.raw_os_error(),
            ..Warning::about(path, kind, text)
        }
    }

    /// The system's error number a message carries (`… (os error 13)`), if any.
    pub fn errno_in(text: &str) -> Option<i32> {
        let (_, rest) = text.rsplit_once("(os error ")?;
        rest.split_once(')')?.0.parse().ok()
    }

    /// Says it on standard error as a warning (counted), or with `error` as an error.
    pub fn say(&self, error: bool) {
        let prefix = if error {
            "error"
        } else {
            crate::util::progress::count_warning();
            "warning"
        };
        let text = format!("{prefix}: {}", self.message);
        if is_json() {
            let mut m = classify(&text);
            if !self.kind.is_empty() {
                m.insert("path".into(), self.path.clone().into());
                m.insert("kind".into(), self.kind.into());
            }
            if let Some(n) = self.errno {
                m.insert("errno".into(), n.into());
            }
            emit(m);
        } else {
            let line = crate::util::text::safe_line(&text);
            let _ = writeln!(std::io::stderr(), "{line}");
        }
    }
}

impl std::fmt::Display for Warning {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Writes one JSON object as one line on standard error.
pub fn emit(record: Map<String, Value>) {
    let line = Value::Object(record).to_string();
    let sink = SINK.read().unwrap_or_else(|p| p.into_inner()).clone();
    match sink {
        Some(sink) => sink(&line),
        None => {
            let _ = writeln!(std::io::stderr().lock(), "{line}");
        }
    }
}

/// A line's JSON form: `warning: …`, `error: …` (and `cairn: error: …`), `note: …`,
/// `hook KIND: …`, anything else a `log` record.
fn classify(line: &str) -> Map<String, Value> {
    let plain = line.strip_prefix("cairn: ").unwrap_or(line);
    let record = if let Some(m) = plain.strip_prefix("warning: ") {
        json!({"type": "warning", "message": m})
    } else if let Some(m) = plain.strip_prefix("error: ") {
        json!({"type": "error", "message": m})
    } else if let Some(m) = plain.strip_prefix("note: ") {
        json!({"type": "note", "message": m})
    } else if let Some((kind, m)) = plain
        .strip_prefix("hook ")
        .and_then(|rest| rest.split_once(": "))
        .filter(|(kind, _)| ["before", "after", "failure", "finally"].contains(kind))
    {
        json!({"type": "hook", "hook": kind, "line": m})
    } else {
        json!({"type": "log", "message": plain})
    };
    match record {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::classify;
    use serde_json::Value;

    fn kind(line: &str) -> (String, String) {
        let m = classify(line);
        let text = m
            .get("message")
            .or_else(|| m.get("line"))
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        (m["type"].as_str().unwrap_or_default().to_string(), text)
    }

    #[test]
    fn a_warning_about_a_path_has_its_kind_and_errno() {
        let e = std::io::Error::from_raw_os_error(13);
        let w = super::Warning::io(std::path::Path::new("/s/f"), "unreadable", "", &e);
        assert_eq!(w.path, "/s/f");
        assert_eq!(w.kind, "unreadable");
        assert_eq!(w.errno, Some(13));
        assert!(
            w.message.starts_with("/s/f: Permission denied"),
            "{}",
            w.message
        );
        let gone = std::io::Error::from_raw_os_error(2);
        let w = super::Warning::io(
            std::path::Path::new("/s/g"),
            "unreadable",
            "read error",
            &gone,
        );
        assert_eq!(w.kind, "vanished");
        assert!(
            w.message.starts_with("/s/g: read error: No such file"),
            "{}",
            w.message
        );
        assert_eq!(super::Warning::errno_in(&w.message), Some(2));
        assert_eq!(super::Warning::errno_in("a (os error x)"), None);
        assert_eq!(super::Warning::errno_in("no number"), None);
    }

    #[test]
    fn lines_are_told_apart_by_their_prefixes() {
        let pair = |a: &str, b: &str| (a.to_string(), b.to_string());
        assert_eq!(kind("warning: x: gone"), pair("warning", "x: gone"));
        assert_eq!(kind("cairn: error: no space"), pair("error", "no space"));
        assert_eq!(
            kind("error: f: not restored"),
            pair("error", "f: not restored")
        );
        assert_eq!(kind("note: skipping"), pair("note", "skipping"));
        assert_eq!(kind("hook after: pinged"), pair("hook", "pinged"));
        assert_eq!(classify("hook after: x")["hook"], "after");
        assert_eq!(kind("hook maybe: x"), pair("log", "hook maybe: x"));
        assert_eq!(
            kind("cairn: 2 warnings (see above)"),
            pair("log", "2 warnings (see above)")
        );
    }
}
