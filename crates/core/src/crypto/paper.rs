//! The paper form of a key, for printing and for typing back in by hand.
//!
//! ```text
//! cairn paper key 2 for repository 1a2b3c4d5e6f7a8b (495 bytes)
//!  1: 02c0 4da7 41cf 41e2 cc00 0001 0003 0110 8850 009e - 3f1a
//!  2: …
//! end: 9c41 07d2
//! ```
//!
//! Each line holds up to 24 bytes in hex, and a checksum of its number and bytes (the first
//! two bytes of their sha256), so that a typo is found in the line where it was made. The last
//! line is the first four bytes of the sha256 of all the bytes. Spaces and the case of the hex
//! digits do not matter when it is read back.
//!
//! The bytes are the key file's key material in binary (format 2), 21 lines for a default
//! repository (23 lines in all) where the first form took 81 (83):
//!
//! | bytes | what |
//! |---|---|
//! | 1 | 2, this encoding |
//! | 8 | the first 8 bytes of the repository's id (the rest is the repository's own) |
//! | 4, 4, 1 | argon2id memory (KiB), passes, lanes; little-endian |
//! | 1 + n | the salt's length and the salt |
//! | 12 | the nonce of the wrapping |
//! | rest | the wrapped key and config (AES-256-GCM, tag included) |
//!
//! The key file's sealed label (when and by whom it was made) is left out: it is cosmetic and
//! as long as a line or three. `key import` seals a new one for the key file it writes. The
//! first paper form (the key file's JSON in hex, 18 bytes a line) is still read.

use sha2::{Digest, Sha256};

use super::kdf::KdfParams;
use super::keyfile::KeyFile;
use crate::error::{Error, Result};

/// Bytes a line holds (the first form held 18; both are read).
const PER_LINE: usize = 24;
/// The first byte of the binary form.
const BINARY: u8 = 2;
/// How much of the repository's id the binary form holds.
const ID_PREFIX: usize = 8;

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

fn bad(msg: impl std::fmt::Display) -> Error {
    Error::invalid(format!("paper key: {msg}"))
}

/// The binary form of a key file's key material.
fn to_binary(kf: &KeyFile) -> Result<Vec<u8>> {
    let salt = kf.kdf.validate()?;
    let id = hex::decode(&kf.repository)
        .ok()
        .filter(|id| id.len() == 32)
        .ok_or_else(|| Error::corrupt("key file", "its repository id is not 32 bytes of hex"))?;
    let nonce = hex::decode(&kf.nonce)
        .ok()
        .filter(|n| n.len() == 12)
        .ok_or_else(|| Error::corrupt("key file", "bad nonce"))?;
    let data = hex::decode(&kf.data).map_err(|_| Error::corrupt("key file", "data is not hex"))?;
    let lanes = u8::try_from(kf.kdf.parallelism)
        .map_err(|_| Error::corrupt("key file", "KDF parallelism out of range"))?;
    let mut out = vec![BINARY];
    out.extend_from_slice(&id[..ID_PREFIX]);
    out.extend_from_slice(&kf.kdf.memory_kib.to_le_bytes());
    out.extend_from_slice(&kf.kdf.iterations.to_le_bytes());
    out.push(lanes);
    out.push(salt.len() as u8);
    out.extend_from_slice(&salt);
    out.extend_from_slice(&nonce);
    out.extend_from_slice(&data);
    Ok(out)
}

/// A key file (without its label) from its binary form, for the repository `repo_id`.
fn from_binary(b: &[u8], repo_id: &[u8; 32]) -> Result<KeyFile> {
    let short = || bad("the key material is cut short");
    let take = |at: &mut usize, n: usize| -> Result<&[u8]> {
        let part = b.get(*at..*at + n).ok_or_else(short)?;
        *at += n;
        Ok(part)
    };
    let u32_at = |s: &[u8]| u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let mut at = 1;
    let prefix = take(&mut at, ID_PREFIX)?;
    if prefix != &repo_id[..ID_PREFIX] {
        return Err(Error::invalid(format!(
            "this key is for repository {}…, not for this one ({})",
            hex::encode(prefix),
            hex::encode(repo_id)
        )));
    }
    let memory_kib = u32_at(take(&mut at, 4)?);
    let iterations = u32_at(take(&mut at, 4)?);
    let parallelism = u32::from(take(&mut at, 1)?[0]);
    let salt_len = usize::from(take(&mut at, 1)?[0]);
    let salt = hex::encode(take(&mut at, salt_len)?);
    let nonce = hex::encode(take(&mut at, 12)?);
    let data = b.get(at..).filter(|d| !d.is_empty()).ok_or_else(short)?;
    let kdf = KdfParams {
        memory_kib,
        iterations,
        parallelism,
        salt,
        ..KdfParams::new_default()
    };
    kdf.validate()?;
    Ok(KeyFile::unlabelled(repo_id, kdf, nonce, hex::encode(data)))
}

