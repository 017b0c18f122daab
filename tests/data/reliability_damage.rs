//! Reliability suite, items 5 and 6, through the real binary, for repository format 3.
//!
//! 5. Damage sweeps: bits flipped (every field of the format-2 layout, and random positions)
//!    and objects truncated or extended, for every kind of object:
//!    - packs: the magic, a blob's masked header, ciphertext and tag, the filler, the sealed
//!      table of contents (masked header, ciphertext, tag), the sealed locator; cuts at and around
//!      blob boundaries and inside the TOC; extensions (a zero byte, junk, a copy of the last
//!      blob, a copy of the TOC). `check --verify-data` and the key-less
//!      `check --repository-only` must both exit 2; the plain `check`, which reads only each
//!      pack's tail, must exit 2 whenever the damage reaches the TOC or the locator or
//!      changes the pack's length (how many pack cases it found is counted apart).
//!    - index fragments and archive objects: the clear magic, the masked header, the
//!      ciphertext and the tag of the sealed blob, cuts and extensions: the plain `check` and
//!      `check --repository-only` must both exit 2.
//!    - the key file and the config: every command that reads them (list, check, extract)
//!      exits 2 with a message naming what is wrong. The config is authenticated by the key
//!      (any change of a value is refused), so only an edit that leaves its parsed JSON
//!      identical (a trailing newline) is harmless; in the key file, the case of the hex
//!      digits of `salt`, `nonce` and `data` does not matter either. A harmless edit is
//!      counted apart, and may be accepted or refused, but still without a panic or a wrong
//!      byte.
//!
//!    Nothing may panic, and `extract` must never write a wrong byte: each file it leaves is
//!    identical to the source, and files it cannot restore are absent and reported
//!    (exit != 0).
//! 6. Forgeries by someone who can write the repository but has no key, keeping every content
//!    address valid (objects renamed to their new sha256), 0 accepted: an archive under
//!    another archive's name, an archive of another repository, a chunk blob presented as an
//!    archive, a pack under another pack's name, blobs or their masked headers exchanged or a
//!    tag replaced inside a pack (renamed), an index fragment altered, taken from another
//!    repository or rolled back, a pack of another repository. The plain `check` must refuse
//!    each (exit 2), and no extracted file has wrong contents. The same in-pack edits without
//!    the rename break the content address: they are damage, found by
//!    `check --verify-data` and `check --repository-only`. Controls that must be accepted: the
//!    repository after two legitimate backups, and the repository after an index fragment is
//!    lost and `check --repair` rebuilt the index.
//!
//! One repository is built per test and copied aside; each case starts from that pristine copy.
//! The test opens the repository with its key to find blob boundaries (the attacker could
//! not); nothing the test writes is sealed with the key.

use crate::common;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;
use std::sync::Arc;

use cairn::crypto::{Crypto, MASKED_HEADER_LEN, TAG_LEN};
use cairn::index::fragment::IndexFragment;
use cairn::pack::format::{self, PackEntry, Toc, HEADER_SIZE, LOCATOR_LEN};
use cairn::repo::Repository;
use cairn::store::local::LocalStore;
use cairn::store::Store;
use cairn::util::id::sha256;

use common::{
    assert_trees_equal, cairn, copy_tree, files_under, random_bytes, stderr, stdout, Repo,
    PASSPHRASE,
};

/// Length of the clear magic of packs, index fragments and archive objects.
const MAGIC_LEN: usize = 8;

/// Deterministic xorshift, so that every run sweeps the same positions.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A one-bit mask.
    fn bit(&mut self) -> u8 {
        1 << self.below(8)
    }

    fn bytes(&mut self, n: usize) -> Vec<u8> {
        (0..n).map(|_| self.next() as u8).collect()
    }
}

// ---------------------------------------------------------------------------------------------
// The fixture: two archives over a small tree, with packs of about 200 kB.

struct Archive {
    name: String,
    /// Full archive id (hex).
    id: String,
    /// The directory `create` ran in: the archive's paths are relative to it.
    src: PathBuf,
    /// The objects a healthy extract of it reads (from `CAIRN_STORE_LOG`): damage to any
    /// other pack or archive object cannot reach it, so the sweep does not extract it then.
    reads: HashSet<String>,
}

struct Fixture {
    repo: Repo,
    /// The repository's keys, opened once from the pristine copy (the test's knowledge).
    crypto: Arc<Crypto>,
    pristine: PathBuf,
    scratch: PathBuf,
    archives: Vec<Archive>,
}

fn write_first_tree(root: &Path) {
    let data = root.join("data");
    fs::create_dir_all(data.join("docs")).unwrap();
    // a.bin and b.bin have the same size, so their blobs are the same length (forgery d).
    fs::write(data.join("a.bin"), random_bytes(1, 100_000)).unwrap();
    fs::write(data.join("b.bin"), random_bytes(2, 100_000)).unwrap();
    fs::write(data.join("c.bin"), random_bytes(3, 250_000)).unwrap();
    fs::write(data.join("d.bin"), random_bytes(4, 110_000)).unwrap();
    fs::write(data.join("e.bin"), random_bytes(5, 130_000)).unwrap();
    fs::write(
        data.join("docs/readme.txt"),
        "cairn reliability fixture\n".repeat(40),
    )
    .unwrap();
    fs::write(data.join("docs/notes.txt"), "a small text file\n").unwrap();
    fs::write(data.join("hello.txt"), "hello, world\n").unwrap();
}

/// The second tree: the first one with a file replaced, one edited and one added.
fn write_second_tree(first: &Path, root: &Path) {
    copy_tree(first, root);
    let data = root.join("data");
    fs::write(data.join("b.bin"), random_bytes(6, 100_000)).unwrap();
    fs::write(data.join("hello.txt"), "hello again, world\n").unwrap();
    fs::write(data.join("f.bin"), random_bytes(7, 100_000)).unwrap();
}

/// The repository's crypto state, from its key (what the attacker does not have).
fn open_crypto(path: &Path) -> Arc<Crypto> {
    let repo = Repository::open(Arc::new(LocalStore::new(path)), || Ok(PASSPHRASE.to_vec()))
        .expect("open the repository with its key");
    repo.crypto_arc()
}

