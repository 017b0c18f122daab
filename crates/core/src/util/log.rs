//! What cairn says on standard error: plain lines, or, with `--log-json`, one JSON object per
//! line (the fields are in `docs/json.md`). Every line goes through [`say`] (the
//! [`crate::say`] macro), which counts warnings and, in JSON, tells the kinds apart by the
//! prefixes cairn's lines already carry.

use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Map, Value};

static JSON: AtomicBool = AtomicBool::new(false);

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

/// Writes one JSON object as one line on standard error.
pub fn emit(record: Map<String, Value>) {
    let line = Value::Object(record).to_string();
    let _ = writeln!(std::io::stderr().lock(), "{line}");
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