/// The paper form of `key` (a key file's bytes).
pub fn encode(key: &[u8]) -> Result<String> {
    let kf = KeyFile::parse(key, "the key file")?;
    let bytes = to_binary(&kf)?;
    let mut out = format!(
        "cairn paper key {BINARY} for repository {} ({} bytes)\n",
        &kf.repository[..16.min(kf.repository.len())],
        bytes.len()
    );
    for (i, chunk) in bytes.chunks(PER_LINE).enumerate() {
        let n = i + 1;
        out.push_str(&format!(
            "{n:>3}: {} - {}\n",
            groups(&hex::encode(chunk)),
            line_check(n, chunk)
        ));
    }
    out.push_str(&format!(
        "end: {}\n",
        groups(&hex::encode(&Sha256::digest(&bytes)[..4]))
    ));
    Ok(out)
}

/// What a paper key gives back.
pub enum Paper {
    /// The first form: a key file's bytes, label included.
    KeyFile(Vec<u8>),
    /// The binary form: the key file without its label.
    Unlabelled(KeyFile),
}

/// The key from its paper form, for the repository `repo_id`; a wrong line is named.
pub fn decode(text: &str, repo_id: &[u8; 32]) -> Result<Paper> {
    let bytes = lines(text)?;
    if bytes.first() == Some(&b'{') {
        return Ok(Paper::KeyFile(bytes));
    }
    if bytes.first() != Some(&BINARY) {
        return Err(bad(format!(
            "unknown form {} (this cairn reads 2 and the JSON form)",
            bytes[0]
        )));
    }
    Ok(Paper::Unlabelled(from_binary(&bytes, repo_id)?))
}