fn fixture() -> Fixture {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let work = repo.dir.path().to_path_buf();
    let src1 = work.join("src1");
    let src2 = work.join("src2");
    write_first_tree(&src1);
    write_second_tree(&src1, &src2);
    for (name, src) in [("one", &src1), ("two", &src2)] {
        let o = repo.run_in(src, &["create", name, "data"], &[]);
        assert_eq!(o.status.code(), Some(0), "create {name}: {}", stderr(&o));
    }
    let mut archives = Vec::new();
    for line in repo.ok(&["list", "--json-lines"]).lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let name = v["name"].as_str().unwrap().to_string();
        let src = match name.as_str() {
            "one" => src1.clone(),
            "two" => src2.clone(),
            other => panic!("unexpected archive {other}"),
        };
        archives.push(Archive {
            name,
            id: v["id"].as_str().unwrap().to_string(),
            src,
            reads: HashSet::new(),
        });
    }
    assert_eq!(archives.len(), 2);
    let pristine = work.join("pristine");
    copy_tree(&repo.path, &pristine);
    let scratch = work.join("scratch");
    fs::create_dir_all(&scratch).unwrap();
    // The baseline is healthy and restores exactly, so every finding below is the damage's.
    let o = repo.run(&["check", "--verify-data"]);
    assert_eq!(o.status.code(), Some(0), "baseline: {}", stdout(&o));
    let o = repo.run_env(&["check", "--repository-only"], &[]);
    assert_eq!(o.status.code(), Some(0), "baseline: {}", stdout(&o));
    for a in &mut archives {
        let target = scratch.join("baseline");
        let log = scratch.join("reads.log");
        let id = format!("aid:{}", a.id);
        let o = repo.run_env(
            &["extract", &id, "--target", target.to_str().unwrap()],
            &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
        );
        assert_eq!(o.status.code(), Some(0), "baseline: {}", stderr(&o));
        assert_trees_equal(&a.src.join("data"), &target.join("data"));
        fs::remove_dir_all(&target).unwrap();
        a.reads = fs::read_to_string(&log)
            .unwrap()
            .lines()
            .filter_map(|l| match l.split(' ').collect::<Vec<_>>()[..] {
                [_, "get", name] => Some(name.to_string()),
                _ => None,
            })
            .collect();
        fs::remove_file(&log).unwrap();
        assert!(
            a.reads.contains(&format!("archives/{}", a.id)),
            "the store log shows the reads: {:?}",
            a.reads
        );
    }
    let crypto = open_crypto(&pristine);
    let fx = Fixture {
        repo,
        crypto,
        pristine,
        scratch,
        archives,
    };
    assert!(fx.packs().len() >= 4, "expected several packs");
    fx
}

/// A pack of the pristine repository, opened with the key.
struct PackInfo {
    /// Relative to the repository.
    rel: PathBuf,
    bytes: Vec<u8>,
    toc: Toc,
}

impl PackInfo {
    fn blobs(&self) -> &[PackEntry] {
        &self.toc.entries
    }

    fn range(e: &PackEntry) -> std::ops::Range<usize> {
        e.offset as usize..(e.offset + e.len) as usize
    }

    fn blob(&self, i: usize) -> &[u8] {
        &self.bytes[Self::range(&self.blobs()[i])]
    }

    fn toc_start(&self) -> usize {
        self.toc.toc_start as usize
    }

    /// Length of the sealed TOC.
    fn toc_len(&self) -> usize {
        self.bytes.len() - LOCATOR_LEN - self.toc_start()
    }
}

/// The kinds of object the sweep damages.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Kind {
    Pack,
    Index,
    Archive,
    Key,
    Config,
}

#[derive(Default)]
struct Tally {
    cases: usize,
    /// Damage cases detected / forgeries refused.
    detected: usize,
    /// Pack damage cases; how many of them both `check --verify-data` and the key-less
    /// `check --repository-only` found, and how many the plain check (TOC only) found.
    pack_cases: usize,
    pack_deep_detected: usize,
    pack_plain_detected: usize,
    /// Forgeries that break a content address (no rename): damage, found by the deep checks.
    damage_like: usize,
    /// Key or config edits that leave the JSON's meaning unchanged (see `harmless_json_edit`).
    harmless: usize,
    controls: usize,
    commands: usize,
    panics: usize,
    wrong_bytes: usize,
    wrong_files: usize,
    failures: Vec<String>,
}

struct Extracted {
    /// Some archive's extract exited non-zero.
    any_failed: bool,
    /// Every archive's extract exited non-zero.
    all_failed: bool,
    /// Every archive extracted completely with exit 0.
    complete: bool,
}

impl Fixture {
    fn restore(&self) {
        fs::remove_dir_all(&self.repo.path).unwrap();
        copy_tree(&self.pristine, &self.repo.path);
    }

    /// The packs, in an order that does not depend on their names (which change with the
    /// random keys from run to run), so that every run damages the same blobs.
    fn packs(&self) -> Vec<PackInfo> {
        let mut packs: Vec<PackInfo> = files_under(&self.pristine.join("packs"))
            .into_iter()
            .map(|p| {
                let bytes = fs::read(&p).unwrap();
                let toc = format::parse(&self.crypto, &bytes, "pack").unwrap();
                let rel = p.strip_prefix(&self.pristine).unwrap().to_path_buf();
                PackInfo { rel, bytes, toc }
            })
            .collect();
        packs.sort_by_key(|p| {
            let lens: Vec<(u32, u32)> = p.blobs().iter().map(|e| (e.len, e.plain_len)).collect();
            (lens, p.rel.clone())
        });
        packs
    }

    fn objects(&self, dir: &str) -> Vec<PathBuf> {
        files_under(&self.pristine.join(dir))
            .into_iter()
            .map(|p| p.strip_prefix(&self.pristine).unwrap().to_path_buf())
            .collect()
    }

    fn store(&self) -> LocalStore {
        LocalStore::new(&self.repo.path)
    }

