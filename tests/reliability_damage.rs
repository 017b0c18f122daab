//! Reliability suite, items 5 and 6, through the real binary.
//!
//! 5. Damage sweeps: bits flipped (first byte, last byte, every field of a blob header, random
//!    positions) and objects truncated or extended, for every kind of object: packs (blob
//!    payloads and blob headers), index fragments, archive objects, the key file and the config.
//!    Every case must be detected (`check` exits 2; for the key file and the config, every
//!    command that reads them exits 2 with a message naming what is wrong), nothing may panic,
//!    and `extract` must never write a wrong byte: each file it leaves is identical to the
//!    source, and files it cannot restore are absent and reported (exit != 0). An edit of the
//!    key file or the config that leaves its meaning intact (a trailing newline, the case of a
//!    hex digit, the writers' `pack_size`) is not damage: it is counted apart, and may be
//!    accepted or refused, but still without a panic or a wrong byte.
//! 6. Forgeries, 0 accepted: objects that are authentic somewhere, presented elsewhere (an
//!    archive under another archive's name, a chunk blob as an archive, a pack under another
//!    pack's name, blobs or index entries exchanged with the pack renamed and the index rebuilt
//!    to match, index entries pointing at another blob). Some command must refuse each, and no
//!    extracted file has wrong contents. A control case (two whole blobs reordered, which
//!    leaves every blob authentic) must be accepted.
//!
//! One repository is built per test and copied aside; each case starts from that pristine copy.

mod common;

use std::collections::HashSet;
use std::fs;
use std::path::{Path, PathBuf};
use std::process::Output;

use cairn::id::{sha256, PackId};
use cairn::index::fragment::IndexFragment;
use cairn::index::persist;
use cairn::pack::format::{self, PackEntry};
use cairn::store::local::LocalStore;
use cairn::store::Store;

use common::{assert_trees_equal, copy_tree, files_under, random_bytes, stderr, stdout, Repo};

/// Size of a blob header (docs/design.md, "Blob envelope").
const BLOB_HEADER: usize = 72;

