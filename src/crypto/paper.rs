//! The paper form of a key file: for printing, and for typing back in by hand.
//!
//! ```text
//! cairn key for repository 1a2b3c4d5e6f7a8b (592 bytes)
//!  1: 7b22 7665 7273 696f 6e22 3a32 2c22 7265 706f - 3f1a
//!  2: …
//! end: 9c41 07d2
//! ```
//!
//! Each line holds 18 bytes of the key file in hex, and a checksum of its number and bytes (the
//! first two bytes of their sha256), so that a typo is found in the line where it was made.
//! The last line is the first four bytes of the sha256 of the whole key file. Spaces and the
//! case of the hex digits do not matter when it is read back.

use sha2::{Digest, Sha256};

use crate::error::{Error, Result};

const PER_LINE: usize = 18;

fn line_check(n: usize, data: &[u8]) -> String {
    let mut h = Sha256::new();
    h.update((n as u32).to_le_bytes());
    h.update(data);
    hex::encode(&h.finalize()[..2])
}

fn groups(hex: &str) -> String {
    hex.as_bytes()
        .chunks(4)
        .map(|c| String::from_utf8_lossy(c).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

/// The paper form of `key` (a key file's bytes), for the repository `repo_hex`.
pub fn encode(key: &[u8], repo_hex: &str) -> String {
    let mut out = format!(
        "cairn key for repository {} ({} bytes)\n",
        &repo_hex[..16.min(repo_hex.len())],
        key.len()
    );
    for (i, chunk) in key.chunks(PER_LINE).enumerate() {
        let n = i + 1;
        out.push_str(&format!(
            "{n:>3}: {} - {}\n",
            groups(&hex::encode(chunk)),
            line_check(n, chunk)
        ));
    }
    out.push_str(&format!(
        "end: {}\n",
        groups(&hex::encode(&Sha256::digest(key)[..4]))
    ));
    out
}

/// The key file's bytes from its paper form; a wrong line is named.
pub fn decode(text: &str) -> Result<Vec<u8>> {
    let bad = |msg: String| Error::invalid(format!("paper key: {msg}"));
    let mut key = Vec::new();
    let mut expected = 1usize;
    let mut end = None;
    for raw in text.lines() {
        let line = raw.trim();
        let heading = line.to_lowercase().starts_with("cairn");
        if line.is_empty() || heading || line.starts_with('#') {
            continue;
        }
        let Some((label, rest)) = line.split_once(':') else {
            return Err(bad(format!("{line:?} is not a line of a paper key")));
        };
        let label = label.trim();
        if label.eq_ignore_ascii_case("end") {
            end = Some(rest.split_whitespace().collect::<String>().to_lowercase());
            continue;
        }
        let n: usize = label
            .parse()
            .map_err(|_| bad(format!("{line:?}: a line starts with its number")))?;
        if n != expected {
            return Err(bad(format!("line {expected} is missing (found line {n})")));
        }
        let (data, check) = rest
            .rsplit_once('-')
            .ok_or_else(|| bad(format!("line {n}: its checksum (after '-') is missing")))?;
        let data_hex: String = data.split_whitespace().collect::<String>().to_lowercase();
        let bytes = hex::decode(&data_hex)
            .ok()
            .filter(|b| !b.is_empty() && b.len() <= PER_LINE)
            .ok_or_else(|| bad(format!("line {n}: not hex digits in groups of four")))?;
        if check.split_whitespace().collect::<String>().to_lowercase() != line_check(n, &bytes) {
            return Err(bad(format!(
                "line {n} does not match its checksum: a typo in that line"
            )));
        }
        key.extend_from_slice(&bytes);
        expected += 1;
    }
    let end = end.ok_or_else(|| bad("the last line (end: …) is missing".into()))?;
    if key.is_empty() || end != hex::encode(&Sha256::digest(&key)[..4]) {
        return Err(bad(
            "the lines do not add up to the key (a line is missing or out of order)".into(),
        ));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_typos_are_found_in_their_line() {
        let key: Vec<u8> = (0..100u8).collect();
        let paper = encode(&key, "00112233445566778899");
        assert_eq!(decode(&paper).unwrap(), key);
        // Spaces and case do not matter.
        assert_eq!(decode(&paper.to_uppercase().replace(' ', "")).unwrap(), key);
        // One wrong digit in line 3.
        let lines: Vec<&str> = paper.lines().collect();
        let (label, data) = lines[3].split_once(": ").unwrap();
        let first = if data.starts_with('f') { "0" } else { "f" };
        let typo = format!("{label}: {first}{}", &data[1..]);
        let mut changed = lines.clone();
        changed[3] = &typo;
        let err = decode(&changed.join("\n")).unwrap_err().to_string();
        assert!(err.contains("line 3"), "{err}");
        // A line left out.
        let mut missing = lines.clone();
        missing.remove(2);
        let err = decode(&missing.join("\n")).unwrap_err().to_string();
        assert!(err.contains("line 2 is missing"), "{err}");
    }
}