    /// Counts a command; a panic (or a death by signal) is a failure of the case.
    fn observe(&self, t: &mut Tally, case: &str, args: &[&str], o: &Output) {
        t.commands += 1;
        let err = stderr(o);
        if err.contains("panicked") || matches!(o.status.code(), None | Some(101)) {
            t.panics += 1;
            t.failures.push(format!(
                "{case}: cairn {args:?} panicked or died ({:?}):\n{err}",
                o.status
            ));
        }
    }

    /// Runs cairn with the passphrase.
    fn run(&self, t: &mut Tally, case: &str, args: &[&str]) -> Output {
        let o = self.repo.run(args);
        self.observe(t, case, args, &o);
        o
    }

    /// Runs cairn without any passphrase in its environment (and no terminal): what the host
    /// of the repository can do.
    fn run_keyless(&self, t: &mut Tally, case: &str, args: &[&str]) -> Output {
        let env: Vec<(&str, &str)> = self
            .repo
            .env
            .iter()
            .filter(|(k, _)| k != "CAIRN_PASSPHRASE")
            .map(|(k, v)| (k.as_str(), v.as_str()))
            .collect();
        let o = cairn(args, &env);
        self.observe(t, case, args, &o);
        o
    }

    /// Extracts every archive by id into an empty directory and compares file by file: a file
    /// that is there must be identical to the source; a file that is not must be reported.
    /// With `damaged`, only the archives whose extract reads that object.
    fn extract_all(&self, t: &mut Tally, case: &str, damaged: Option<&Path>) -> Extracted {
        let mut r = Extracted {
            any_failed: false,
            all_failed: true,
            complete: true,
        };
        for a in &self.archives {
            if let Some(d) = damaged.and_then(|d| d.to_str()) {
                if !a.reads.contains(d) {
                    continue;
                }
            }
            let target = self.scratch.join("x");
            let _ = fs::remove_dir_all(&target);
            let id = format!("aid:{}", a.id);
            let o = self.run(
                t,
                case,
                &["extract", &id, "--target", target.to_str().unwrap()],
            );
            let ok = o.status.code() == Some(0);
            for f in files_under(&target) {
                let rel = f.strip_prefix(&target).unwrap();
                let got = fs::read(&f).unwrap();
                let wrong = match fs::read(a.src.join(rel)) {
                    Ok(want) => differing_bytes(&want, &got),
                    Err(_) => got.len().max(1),
                };
                if wrong > 0 {
                    t.wrong_files += 1;
                    t.wrong_bytes += wrong;
                    t.failures.push(format!(
                        "{case}: extract {id} wrote {} with {wrong} wrong bytes (exit {:?})",
                        rel.display(),
                        o.status.code()
                    ));
                }
            }
            let absent: Vec<String> = files_under(&a.src)
                .iter()
                .map(|s| s.strip_prefix(&a.src).unwrap())
                .filter(|rel| {
                    !fs::symlink_metadata(target.join(rel)).is_ok_and(|m| m.file_type().is_file())
                })
                .map(|rel| rel.display().to_string())
                .collect();
            if !absent.is_empty() && (ok || stderr(&o).trim().is_empty()) {
                t.failures.push(format!(
                    "{case}: extract {id} left out {absent:?} without reporting it (exit {:?}):\n{}",
                    o.status.code(),
                    stderr(&o)
                ));
            }
            r.any_failed |= !ok;
            r.all_failed &= !ok;
            r.complete &= ok && absent.is_empty();
            let _ = fs::remove_dir_all(&target);
        }
        r
    }

    /// Extracts an archive that exists only because of a forgery: it must fail (exit 2) and
    /// write nothing.
    fn extract_forged(&self, t: &mut Tally, case: &str, id: &str) {
        let target = self.scratch.join("forged");
        let _ = fs::remove_dir_all(&target);
        let aid = format!("aid:{id}");
        let o = self.run(
            t,
            case,
            &["extract", &aid, "--target", target.to_str().unwrap()],
        );
        let written = files_under(&target);
        if o.status.code() != Some(2) || !written.is_empty() {
            t.failures.push(format!(
                "{case}: extract {aid} exited {:?} and wrote {} files:\n{}",
                o.status.code(),
                written.len(),
                stderr(&o)
            ));
            t.wrong_files += written.len();
        }
        let _ = fs::remove_dir_all(&target);
    }
}

fn differing_bytes(want: &[u8], got: &[u8]) -> usize {
    let common = want.len().min(got.len());
    let diff = want[..common]
        .iter()
        .zip(&got[..common])
        .filter(|(a, b)| a != b)
        .count();
    diff + want.len().abs_diff(got.len())
}

/// Whether a command exited 2; if not, records why as a failure.
fn want_exit_2(t: &mut Tally, label: &str, cmd: &str, o: &Output) -> bool {
    if o.status.code() == Some(2) {
        return true;
    }
    t.failures.push(format!(
        "{label}: {cmd} exited {:?}, not 2:\n{}{}",
        o.status.code(),
        stdout(o),
        stderr(o)
    ));
    false
}

// ---------------------------------------------------------------------------------------------
// 5. Damage sweeps

enum Edit {
    Flip(usize, u8),
    Truncate(usize),
    Extend(Vec<u8>),
}

impl Edit {
    fn apply(&self, b: &[u8]) -> Vec<u8> {
        let mut v = b.to_vec();
        match self {
            Edit::Flip(i, mask) => v[*i] ^= mask,
            Edit::Truncate(n) => v.truncate(*n),
            Edit::Extend(more) => v.extend_from_slice(more),
        }
        v
    }

    fn describe(&self, len: usize) -> String {
        match self {
            Edit::Flip(i, mask) => format!("flip bit {mask:#04x} at {i}/{len}"),
            Edit::Truncate(n) => format!("truncate {len} -> {n}"),
            Edit::Extend(more) => format!("extend {len} by {} bytes", more.len()),
        }
    }
}

struct Case {
    kind: Kind,
    /// Object path relative to the repository.
    rel: PathBuf,
    what: String,
    edit: Edit,
    /// Packs: the edit reaches the TOC or its length, or changes the pack's length, so the
    /// plain check (which reads the pack's tail) must find it too.
    tail: bool,
}

#[derive(Default)]
struct Cases(Vec<Case>);

