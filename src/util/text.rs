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

#[cfg(test)]
mod tests {
    #[test]
    fn control_and_reordering_characters_are_escaped() {
        assert_eq!(super::printable("a\nb\x1b[2J"), "a\\nb\\u{1b}[2J");
        assert_eq!(super::printable("x\u{202e}y"), "x\\u{202e}y");
        assert_eq!(super::printable("plain é"), "plain é");
    }
}
