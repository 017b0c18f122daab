//! Text from outside (file names, lock fields, archive names) made safe to print.

/// `s` with control characters (and the invisible ones that reorder text) escaped, so that a
/// name or a planted lock cannot send escape sequences to the terminal, break a line-based
/// listing with a newline, or disguise what it says.
pub fn printable(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for c in s.chars() {
        let hidden = matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}');
        if c.is_control() || hidden {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    out
}

/// A line for the terminal, made safe whatever was put into it: every control character but
/// the tab escaped as [`printable`] escapes it. This is what every line cairn writes on
/// standard error in text mode goes through, so that a name that reaches a message unescaped
/// (a socket skipped, a file that could not be restored) still cannot forge a line or send an
/// escape sequence.
pub fn safe_line(s: &str) -> std::borrow::Cow<'_, str> {
    escape_where(s, |c| {
        (c.is_control() && c != '\t')
            || matches!(c, '\u{200b}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}' | '\u{feff}')
    })
}

/// Text for standard output made safe for the terminal: the ASCII control characters but
/// newline and tab (ESC, CR, BEL, …) escaped. The rest stays, so that a JSON document printed
/// whole is still valid (JSON escapes those itself; a raw DEL or C1 character in a JSON string
/// is valid and stays); names are escaped where text lines are made.
pub fn safe_output(s: &str) -> std::borrow::Cow<'_, str> {
    escape_where(s, |c| {
        c.is_ascii_control() && c != '\n' && c != '\t' && c != '\x7f'
    })
}

/// `s` with every character `escaped` picks written as [`char::escape_default`] writes it.
fn escape_where(s: &str, escaped: impl Fn(char) -> bool) -> std::borrow::Cow<'_, str> {
    if !s.chars().any(&escaped) {
        return std::borrow::Cow::Borrowed(s);
    }
    let mut out = String::with_capacity(s.len() + 8);
    for c in s.chars() {
        if escaped(c) {
            out.extend(c.escape_default());
        } else {
            out.push(c);
        }
    }
    std::borrow::Cow::Owned(out)
}

/// Bytes (a file name) made printable as [`printable`] does, with each byte that is not part
/// of a UTF-8 character written `\xHH`: `caf\xe9` shows what is on disk, where a
/// replacement character would hide it.
pub fn printable_bytes(b: &[u8]) -> String {
    let mut out = String::with_capacity(b.len());
    for chunk in b.utf8_chunks() {
        out.push_str(&printable(chunk.valid()));
        for byte in chunk.invalid() {
            out.push_str(&format!("\\x{byte:02x}"));
        }
    }
    out
}

/// A path as [`printable_bytes`] shows its bytes.
pub fn printable_path(p: &std::path::Path) -> String {
    use std::os::unix::ffi::OsStrExt;
    printable_bytes(p.as_os_str().as_bytes())
}

/// Up to three of `known` that `wanted` may have meant (a typo, another case, a prefix),
/// closest first, for "did you mean …?".
pub fn closest<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> Vec<&'a str> {
    let lower = wanted.to_lowercase();
    let mut scored: Vec<(f64, &str)> = Vec::new();
    for name in known {
        if name == wanted || scored.iter().any(|(_, n)| *n == name) {
            continue;
        }
        let other = name.to_lowercase();
        let score = if other == lower {
            2.0
        } else if !lower.is_empty() && other.starts_with(&lower) {
            1.5
        } else {
            strsim::jaro_winkler(&lower, &other)
        };
        if score >= 0.85 {
            scored.push((score, name));
        }
    }
    scored.sort_by(|a, b| b.0.total_cmp(&a.0).then(a.1.cmp(b.1)));
    scored.into_iter().take(3).map(|(_, n)| n).collect()
}

/// `" (did you mean \"a\" or \"b\"?)"`, or nothing when no name is close.
pub fn did_you_mean<'a>(wanted: &str, known: impl IntoIterator<Item = &'a str>) -> String {
    let close = closest(wanted, known);
    if close.is_empty() {
        return String::new();
    }
    let quoted: Vec<String> = close
        .iter()
        .map(|n| format!("{:?}", printable(n)))
        .collect();
    format!(" (did you mean {}?)", quoted.join(" or "))
}

#[cfg(test)]
mod tests {
    #[test]
    fn control_and_reordering_characters_are_escaped() {
        assert_eq!(super::printable("a\nb\x1b[2J"), "a\\nb\\u{1b}[2J");
        assert_eq!(super::printable("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(super::printable("plain é"), "plain é");
    }

    #[test]
    fn a_safe_line_is_one_line_without_escape_sequences() {
        let forged = "note: skipping socket x\nerror: forged\r\x1b[2K";
        let line = super::safe_line(forged);
        assert_eq!(line, "note: skipping socket x\\nerror: forged\\r\\u{1b}[2K");
        assert_eq!(super::safe_line("a\tb \\n"), "a\tb \\n");
        assert!(matches!(
            super::safe_line("plain"),
            std::borrow::Cow::Borrowed(_)
        ));
        assert_eq!(
            super::safe_output("{\n  \"a\": \"\u{7f}\u{9b}\"\n}\x1b"),
            "{\n  \"a\": \"\u{7f}\u{9b}\"\n}\\u{1b}"
        );
    }

    #[test]
    fn close_names_are_suggested_and_far_ones_not() {
        let known = ["home", "etc", "home-daily", "Photos", "var-log"];
        assert_eq!(super::closest("hoem", known), vec!["home"]);
        assert_eq!(super::closest("photos", known), vec!["Photos"]);
        assert_eq!(super::closest("home-", known), vec!["home-daily", "home"]);
        assert!(super::closest("zzz", known).is_empty());
        assert!(
            super::closest("etc", known).is_empty(),
            "an exact name is not a suggestion"
        );
        assert_eq!(
            super::did_you_mean("hom", known),
            " (did you mean \"home\" or \"home-daily\"?)"
        );
        assert_eq!(super::did_you_mean("zzz", known), "");
    }

    #[test]
    fn stray_bytes_are_shown_by_value() {
        assert_eq!(super::printable_bytes(b"caf\xe9\n"), "caf\\xe9\\n");
        assert_eq!(super::printable_bytes("é".as_bytes()), "é");
    }
}