impl Cases {
    fn add(&mut self, kind: Kind, rel: &Path, what: impl Into<String>, edit: Edit) {
        self.0.push(Case {
            kind,
            rel: rel.to_path_buf(),
            what: what.into(),
            edit,
            tail: false,
        })
    }

    fn pack(&mut self, p: &PackInfo, what: impl Into<String>, edit: Edit) {
        let tail = match edit {
            Edit::Flip(i, _) => i >= p.toc_start(),
            Edit::Truncate(_) | Edit::Extend(_) => true,
        };
        self.0.push(Case {
            kind: Kind::Pack,
            rel: p.rel.clone(),
            what: what.into(),
            edit,
            tail,
        })
    }
}

/// The edits every key file and config gets: first and last byte flipped, `random` bits
/// flipped at random positions, truncation to nothing and by one byte, one byte appended.
fn generic_edits(rng: &mut Rng, len: usize, random: usize) -> Vec<(String, Edit)> {
    let mut v = vec![
        ("first byte".to_string(), Edit::Flip(0, rng.bit())),
        ("last byte".to_string(), Edit::Flip(len - 1, rng.bit())),
    ];
    for _ in 0..random {
        v.push(("random byte".into(), Edit::Flip(rng.below(len), rng.bit())));
    }
    v.push(("emptied".into(), Edit::Truncate(0)));
    v.push(("last byte cut".into(), Edit::Truncate(len - 1)));
    v.push(("one byte appended".into(), Edit::Extend(vec![0])));
    v
}

/// The fields of a sealed blob of `len` bytes at `off`: (name, offset of a byte of it).
fn blob_fields(rng: &mut Rng, off: usize, len: usize) -> Vec<(&'static str, usize)> {
    let ciphertext = len - MASKED_HEADER_LEN - TAG_LEN;
    vec![
        ("masked header, first byte", off),
        ("masked header, last byte", off + MASKED_HEADER_LEN - 1),
        ("ciphertext, first byte", off + MASKED_HEADER_LEN),
        (
            "ciphertext, random byte",
            off + MASKED_HEADER_LEN + rng.below(ciphertext),
        ),
        ("tag, first byte", off + len - TAG_LEN),
        ("tag, last byte", off + len - 1),
    ]
}

/// Damage to an object that is an 8-byte magic and a sealed blob (index fragments, archives).
fn sealed_object_cases(cases: &mut Cases, rng: &mut Rng, kind: Kind, rel: &Path, bytes: &[u8]) {
    let len = bytes.len();
    let blob = len - MAGIC_LEN;
    for (what, at) in [("magic, first byte", 0), ("magic, version byte", 7)] {
        cases.add(kind, rel, what, Edit::Flip(at, rng.bit()));
    }
    for (what, at) in blob_fields(rng, MAGIC_LEN, blob) {
        cases.add(kind, rel, what, Edit::Flip(at, rng.bit()));
    }
    for _ in 0..2 {
        let at = rng.below(len);
        cases.add(kind, rel, "random byte", Edit::Flip(at, rng.bit()));
    }
    let body = MAGIC_LEN + MASKED_HEADER_LEN;
    for (what, n) in [
        ("emptied", 0),
        ("cut inside the magic", 7),
        ("cut after the magic", MAGIC_LEN),
        ("cut inside the masked header", MAGIC_LEN + 16),
        ("cut after the masked header", body),
        (
            "cut inside the ciphertext",
            body + (len - TAG_LEN - body) / 2,
        ),
        ("tag cut off", len - TAG_LEN),
        ("last byte cut", len - 1),
    ] {
        cases.add(kind, rel, what, Edit::Truncate(n));
    }
    for (what, more) in [
        ("one zero byte appended", vec![0]),
        ("16 bytes of junk appended", rng.bytes(16)),
        (
            "its sealed blob appended again",
            bytes[MAGIC_LEN..].to_vec(),
        ),
    ] {
        cases.add(kind, rel, what, Edit::Extend(more));
    }
}

/// Offset of the first character of the value of `"key"` in pretty-printed JSON (inside the
/// quotes for a string).
fn json_value_pos(bytes: &[u8], key: &str) -> usize {
    let pat = format!("\"{key}\": ");
    let at = bytes
        .windows(pat.len())
        .position(|w| w == pat.as_bytes())
        .unwrap_or_else(|| panic!("no {key} in {}", String::from_utf8_lossy(bytes)))
        + pat.len();
    if bytes[at] == b'"' {
        at + 1
    } else {
        at
    }
}

/// Whether an edited key file or config means exactly what the original did: equal JSON
/// values. The config is authenticated by the key and compared value by value, and its id has
/// one spelling only, so nothing else is harmless there. In the key file, `salt`, `nonce` and
/// `data` are hex that decodes without regard to case, so their case does not matter (the
/// `repository` id is compared as a string and does). Such an edit is not damage: cairn may
/// accept it or refuse it, but it must still never panic or write a wrong byte.
fn harmless_json_edit(orig: &[u8], new: &[u8], kind: Kind) -> bool {
    fn lower_hex_fields(v: &mut serde_json::Value) {
        if let Some(m) = v.as_object_mut() {
            for (k, v) in m.iter_mut() {
                match v {
                    serde_json::Value::String(s) if ["salt", "nonce", "data"].contains(&&**k) => {
                        *s = s.to_ascii_lowercase()
                    }
                    v => lower_hex_fields(v),
                }
            }
        }
    }
    let parse = |b: &[u8]| serde_json::from_slice::<serde_json::Value>(b).ok();
    let (Some(mut a), Some(mut b)) = (parse(orig), parse(new)) else {
        return false;
    };
    if kind == Kind::Key {
        lower_hex_fields(&mut a);
        lower_hex_fields(&mut b);
    }
    a == b
}