/// The fields of a blob header: (name, offset of a byte of it).
const HEADER_FIELDS: [(&str, usize); 15] = [
    ("magic", 0),
    ("version", 4),
    ("kind", 5),
    ("compression", 6),
    ("encryption", 7),
    ("id, first byte", 8),
    ("id, last byte", 39),
    ("plaintext length, low byte", 40),
    ("plaintext length, high byte", 43),
    ("payload length, low byte", 44),
    ("payload length, high byte", 47),
    ("session id, first byte", 48),
    ("session id, last byte", 63),
    ("nonce counter, low byte", 64),
    ("nonce counter, high byte", 71),
];

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
        let src = match v["name"].as_str().unwrap() {
            "one" => src1.clone(),
            "two" => src2.clone(),
            other => panic!("unexpected archive {other}"),
        };
        archives.push(Archive {
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
    let fx = Fixture {
        repo,
        pristine,
        scratch,
        archives,
    };
    assert!(fx.packs().len() >= 4, "expected several packs");
    fx
}

/// A pack of the pristine repository, walked.
struct PackInfo {
    /// Relative to the repository.
    rel: PathBuf,
    bytes: Vec<u8>,
    blobs: Vec<PackEntry>,
}

impl PackInfo {
    fn blob(&self, i: usize) -> &[u8] {
        let e = &self.blobs[i];
        &self.bytes[e.offset as usize..(e.offset + e.len) as usize]
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

    fn packs(&self) -> Vec<PackInfo> {
        files_under(&self.pristine.join("packs"))
            .into_iter()
            .map(|p| {
                let bytes = fs::read(&p).unwrap();
                let blobs = format::walk(&bytes, "pack").unwrap();
                let rel = p.strip_prefix(&self.pristine).unwrap().to_path_buf();
                PackInfo { rel, bytes, blobs }
            })
            .collect()
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

    /// Runs cairn; a panic (or a death by signal) is a failure of the case.
    fn run(&self, t: &mut Tally, case: &str, args: &[&str]) -> Output {
        let o = self.repo.run(args);
        t.commands += 1;
        let err = stderr(&o);
        if err.contains("panicked") || matches!(o.status.code(), None | Some(101)) {
            t.panics += 1;
            t.failures.push(format!(
                "{case}: cairn {args:?} panicked or died ({:?}):\n{err}",
                o.status
            ));
        }
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
}

/// The edits every object gets: first and last byte flipped, `random` bits flipped at random
/// positions, truncation to nothing and by one byte, one byte appended.
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
/// values once hex strings are compared without regard to case (hex decoding accepts either),
/// and for the config ignoring `pack_size`, a tuning value for writers that the unauthenticated
/// config may legitimately carry with any value in range. Such an edit is not damage: cairn may
/// accept it or refuse it, but it must still never panic or write a wrong byte.
fn harmless_json_edit(orig: &[u8], new: &[u8], kind: Kind) -> bool {
    fn normalize(v: serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        match v {
            Value::String(s) if !s.is_empty() && s.bytes().all(|b| b.is_ascii_hexdigit()) => {
                Value::String(s.to_ascii_lowercase())
            }
            Value::Object(m) => {
                Value::Object(m.into_iter().map(|(k, v)| (k, normalize(v))).collect())
            }
            Value::Array(a) => Value::Array(a.into_iter().map(normalize).collect()),
            v => v,
        }
    }
    let parse = |b: &[u8]| {
        serde_json::from_slice::<serde_json::Value>(b)
            .ok()
            .map(normalize)
    };
    let (Some(mut a), Some(mut b)) = (parse(orig), parse(new)) else {
        return false;
    };
    if kind == Kind::Config {
        for v in [&mut a, &mut b] {
            if let Some(m) = v.as_object_mut() {
                m.remove("pack_size");
            }
        }
    }
    a == b
}

fn damage_cases(fx: &Fixture) -> Vec<Case> {
    let mut rng = Rng(0x5eed_0bad_cafe_f00d);
    let mut cases = Vec::new();
    let mut add = |kind: Kind, rel: &Path, what: String, edit: Edit| {
        cases.push(Case {
            kind,
            rel: rel.to_path_buf(),
            what,
            edit,
        })
    };

    // Packs: every pack's first and last byte, random bytes inside blob payloads, a cut.
    let packs = fx.packs();
    for p in &packs {
        let len = p.bytes.len();
        add(
            Kind::Pack,
            &p.rel,
            "pack magic".into(),
            Edit::Flip(0, rng.bit()),
        );
        add(
            Kind::Pack,
            &p.rel,
            "last byte".into(),
            Edit::Flip(len - 1, rng.bit()),
        );
        for _ in 0..2 {
            let i = rng.below(p.blobs.len());
            let e = &p.blobs[i];
            let payload = e.len as usize - BLOB_HEADER;
            let at = e.offset as usize + BLOB_HEADER + rng.below(payload);
            add(
                Kind::Pack,
                &p.rel,
                format!("payload of blob {i}"),
                Edit::Flip(at, rng.bit()),
            );
        }
        add(
            Kind::Pack,
            &p.rel,
            "last byte cut".into(),
            Edit::Truncate(len - 1),
        );
    }
    // The pack with the most blobs (d.bin, raw, then the lz4-compressed text files): header
    // fields of its first two blobs, cuts at and around a blob boundary, extensions (one of
    // them a valid blob: the walk still succeeds, only the name check can tell).
    let victim = packs
        .iter()
        .max_by_key(|p| p.blobs.len())
        .filter(|p| p.blobs.len() >= 2)
        .expect("a pack with several blobs");
    // (Every field of the second blob; every third of the first, which starts at offset 8.)
    for (i, step) in [(0, 3), (1, 1)] {
        let off = victim.blobs[i].offset as usize;
        for (field, at) in HEADER_FIELDS.iter().step_by(step) {
            add(
                Kind::Pack,
                &victim.rel,
                format!("header of blob {i}: {field}"),
                Edit::Flip(off + *at, rng.bit()),
            );
        }
    }
    let boundary = (victim.blobs[0].offset + victim.blobs[0].len) as usize;
    let second_payload = victim.blobs[1].len as usize - BLOB_HEADER;
    for (what, n) in [
        ("emptied", 0),
        ("cut inside the pack magic", 7),
        ("cut after the pack magic", 8),
        ("cut at a blob boundary", boundary),
        ("cut 1 byte into a blob header", boundary + 1),
        ("cut inside a blob header", boundary + 40),
        ("cut after a blob header", boundary + BLOB_HEADER),
        (
            "cut inside a blob payload",
            boundary + BLOB_HEADER + second_payload / 2,
        ),
    ] {
        add(Kind::Pack, &victim.rel, what.into(), Edit::Truncate(n));
    }
    let last_blob = victim.blob(victim.blobs.len() - 1).to_vec();
    for (what, more) in [
        ("one zero byte appended", vec![0]),
        ("a header's worth of junk appended", rng.bytes(BLOB_HEADER)),
        ("a copy of its last blob appended", last_blob),
        ("4 KiB of junk appended", rng.bytes(4096)),
    ] {
        add(Kind::Pack, &victim.rel, what.into(), Edit::Extend(more));
    }

    // Index fragments.
    for rel in fx.objects("index") {
        let bytes = fs::read(fx.pristine.join(&rel)).unwrap();
        let len = bytes.len();
        for (what, e) in generic_edits(&mut rng, len, 2) {
            add(Kind::Index, &rel, what, e);
        }
        for (what, n) in [
            ("cut after the magic", 8),
            ("cut inside the counts", 19),
            ("cut after the counts", 20),
            ("last entry cut off", len - 48),
        ] {
            add(Kind::Index, &rel, what.into(), Edit::Truncate(n));
        }
        add(
            Kind::Index,
            &rel,
            "last entry duplicated".into(),
            Edit::Extend(bytes[len - 48..].to_vec()),
        );
    }

    // Archive objects (a blob each).
    for rel in fx.objects("archives") {
        let len = fs::metadata(fx.pristine.join(&rel)).unwrap().len() as usize;
        for (what, e) in generic_edits(&mut rng, len, 4) {
            add(Kind::Archive, &rel, what, e);
        }
        for (field, at) in HEADER_FIELDS.iter().step_by(2) {
            add(
                Kind::Archive,
                &rel,
                format!("header: {field}"),
                Edit::Flip(*at, rng.bit()),
            );
        }
        for (what, n) in [("header cut", 71), ("payload cut off", BLOB_HEADER)] {
            add(Kind::Archive, &rel, what.into(), Edit::Truncate(n));
        }
        add(
            Kind::Archive,
            &rel,
            "16 bytes appended".into(),
            Edit::Extend(rng.bytes(16)),
        );
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
            ][..],
        ),
    ];
    for (kind, rel, fields) in json_objects {
        let bytes = fs::read(fx.pristine.join(&rel)).unwrap();
        let len = bytes.len();
        for (what, e) in generic_edits(&mut rng, len, 6) {
            add(kind, &rel, what, e);
        }
        for field in fields {
            let at = json_value_pos(&bytes, field);
            add(
                kind,
                &rel,
                format!("value of {field}"),
                Edit::Flip(at, 0x01),
            );
        }
        for (what, n) in [("cut in half", len / 2), ("closing brace cut", len - 2)] {
            add(kind, &rel, what.into(), Edit::Truncate(n));
        }
        for (what, more) in [
            ("junk appended", &b"x"[..]),
            ("a newline appended", b"\n"),
            ("a second object appended", b"{}"),
        ] {
            add(kind, &rel, what.into(), Edit::Extend(more.to_vec()));
        }
    }
    cases
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
        Kind::Pack | Kind::Index | Kind::Archive => {
            let o = fx.run(t, &label, &["check"]);
            if o.status.code() == Some(2) {
                t.detected += 1;
            } else {
                t.failures.push(format!(
                    "{label}: check exited {:?}, not 2:\n{}{}",
                    o.status.code(),
                    stdout(&o),
                    stderr(&o)
                ));
            }
            // Every extract reads every index fragment; a pack or an archive object only
            // matters to the archives that read it.
            let only = (case.kind != Kind::Index).then_some(case.rel.as_path());
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
        "damage sweep: {} cases, {} detected, {} harmless key/config edits, {} panics, \
         {} wrong bytes ({} commands, {:.1} s)",
        t.cases,
        t.detected,
        t.harmless,
        t.panics,
        t.wrong_bytes,
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

/// Runs the readers; some command must refuse the forgery, and no file may be wrong.
/// `check --verify-data` runs when the plain check accepted it. `forged` names an archive id
/// that exists only because of the forgery: extracting it must fail and write nothing.
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
    let mut refused = check.status.code() == Some(2);
    let mut deep_code = None;
    if !refused {
        let deep = fx.run(t, what, &["check", "--verify-data"]);
        deep_code = deep.status.code();
        refused = deep_code == Some(2);
    }
    refused |= fx.extract_all(t, what, None).any_failed;
    if let Some(id) = forged {
        let target = fx.scratch.join("forged");
        let aid = format!("aid:{id}");
        let o = fx.run(
            t,
            what,
            &["extract", &aid, "--target", target.to_str().unwrap()],
        );
        let written = files_under(&target);
        if o.status.code() != Some(2) || !written.is_empty() {
            t.failures.push(format!(
                "{what}: extract {aid} exited {:?} and wrote {} files:\n{}",
                o.status.code(),
                written.len(),
                stderr(&o)
            ));
            t.wrong_files += written.len();
        }
        let _ = fs::remove_dir_all(&target);
    }
    if refused {
        t.detected += 1;
    } else {
        t.failures.push(format!(
            "{what}: accepted (check {:?}, check --verify-data {deep_code:?}, every extract \
             exited 0)",
            check.status.code(),
        ));
    }
}

/// Replaces a pack by `bytes` stored under their own sha256, then rebuilds the index from the
/// packs alone, so that names and index agree with the forged contents.
fn replace_pack_and_reindex(fx: &Fixture, old_rel: &Path, bytes: &[u8]) {
    let store = fx.store();
    let new_id = PackId(sha256(bytes));
    store.put(&new_id.object_name(), bytes).unwrap();
    if Path::new(&new_id.object_name()) != old_rel {
        fs::remove_file(fx.repo.path.join(old_rel)).unwrap();
    }
    for f in files_under(&fx.repo.path.join("index")) {
        fs::remove_file(f).unwrap();
    }
    let (mut index, _) = persist::rebuild(&store).unwrap();
    persist::save_unpersisted(&store, &mut index).unwrap();
}

/// Replaces an index fragment by a modified one, stored under its own sha256.
fn replace_fragment(fx: &Fixture, rel: &Path, edit: impl FnOnce(&mut IndexFragment)) {
    let path = fx.repo.path.join(rel);
    let mut frag = IndexFragment::decode(&fs::read(&path).unwrap(), "fragment").unwrap();
    edit(&mut frag);
    let bytes = frag.encode();
    fs::remove_file(&path).unwrap();
    fx.store()
        .put(&IndexFragment::object_name(&bytes), &bytes)
        .unwrap();
}

#[test]
fn forgeries_are_never_accepted() {
    let started = std::time::Instant::now();
    let fx = fixture();
    let mut t = Tally::default();
    let archive_path = |id: &str| fx.repo.path.join("archives").join(id);
    let (one, two) = (fx.archives[0].id.clone(), fx.archives[1].id.clone());

    // (a) An archive object under another archive's name, or under a new name.
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
    let bytes = fs::read(fx.pristine.join("archives").join(&one)).unwrap();
    let new_name = hex::encode(sha256(&bytes));
    forgery(
        &fx,
        &mut t,
        "(a) an archive object copied under a new name",
        Some(&new_name),
        |_| fs::write(archive_path(&new_name), &bytes).unwrap(),
    );

    // (b) Every chunk blob presented as an archive under the chunk's id: as it is (kind 1),
    //     and with its kind byte changed to "archive".
    let packs = fx.packs();
    for p in &packs {
        for (i, e) in p.blobs.iter().enumerate() {
            let blob = p.blob(i).to_vec();
            let name = e.id.to_hex();
            forgery(
                &fx,
                &mut t,
                &format!("(b) chunk {name} copied to archives/"),
                Some(&name),
                |_| fs::write(archive_path(&name), &blob).unwrap(),
            );
            let mut relabeled = blob.clone();
            relabeled[5] = 2;
            forgery(
                &fx,
                &mut t,
                &format!("(b) chunk {name} copied to archives/ with kind = archive"),
                Some(&name),
                |_| fs::write(archive_path(&name), &relabeled).unwrap(),
            );
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

    // (d) Two blobs of one pack exchanged, the pack renamed to its new sha256 and the index
    //     rebuilt from the packs.
    let (victim, x, y) = packs
        .iter()
        .find_map(|p| {
            (0..p.blobs.len()).find_map(|x| {
                (x + 1..p.blobs.len())
                    .find(|&y| p.blobs[x].len == p.blobs[y].len)
                    .map(|y| (p, x, y))
            })
        })
        .expect("a pack with two blobs of equal length (a.bin and b.bin)");
    let (ex, ey) = (victim.blobs[x], victim.blobs[y]);
    let payload = |e: PackEntry| (e.offset as usize + BLOB_HEADER)..(e.offset + e.len) as usize;
    // Each header keeps its place and receives the other blob's payload.
    let mut swapped = victim.bytes.clone();
    swapped[payload(ex)].copy_from_slice(&victim.bytes[payload(ey)]);
    swapped[payload(ey)].copy_from_slice(&victim.bytes[payload(ex)]);
    forgery(
        &fx,
        &mut t,
        "(d) payloads of two blobs exchanged, pack renamed, index rebuilt",
        None,
        |fx| replace_pack_and_reindex(fx, &victim.rel, &swapped),
    );
    // Each blob claims the other's id.
    let mut ids = victim.bytes.clone();
    let id_range = |e: PackEntry| (e.offset as usize + 8)..(e.offset as usize + 40);
    ids[id_range(ex)].copy_from_slice(&victim.bytes[id_range(ey)]);
    ids[id_range(ey)].copy_from_slice(&victim.bytes[id_range(ex)]);
    forgery(
        &fx,
        &mut t,
        "(d) ids of two blobs exchanged, pack renamed, index rebuilt",
        None,
        |fx| replace_pack_and_reindex(fx, &victim.rel, &ids),
    );
    // (e) Index entries pointing at the wrong blob, the fragment renamed to its sha256.
    let frag_rel = fx.objects("index")[0].clone();
    let frag = IndexFragment::decode(&fs::read(fx.pristine.join(&frag_rel)).unwrap(), "f").unwrap();
    let same_pack = (0..frag.entries.len()).find_map(|i| {
        (i + 1..frag.entries.len())
            .find(|&j| frag.entries[i].pack == frag.entries[j].pack)
            .map(|j| (i, j))
    });
    if let Some((i, j)) = same_pack {
        forgery(
            &fx,
            &mut t,
            "(e) two index entries of one pack exchange their blobs",
            None,
            |fx| {
                replace_fragment(fx, &frag_rel, |f| {
                    let (a, b) = (f.entries[i], f.entries[j]);
                    (f.entries[i].offset, f.entries[i].len) = (b.offset, b.len);
                    (f.entries[j].offset, f.entries[j].len) = (a.offset, a.len);
                })
            },
        );
    }
    if frag.packs.len() >= 2 {
        forgery(
            &fx,
            &mut t,
            "(e) an index entry moved to another pack",
            None,
            |fx| {
                replace_fragment(fx, &frag_rel, |f| {
                    let n = f.packs.len() as u32;
                    f.entries[0].pack = (f.entries[0].pack + 1) % n;
                })
            },
        );
    }

    // Control: exchanging two whole blobs (header and payload) only reorders authentic blobs;
    // with the pack renamed and the index rebuilt the repository is valid, and must be
    // accepted and restore exactly. (This also shows the rebuild above is not what fails.)
    let mut reordered = victim.bytes[..ex.offset as usize].to_vec();
    let middle = &victim.bytes[(ex.offset + ex.len) as usize..ey.offset as usize];
    reordered.extend_from_slice(victim.blob(y));
    reordered.extend_from_slice(middle);
    reordered.extend_from_slice(victim.blob(x));
    reordered.extend_from_slice(&victim.bytes[(ey.offset + ey.len) as usize..]);
    assert_eq!(reordered.len(), victim.bytes.len());
    fx.restore();
    replace_pack_and_reindex(&fx, &victim.rel, &reordered);
    t.controls += 1;
    let what = "control: two whole blobs reordered";
    let deep = fx.run(&mut t, what, &["check", "--verify-data"]);
    let ex_all = fx.extract_all(&mut t, what, None);
    if deep.status.code() != Some(0) || !ex_all.complete {
        t.failures.push(format!(
            "{what}: a valid repository was refused (check --verify-data {:?}):\n{}",
            deep.status.code(),
            stdout(&deep)
        ));
    }

    eprintln!(
        "forgeries: {} cases, {} refused, {} accepted, {} panics, {} wrong bytes; \
         {} control accepted ({} commands, {:.1} s)",
        t.cases,
        t.detected,
        t.cases - t.detected,
        t.panics,
        t.wrong_bytes,
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