/// The bytes the lines of a paper key add up to, each line checked by its checksum.
fn lines(text: &str) -> Result<Vec<u8>> {
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
    let end = end.ok_or_else(|| bad("the last line (end: …) is missing"))?;
    if key.is_empty() || end != hex::encode(&Sha256::digest(&key)[..4]) {
        return Err(bad(
            "the lines do not add up to the key (a line is missing or out of order)",
        ));
    }
    Ok(key)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::MasterKey;

    const REPO: [u8; 32] = [0x5a; 32];

    /// A key file as `init` makes one: the default KDF cost, a config of a real repository's
    /// length.
    fn key_file() -> (MasterKey, KeyFile) {
        let k = MasterKey::generate();
        let config = vec![b'x'; 360];
        let kdf = KdfParams {
            memory_kib: 64,
            iterations: 1,
            ..KdfParams::new_default()
        };
        let kf = KeyFile::wrap(&k, &config, &REPO, b"pw", kdf).unwrap();
        (k, kf)
    }

    /// The first paper form: the key file's JSON, 18 bytes a line.
    fn first_form(key: &[u8]) -> String {
        let mut out = "cairn key for repository 5a5a5a5a5a5a5a5a\n".to_string();
        for (i, chunk) in key.chunks(18).enumerate() {
            let hex = groups(&hex::encode(chunk));
            out.push_str(&format!(
                "{:>3}: {hex} - {}\n",
                i + 1,
                line_check(i + 1, chunk)
            ));
        }
        let end = groups(&hex::encode(&Sha256::digest(key)[..4]));
        out + &format!("end: {end}\n")
    }

    fn unlabelled(paper: &str) -> KeyFile {
        match decode(paper, &REPO).unwrap() {
            Paper::Unlabelled(kf) => kf,
            Paper::KeyFile(_) => panic!("the binary form read as JSON"),
        }
    }

    #[test]
    fn a_key_fits_on_24_lines_and_opens_again() {
        let (k, kf) = key_file();
        let paper = encode(&kf.to_bytes()).unwrap();
        let lines = paper.lines().filter(|l| !l.trim().is_empty()).count();
        assert!(lines <= 24, "{lines} lines:\n{paper}");
        assert!(paper.lines().all(|l| l.len() <= 80), "{paper}");
        let back = unlabelled(&paper);
        assert_eq!(back.kdf, kf.kdf);
        assert_eq!((&back.nonce, &back.data), (&kf.nonce, &kf.data));
        assert_eq!(back.repository, kf.repository);
        let (k2, config) = back.unwrap_unlabelled(&REPO, b"pw").unwrap();
        assert_eq!((k2.id_key, config.len()), (k.id_key, 360));
        // Without a label it is not a whole key file until it gets one.
        assert!(back.unwrap_key(&REPO, b"pw").is_err());
        let mut labelled = back;
        labelled.label_anew(&k2, &REPO).unwrap();
        labelled.unwrap_key(&REPO, b"pw").unwrap();
        // Spaces and case do not matter.
        let squeezed = paper.to_uppercase().replace(' ', "");
        assert_eq!(unlabelled(&squeezed).data, kf.data);
    }

    #[test]
    fn typos_are_found_in_their_line() {
        let (_, kf) = key_file();
        let paper = encode(&kf.to_bytes()).unwrap();
        let lines: Vec<&str> = paper.lines().collect();
        let (label, data) = lines[3].split_once(": ").unwrap();
        let first = if data.starts_with('f') { "0" } else { "f" };
        let typo = format!("{label}: {first}{}", &data[1..]);
        let mut changed = lines.clone();
        changed[3] = &typo;
        let err = decode(&changed.join("\n"), &REPO)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("line 3"), "{err}");
        let mut missing = lines.clone();
        missing.remove(2);
        let err = decode(&missing.join("\n"), &REPO)
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("line 2 is missing"), "{err}");
    }

    #[test]
    fn the_first_form_is_still_read() {
        let (_, kf) = key_file();
        let json = kf.to_bytes();
        let old = first_form(&json);
        assert!(old.lines().count() > 40, "{}", old.lines().count());
        match decode(&old, &REPO).unwrap() {
            Paper::KeyFile(b) => assert_eq!(b, json),
            Paper::Unlabelled(_) => panic!("the JSON form read as binary"),
        }
    }

    #[test]
    fn another_repositorys_key_is_named_and_damage_is_an_error_not_a_panic() {
        let (_, kf) = key_file();
        let paper = encode(&kf.to_bytes()).unwrap();
        let err = decode(&paper, &[1; 32]).err().unwrap().to_string();
        assert!(err.contains("this key is for repository 5a5a"), "{err}");
        // Every cut of the key material, framed as a valid paper key, is refused cleanly:
        // before the wrapped key by the decoder, after it by the wrapping's tag.
        let bytes = lines(&paper).unwrap();
        let header = 1 + ID_PREFIX + 4 + 4 + 1 + 1 + 16 + 12;
        for n in 1..bytes.len() {
            match decode(&paper_of(&bytes[..n]), &REPO) {
                Err(_) => assert!(n <= header, "cut at {n} refused by the decoder"),
                Ok(Paper::Unlabelled(cut)) => {
                    assert!(n > header, "cut at {n} decoded");
                    assert!(cut.unwrap_unlabelled(&REPO, b"pw").is_err(), "cut at {n}");
                }
                Ok(Paper::KeyFile(_)) => panic!("cut at {n} read as JSON"),
            }
        }
    }

    /// `bytes` framed as a paper key (checksums right).
    fn paper_of(bytes: &[u8]) -> String {
        let mut out = String::new();
        for (i, chunk) in bytes.chunks(PER_LINE).enumerate() {
            let hex = groups(&hex::encode(chunk));
            out.push_str(&format!(
                "{}: {hex} - {}\n",
                i + 1,
                line_check(i + 1, chunk)
            ));
        }
        out + &format!("end: {}\n", hex::encode(&Sha256::digest(bytes)[..4]))
    }
}