fn pack_cases(cases: &mut Cases, rng: &mut Rng, packs: &[PackInfo]) {
    // Every pack: a byte of the magic, of a random blob's masked header, ciphertext and tag,
    // of the TOC and of its length; the last byte cut, a byte appended.
    for p in packs {
        let len = p.bytes.len();
        cases.pack(p, "pack magic", Edit::Flip(rng.below(MAGIC_LEN), rng.bit()));
        let i = rng.below(p.blobs().len());
        let e = p.blobs()[i];
        let fields = blob_fields(rng, e.offset as usize, e.len as usize);
        for f in [1, 3, 5] {
            let (field, at) = fields[f];
            cases.pack(p, format!("blob {i}: {field}"), Edit::Flip(at, rng.bit()));
        }
        let toc = p.toc_start() + rng.below(p.toc_len());
        cases.pack(p, "table of contents", Edit::Flip(toc, rng.bit()));
        let locator = len - LOCATOR_LEN + rng.below(LOCATOR_LEN);
        cases.pack(p, "locator", Edit::Flip(locator, rng.bit()));
        let filler = (p.toc.blobs_end as usize, p.toc.filler_len() as usize);
        if filler.1 > 0 {
            cases.pack(
                p,
                "filler",
                Edit::Flip(filler.0 + rng.below(filler.1), rng.bit()),
            );
        }
        cases.pack(p, "last byte cut", Edit::Truncate(len - 1));
        cases.pack(p, "one byte appended", Edit::Extend(vec![0]));
    }

    // The pack with the most blobs: every field of its first, second and last blob, of its
    // TOC and its length; cuts at and around a blob boundary and inside the TOC; extensions
    // (one of them a valid blob, one a valid TOC: only the position tells).
    let victim = packs
        .iter()
        .max_by_key(|p| p.blobs().len())
        .filter(|p| p.blobs().len() >= 3)
        .expect("a pack with several blobs");
    let len = victim.bytes.len();
    for (what, at) in [("magic, first byte", 0), ("magic, version byte", 7)] {
        cases.pack(victim, what, Edit::Flip(at, rng.bit()));
    }
    let last = victim.blobs().len() - 1;
    for i in [0, 1, last] {
        let e = victim.blobs()[i];
        for (field, at) in blob_fields(rng, e.offset as usize, e.len as usize) {
            cases.pack(
                victim,
                format!("blob {i}: {field}"),
                Edit::Flip(at, rng.bit()),
            );
        }
    }
    for (field, at) in blob_fields(rng, victim.toc_start(), victim.toc_len()) {
        cases.pack(
            victim,
            format!("table of contents: {field}"),
            Edit::Flip(at, rng.bit()),
        );
    }
    for (field, at) in blob_fields(rng, len - LOCATOR_LEN, LOCATOR_LEN) {
        cases.pack(
            victim,
            format!("locator: {field}"),
            Edit::Flip(at, rng.bit()),
        );
    }
    let first = victim.blobs()[0];
    let second = victim.blobs()[1];
    let boundary = (first.offset + first.len) as usize;
    let second_end = (second.offset + second.len) as usize;
    let toc = victim.toc_start();
    assert_eq!(first.offset as usize, HEADER_SIZE);
    for (what, n) in [
        ("emptied", 0),
        ("cut inside the pack magic", 7),
        ("cut after the pack magic", HEADER_SIZE),
        ("cut 1 byte into the first blob", HEADER_SIZE + 1),
        ("cut at a blob boundary", boundary),
        ("cut 1 byte into a masked header", boundary + 1),
        ("cut inside a masked header", boundary + 16),
        ("cut after a masked header", boundary + MASKED_HEADER_LEN),
        (
            "cut inside a blob's ciphertext",
            boundary + MASKED_HEADER_LEN + (second.len as usize - MASKED_HEADER_LEN) / 2,
        ),
        ("cut inside a blob's tag", second_end - TAG_LEN / 2),
        ("cut where the TOC starts", toc),
        ("cut inside the TOC's masked header", toc + 16),
        (
            "cut inside the TOC's ciphertext",
            toc + victim.toc_len() / 2,
        ),
        ("cut inside the TOC's tag", len - LOCATOR_LEN - TAG_LEN / 2),
        ("locator cut off", len - LOCATOR_LEN),
        ("cut inside the locator", len - 2),
        ("last byte cut", len - 1),
    ] {
        cases.pack(victim, what, Edit::Truncate(n));
    }
    for (what, more) in [
        ("one zero byte appended", vec![0]),
        ("a masked header's worth of junk appended", rng.bytes(32)),
        ("4 KiB of junk appended", rng.bytes(4096)),
        (
            "a copy of its last blob appended",
            victim.blob(last).to_vec(),
        ),
        (
            "a copy of its TOC and locator appended",
            victim.bytes[toc..].to_vec(),
        ),
    ] {
        cases.pack(victim, what, Edit::Extend(more));
    }
}

fn damage_cases(fx: &Fixture) -> Vec<Case> {
    let mut rng = Rng(0x5eed_0bad_cafe_f00d);
    let mut cases = Cases::default();

    pack_cases(&mut cases, &mut rng, &fx.packs());

    // Index fragments and archive objects: a magic and a sealed blob each.
    for (kind, dir) in [(Kind::Index, "index"), (Kind::Archive, "archives")] {
        for rel in fx.objects(dir) {
            let bytes = fs::read(fx.pristine.join(&rel)).unwrap();
            sealed_object_cases(&mut cases, &mut rng, kind, &rel, &bytes);
        }
    }

    // The key file and the config: random positions, and one bit of every field's value.
    let json_objects = [
        (
            Kind::Key,
            fx.objects("keys")[0].clone(),
            &[
                "version",
                "repository",
                "algorithm",
                "memory_kib",
                "iterations",
                "parallelism",
                "salt",
                "cipher",
                "nonce",
                "data",
                "label",
            ][..],
        ),
        (
            Kind::Config,
            PathBuf::from("config"),
            &[
                "format",
                "version",
                "id",
                "encryption",
                "algorithm",
                "min_size",
                "avg_size",
                "max_size",
                "pack_size",
                "padding",
            ][..],
        ),
    ];
    for (kind, rel, fields) in json_objects {
        let bytes = fs::read(fx.pristine.join(&rel)).unwrap();
        let len = bytes.len();
        for (what, e) in generic_edits(&mut rng, len, 6) {
            cases.add(kind, &rel, what, e);
        }
        for field in fields {
            let at = json_value_pos(&bytes, field);
            cases.add(
                kind,
                &rel,
                format!("value of {field}"),
                Edit::Flip(at, 0x01),
            );
        }
        for (what, n) in [("cut in half", len / 2), ("closing brace cut", len - 2)] {
            cases.add(kind, &rel, what, Edit::Truncate(n));
        }
        for (what, more) in [
            ("junk appended", &b"x"[..]),
            ("a newline appended", b"\n"),
            ("a second object appended", b"{}"),
        ] {
            cases.add(kind, &rel, what, Edit::Extend(more.to_vec()));
        }
    }
    // Hex digits upper-cased: the config's id has one spelling (refused), the key's
    // repository id is compared as text (refused), its salt, nonce and data decode alike.
    for (kind, rel, field) in [
        (Kind::Config, PathBuf::from("config"), "id"),
        (Kind::Key, fx.objects("keys")[0].clone(), "repository"),
        (Kind::Key, fx.objects("keys")[0].clone(), "data"),
    ] {
        let bytes = fs::read(fx.pristine.join(&rel)).unwrap();
        let at = json_value_pos(&bytes, field);
        let letter = at
            + bytes[at..]
                .iter()
                .position(|b| b.is_ascii_lowercase())
                .unwrap();
        cases.add(
            kind,
            &rel,
            format!("a hex digit of {field} upper-cased"),
            Edit::Flip(letter, 0x20),
        );
    }
    cases.0
}

fn clear_open_error(err: &str) -> bool {
    err.contains("cairn: error:")
        && ["config", "key", "passphrase", "repository"]
            .iter()
            .any(|w| err.contains(w))
}

fn run_damage_case(fx: &Fixture, t: &mut Tally, case: &Case) {
    fx.restore();
    let path = fx.repo.path.join(&case.rel);
    let orig = fs::read(&path).unwrap();
    let new = case.edit.apply(&orig);
    fs::write(&path, &new).unwrap();
    let label = format!(
        "{:?} {} ({}): {}",
        case.kind,
        case.rel.display(),
        case.what,
        case.edit.describe(orig.len())
    );
    t.cases += 1;
    match case.kind {
        Kind::Pack => {
            // The deep check reads every blob; the key-less one hashes every object.
            let deep = fx.run(t, &label, &["check", "--verify-data"]);
            let keyless = fx.run_keyless(t, &label, &["check", "--repository-only"]);
            let plain = fx.run(t, &label, &["check"]);
            t.pack_cases += 1;
            let plain_found = plain.status.code() == Some(2);
            if plain_found {
                t.pack_plain_detected += 1;
            }
            let mut found = want_exit_2(t, &label, "check --verify-data", &deep);
            found &= want_exit_2(t, &label, "check --repository-only (no key)", &keyless);
            if found {
                t.pack_deep_detected += 1;
            }
            if case.tail {
                // The plain check reads the TOC and its length, and knows the pack's size.
                found &= want_exit_2(t, &label, "check (damage in the pack's tail)", &plain);
            }
            if found {
                t.detected += 1;
            }
            fx.extract_all(t, &label, Some(case.rel.as_path()));
        }
        Kind::Index | Kind::Archive => {
            let plain = fx.run(t, &label, &["check"]);
            let keyless = fx.run_keyless(t, &label, &["check", "--repository-only"]);
            let mut found = want_exit_2(t, &label, "check", &plain);
            found &= want_exit_2(t, &label, "check --repository-only (no key)", &keyless);
            if found {
                t.detected += 1;
            }
            // Every extract reads every index fragment; an archive object only matters to the
            // archive it is.
            let only = (case.kind == Kind::Archive).then_some(case.rel.as_path());
            fx.extract_all(t, &label, only);
        }
        Kind::Key | Kind::Config => {
            let list = fx.run(t, &label, &["list"]);
            let check = fx.run(t, &label, &["check"]);
            let ex = fx.extract_all(t, &label, None);
            if harmless_json_edit(&orig, &new, case.kind) {
                t.harmless += 1;
                return;
            }
            let mut refused = ex.all_failed;
            if !ex.all_failed {
                t.failures.push(format!("{label}: extract did not refuse"));
            }
            for (cmd, o) in [("list", &list), ("check", &check)] {
                let err = stderr(o);
                if o.status.code() != Some(2) || !clear_open_error(&err) {
                    refused = false;
                    t.failures.push(format!(
                        "{label}: {cmd} exited {:?} (want 2 with a clear message):\n{}{err}",
                        o.status.code(),
                        stdout(o)
                    ));
                }
            }
            if refused {
                t.detected += 1;
            }
        }
    }
}

#[test]
fn damage_sweep_every_object_kind() {
    let started = std::time::Instant::now();
    let fx = fixture();
    let cases = damage_cases(&fx);
    let mut t = Tally::default();
    for case in &cases {
        run_damage_case(&fx, &mut t, case);
    }
    eprintln!(
        "damage sweep: {} cases, {} detected, {} harmless key/config edits; packs: {} cases, \
         {} found by check --verify-data and check --repository-only, {} ({} in the tail) by \
         the plain check (TOC only); {} panics, {} wrong bytes, {} wrong files ({} commands, \
         {:.1} s)",
        t.cases,
        t.detected,
        t.harmless,
        t.pack_cases,
        t.pack_deep_detected,
        t.pack_plain_detected,
        cases.iter().filter(|c| c.tail).count(),
        t.panics,
        t.wrong_bytes,
        t.wrong_files,
        t.commands,
        started.elapsed().as_secs_f64()
    );
    assert!(
        t.failures.is_empty(),
        "{} failures:\n{}",
        t.failures.len(),
        t.failures.join("\n\n")
    );
    assert_eq!(t.detected + t.harmless, t.cases);
    assert_eq!((t.panics, t.wrong_bytes, t.wrong_files), (0, 0, 0));
}

// ---------------------------------------------------------------------------------------------
// 6. Forgeries

/// A forgery that keeps every content address valid: the plain check must refuse it (exit 2),
/// and no extracted file may be wrong. `forged` names an archive id that exists only because
/// of the forgery: extracting it must fail and write nothing.
fn forgery(
    fx: &Fixture,
    t: &mut Tally,
    what: &str,
    forged: Option<&str>,
    forge: impl FnOnce(&Fixture),
) {
    fx.restore();
    forge(fx);
    t.cases += 1;
    fx.run(t, what, &["list"]);
    let check = fx.run(t, what, &["check"]);
    if want_exit_2(t, what, "check", &check) {
        t.detected += 1;
    }
    fx.extract_all(t, what, None);
    if let Some(id) = forged {
        fx.extract_forged(t, what, id);
    }
}

/// An edit that breaks a content address (not renamed): damage, which `check --verify-data`
/// and the key-less `check --repository-only` must find; no extracted file may be wrong.
fn damage_like(fx: &Fixture, t: &mut Tally, what: &str, forge: impl FnOnce(&Fixture)) {
    fx.restore();
    forge(fx);
    t.cases += 1;
    t.damage_like += 1;
    let deep = fx.run(t, what, &["check", "--verify-data"]);
    let keyless = fx.run_keyless(t, what, &["check", "--repository-only"]);
    let mut found = want_exit_2(t, what, "check --verify-data", &deep);
    found &= want_exit_2(t, what, "check --repository-only (no key)", &keyless);
    if found {
        t.detected += 1;
    }
    fx.extract_all(t, what, None);
}

/// Stores `bytes` as a pack under their own hash and deletes the pack at `old_rel`; the
/// index, sealed with the key, cannot be rewritten to match.
fn rename_pack(fx: &Fixture, old_rel: &Path, bytes: &[u8]) {
    let new_name = common::planted_pack_id(&fx.repo.path, bytes).object_name();
    assert_ne!(Path::new(&new_name), old_rel);
    fx.store().put(&new_name, bytes).unwrap();
    fs::remove_file(fx.repo.path.join(old_rel)).unwrap();
}

/// Copies an object of another repository into this one, under the same (content) name.
fn import(fx: &Fixture, other: &Path, rel: &Path) {
    let to = fx.repo.path.join(rel);
    fs::create_dir_all(to.parent().unwrap()).unwrap();
    fs::copy(other.join(rel), to).unwrap();
}

fn rel_under(root: &Path, dir: &str) -> Vec<PathBuf> {
    files_under(&root.join(dir))
        .into_iter()
        .map(|p| p.strip_prefix(root).unwrap().to_path_buf())
        .collect()
}

#[test]
fn forgeries_are_never_accepted() {
    let started = std::time::Instant::now();
    let fx = fixture();
    let mut t = Tally::default();
    let archive_path = |id: &str| fx.repo.path.join("archives").join(id);
    let (one, two) = (fx.archives[0].id.clone(), fx.archives[1].id.clone());

    // Another repository with the same passphrase and the same first tree.
    let other = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let first = fx.archives.iter().find(|a| a.name == "one").unwrap();
    let o = other.run_in(&first.src, &["create", "one", "data"], &[]);
    assert_eq!(o.status.code(), Some(0), "create: {}", stderr(&o));

    // (a) An archive object under another archive's name; an archive of another repository
    //     under its own (content) name.
    for (from, to) in [(&one, &two), (&two, &one)] {
        forgery(
            &fx,
            &mut t,
            &format!("(a) archive {from} copied over archives/{to}"),
            None,
            |_| {
                fs::copy(archive_path(from), archive_path(to)).unwrap();
            },
        );
    }
    for rel in rel_under(&other.path, "archives") {
        let id = rel.file_name().unwrap().to_str().unwrap().to_string();
        forgery(
            &fx,
            &mut t,
            &format!("(a) archive {id} of another repository copied in"),
            Some(&id),
            |fx| import(fx, &other.path, &rel),
        );
    }

    // (b) Chunk blobs (cut out of their packs) presented as archives under their sha256, as
    //     they are and behind the archive magic.
    let packs = fx.packs();
    for p in &packs {
        let mut sample = vec![0, p.blobs().len() - 1];
        sample.dedup();
        for i in sample {
            let blob = p.blob(i).to_vec();
            let chunk = p.blobs()[i].id.to_hex();
            let mut framed = cairn::archive::OBJECT_MAGIC.to_vec();
            framed.extend_from_slice(&blob);
            for (how, bytes) in [("as it is", blob), ("behind the archive magic", framed)] {
                let name = hex::encode(sha256(&bytes));
                forgery(
                    &fx,
                    &mut t,
                    &format!("(b) chunk {chunk} stored as archives/{name}, {how}"),
                    Some(&name),
                    |_| fs::write(archive_path(&name), &bytes).unwrap(),
                );
            }
        }
    }

    // (c) A pack copied over the next one's name (every pack once).
    for (i, p) in packs.iter().enumerate() {
        let next = &packs[(i + 1) % packs.len()];
        forgery(
            &fx,
            &mut t,
            &format!("(c) {} copied over {}", p.rel.display(), next.rel.display()),
            None,
            |fx| fs::write(fx.repo.path.join(&next.rel), &p.bytes).unwrap(),
        );
    }

    // (d) Inside one pack: two blobs of equal length exchanged, or their masked headers
    //     exchanged, or a tag replaced; the pack renamed to its new sha256 (the index cannot
    //     follow), and, as damage, left under its old name.
    let (victim, x, y) = packs
        .iter()
        .find_map(|p| {
            let b = p.blobs();
            (0..b.len()).find_map(|x| {
                (x + 1..b.len())
                    .find(|&y| b[x].len == b[y].len)
                    .map(|y| (p, x, y))
            })
        })
        .expect("a pack with two blobs of equal length (a.bin and b.bin)");
    let (ex, ey) = (victim.blobs()[x], victim.blobs()[y]);
    let (rx, ry) = (PackInfo::range(&ex), PackInfo::range(&ey));
    let mut swapped = victim.bytes.clone();
    swapped[rx.clone()].copy_from_slice(&victim.bytes[ry.clone()]);
    swapped[ry.clone()].copy_from_slice(&victim.bytes[rx.clone()]);
    let header = |r: &std::ops::Range<usize>| r.start..r.start + MASKED_HEADER_LEN;
    let mut headers = victim.bytes.clone();
    headers[header(&rx)].copy_from_slice(&victim.bytes[header(&ry)]);
    headers[header(&ry)].copy_from_slice(&victim.bytes[header(&rx)]);
    let mut tag = victim.bytes.clone();
    tag[rx.end - TAG_LEN..rx.end].copy_from_slice(&Rng(0x7a9).bytes(TAG_LEN));
    for (how, bytes) in [
        ("two whole blobs of equal length exchanged", &swapped),
        ("the masked headers of two blobs exchanged", &headers),
        ("a blob's tag replaced", &tag),
    ] {
        forgery(
            &fx,
            &mut t,
            &format!("(d) {how}, the pack renamed to its sha256"),
            None,
            |fx| rename_pack(fx, &victim.rel, bytes),
        );
        damage_like(
            &fx,
            &mut t,
            &format!("(d) {how}, under the pack's old name"),
            |fx| fs::write(fx.repo.path.join(&victim.rel), bytes).unwrap(),
        );
    }

    // (e) Index fragments: one altered and renamed to its sha256; one of another repository;
    //     one of an older state of this repository, naming packs compact has since deleted.
    let frag_rel = fx.objects("index")[0].clone();
    let frag = fs::read(fx.pristine.join(&frag_rel)).unwrap();
    let mut altered = frag.clone();
    let at = MAGIC_LEN + MASKED_HEADER_LEN + (frag.len() - MAGIC_LEN - MASKED_HEADER_LEN) / 2;
    altered[at] ^= 0x10;
    forgery(
        &fx,
        &mut t,
        "(e) a byte of an index fragment's ciphertext flipped, renamed to its sha256",
        None,
        |fx| {
            fs::remove_file(fx.repo.path.join(&frag_rel)).unwrap();
            fx.store()
                .put(&IndexFragment::object_name(&altered), &altered)
                .unwrap();
        },
    );
    for rel in rel_under(&other.path, "index") {
        forgery(
            &fx,
            &mut t,
            &format!("(e) index fragment {} of another repository", rel.display()),
            None,
            |fx| import(fx, &other.path, &rel),
        );
    }
    let old_fragments = fx.objects("index");
    forgery(
        &fx,
        &mut t,
        "(e) rollback: the index fragments of before a delete and compact put back",
        None,
        |fx| {
            let aid = format!("aid:{one}");
            fx.repo.ok(&["delete", &aid]);
            fx.repo.ok(&["compact", "--threshold", "0"]);
            let gone: Vec<PathBuf> = fx
                .objects("packs")
                .into_iter()
                .filter(|p| !fx.repo.path.join(p).exists())
                .collect();
            assert!(!gone.is_empty(), "compact deleted no pack");
            let mut restored = 0;
            for rel in &old_fragments {
                let to = fx.repo.path.join(rel);
                if !to.exists() {
                    fs::copy(fx.pristine.join(rel), to).unwrap();
                    restored += 1;
                }
            }
            assert!(restored > 0, "compact rewrote no index fragment");
        },
    );

    // (f) A pack of another repository, under its own (content) name.
    for rel in rel_under(&other.path, "packs").into_iter().take(2) {
        forgery(
            &fx,
            &mut t,
            &format!("(f) pack {} of another repository", rel.display()),
            None,
            |fx| import(fx, &other.path, &rel),
        );
    }

    // Control 1: the repository after two legitimate backups is valid, and restores exactly.
    fx.restore();
    t.controls += 1;
    let what = "control: two legitimate backups";
    let deep = fx.run(&mut t, what, &["check", "--verify-data"]);
    let keyless = fx.run_keyless(&mut t, what, &["check", "--repository-only"]);
    let ex_all = fx.extract_all(&mut t, what, None);
    if deep.status.code() != Some(0) || keyless.status.code() != Some(0) || !ex_all.complete {
        t.failures.push(format!(
            "{what}: a valid repository was refused (check --verify-data {:?}, \
             --repository-only {:?}):\n{}{}",
            deep.status.code(),
            keyless.status.code(),
            stdout(&deep),
            stdout(&keyless)
        ));
    }
    // Control 2: an index fragment lost. The plain check reports it (packs no fragment
    // names, chunks the archives use missing from the index); `check --repair` rebuilds the
    // index from the packs, after which the repository is valid and restores exactly.
    for rel in fx.objects("index") {
        fx.restore();
        t.controls += 1;
        let what = format!("control: {} deleted, then check --repair", rel.display());
        fs::remove_file(fx.repo.path.join(&rel)).unwrap();
        let plain = fx.run(&mut t, &what, &["check"]);
        if plain.status.code() == Some(0) {
            t.failures.push(format!(
                "{what}: check did not report the lost fragment:\n{}",
                stdout(&plain)
            ));
        }
        let repair = fx.run(&mut t, &what, &["check", "--repair"]);
        let deep = fx.run(&mut t, &what, &["check", "--verify-data"]);
        let ex_all = fx.extract_all(&mut t, &what, None);
        if deep.status.code() != Some(0) || !ex_all.complete {
            t.failures.push(format!(
                "{what}: not valid after the repair (check --repair {:?}, \
                 check --verify-data {:?}):\n{}{}{}",
                repair.status.code(),
                deep.status.code(),
                stdout(&repair),
                stderr(&repair),
                stdout(&deep)
            ));
        }
    }

    eprintln!(
        "forgeries: {} cases ({} refused by the plain check, {} without rename found as damage \
         by check --verify-data and --repository-only), {} detected, {} accepted, {} panics, \
         {} wrong bytes, {} wrong files; {} controls ({} commands, {:.1} s)",
        t.cases,
        t.cases - t.damage_like,
        t.damage_like,
        t.detected,
        t.cases - t.detected,
        t.panics,
        t.wrong_bytes,
        t.wrong_files,
        t.controls,
        t.commands,
        started.elapsed().as_secs_f64()
    );
    assert!(
        t.failures.is_empty(),
        "{} failures:\n{}",
        t.failures.len(),
        t.failures.join("\n\n")
    );
    assert_eq!(t.detected, t.cases);
    assert_eq!((t.panics, t.wrong_bytes, t.wrong_files), (0, 0, 0));
}
