//! Reliability: crashes and power cuts during create and compact lose nothing.
//!
//! 1. Crash matrix (the real binary): every store operation of a `create` is made the crash
//!    point in turn (it and everything after it fail, as for a killed process); then `check`
//!    must pass, the command must succeed when run again, and every committed archive must
//!    extract byte-identically. (The same for `compact` is in tests/cli/cli_maintenance.rs.)
//! 2. Power cuts (in-process, [`PowerCutStore`]): every file-system step of a `create` and of
//!    a `compact` is made the cut point; the state a reboot finds — with not-yet-fsynced
//!    directory changes all lost, all kept, or alternately kept — must never have an index
//!    entry or archive that references a missing or short pack, `check` must report no
//!    error, the command must succeed again, and every archive must restore exactly.

use crate::common;

use std::collections::HashMap;
use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use cairn::archive;
use cairn::crypto::EncryptionMode;
use cairn::index::persist;
use cairn::ops::check::{self, CheckOptions};
use cairn::ops::compact::{self, CompactOptions};
use cairn::ops::create::{self, BackupOptions};
use cairn::ops::extract::{self, RestoreOptions};
use cairn::repo::signals::Interrupt;
use cairn::repo::{InitOptions, Repository};
use cairn::source::exclude::Excludes;
use cairn::store::mem::MemStore;
use cairn::store::powercut::PowerCutStore;
use cairn::store::Store;
use cairn::util::progress::Progress;
use common::{assert_trees_equal, copy_tree, random_bytes, stderr, Repo};

const PW: &[u8] = b"pw";

fn tree(root: &Path, seed: u64, files: u64) {
    fs::create_dir_all(root.join("sub")).unwrap();
    for i in 0..files {
        fs::write(
            root.join(format!("sub/f{i}")),
            random_bytes(seed * 100 + i, 40_000 + 10_000 * i as usize),
        )
        .unwrap();
    }
    fs::write(root.join("small.txt"), format!("tree {seed}\n")).unwrap();
}

/// The crash matrix for create, through the binary.
#[test]
fn create_crash_matrix() {
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "100000")]);
    let base = repo.dir.path().to_path_buf();
    tree(&base.join("one"), 1, 4);
    assert_eq!(
        repo.run_in(&base, &["create", "one", "one"], &[])
            .status
            .code(),
        Some(0)
    );
    tree(&base.join("two"), 2, 5);
    let pristine = base.join("pristine");
    copy_tree(&repo.path, &pristine);
    let _ = fs::remove_dir_all(base.join("cache"));
    let log = base.join("ops.log");
    let o = repo.run_in(
        &base,
        &["create", "two", "two"],
        &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let ops = fs::read_to_string(&log).unwrap().lines().count();
    let mut committed = 0;
    for i in 1..=ops {
        // Every run starts as the reference run did: same repository, no files cache.
        let _ = fs::remove_dir_all(base.join("cache"));
        fs::remove_dir_all(&repo.path).unwrap();
        copy_tree(&pristine, &repo.path);
        let rule = format!("from={i}:eio");
        let o = repo.run_in(&base, &["create", "two", "two"], &[("CAIRN_FAULT", &rule)]);
        assert!(!stderr(&o).contains("panicked"), "op {i}: {}", stderr(&o));
        if o.status.code() == Some(0) {
            committed += 1;
        }
        let c = repo.run(&["check"]);
        assert!(
            matches!(c.status.code(), Some(0) | Some(1)),
            "op {i}: check after the crash:\n{}",
            common::stdout(&c)
        );
        // Run again: it succeeds, and every archive in the repository restores exactly.
        let o = repo.run_in(&base, &["create", "two", "two"], &[]);
        assert_eq!(o.status.code(), Some(0), "op {i}: {}", stderr(&o));
        for (name, src) in [("one", "one"), ("two", "two")] {
            let target = base.join(format!("x{i}-{name}"));
            repo.ok(&["extract", name, "--target", target.to_str().unwrap()]);
            assert_trees_equal(&base.join(src), &target.join(src));
            fs::remove_dir_all(&target).unwrap();
        }
    }
    eprintln!("create crash matrix: {ops} crash points, {committed} runs committed before the crash point, 0 lost archives, 0 check errors");
}

struct Fixture {
    _dir: tempfile::TempDir,
    sources: HashMap<String, PathBuf>,
    objects: Vec<(String, Vec<u8>)>,
}

fn objects_of(store: &dyn Store) -> Vec<(String, Vec<u8>)> {
    store
        .list("")
        .unwrap()
        .into_iter()
        .map(|o| (o.name.clone(), store.get(&o.name, None).unwrap()))
        .collect()
}

fn options(name: &str, src: &Path) -> BackupOptions {
    BackupOptions {
        name: name.into(),
        comment: String::new(),
        paths: vec![src.to_path_buf()],
        excludes: Excludes::new(&[] as &[String], false).unwrap(),
        one_file_system: false,
        meta: Default::default(),
        exclude_nodump: false,
        command_line: vec![],
        threads: 2,
        compression: Default::default(),
        stdin: None,
        never: vec![],
        tags: vec![],
        time: None,
    }
}

/// Opens the repository and takes its exclusive lock. A lock left by a simulated crash
/// belongs to this (live) test process, so it is broken first, as a person would once the
/// crashed process is known dead.
fn open(store: Arc<dyn Store>) -> Repository {
    let _ = cairn::repo::lock::break_all(&*store);
    let mut repo = Repository::open(store, || Ok(PW.to_vec())).unwrap();
    repo.lock(
        cairn::repo::lock::LockKind::Exclusive,
        "test",
        std::time::Duration::ZERO,
    )
    .unwrap();
    repo
}

fn fixture(archives: &[&str]) -> Fixture {
    std::env::set_var("CAIRN_TEST_CHEAP_KDF", "1");
    // No files cache between runs: every run must do the same store operations.
    std::env::set_var("XDG_CACHE_HOME", "/proc/cairn-no-cache");
    let dir = tempfile::tempdir().unwrap();
    let mem = Arc::new(MemStore::new());
    Repository::init(
        mem.clone(),
        &InitOptions {
            encryption: EncryptionMode::Repokey,
            pack_size: 60_000,
            padding: cairn::crypto::Padding::None,
            chunking: None,
            ..Default::default()
        },
        || Ok(PW.to_vec()),
    )
    .unwrap();
    let repo = open(mem.clone());
    let mut sources = HashMap::new();
    for (i, name) in archives.iter().enumerate() {
        let src = dir.path().join(name);
        tree(&src, 10 + i as u64, 3);
        // Shared data between archives, so compact has live and dead chunks in one pack.
        fs::write(src.join("shared"), random_bytes(999, 30_000)).unwrap();
        create::run(
            &repo,
            &options(name, &src),
            &Progress::hidden(),
            &Interrupt::none(),
        )
        .unwrap();
        sources.insert(name.to_string(), src);
    }
    Fixture {
        objects: objects_of(&*mem),
        sources,
        _dir: dir,
    }
}

/// Problems a reboot must never find: index entries or archives referencing missing or short
/// packs, and (through check) anything damaged. Returns a description of each.
fn violations(store: Arc<dyn Store>) -> Vec<String> {
    let mut v = Vec::new();
    let repo = open(store.clone());
    let (index, load) = persist::load(&*store, repo.crypto()).unwrap();
    for d in load.damaged_fragments {
        v.push(format!("damaged fragment {}", d.name));
    }
    let packs = persist::list_packs(&*store).unwrap();
    for (id, pack, loc) in index.iter_stored() {
        match packs.get(&pack) {
            None => v.push(format!("index names missing pack {pack} for {id:?}")),
            Some(size) if *size < u64::from(loc.offset + loc.len) => {
                v.push(format!("index names short pack {pack}"))
            }
            Some(_) => {}
        }
    }
    let list = archive::load_all(&repo).unwrap();
    for (id, e) in &list.damaged {
        v.push(format!("archive {id} unreadable: {e}"));
    }
    for (id, meta) in &list.archives {
        for c in &meta.items {
            if !index.contains(&c.id) {
                v.push(format!("archive {id}: metadata chunk not in the index"));
            }
        }
        for item in archive::items(&repo, &index, meta) {
            match item {
                Ok(item) => {
                    if item.chunks.iter().any(|c| !index.contains(&c.id)) {
                        v.push(format!(
                            "archive {id}: {} references a chunk not in the index",
                            item.display_path()
                        ));
                    }
                }
                Err(e) => v.push(format!("archive {id}: items unreadable: {e}")),
            }
        }
    }
    let report = check::run(
        &repo,
        CheckOptions {
            verify_data: true,
            threads: 2,
            ..CheckOptions::default()
        },
        &Progress::hidden(),
        &Interrupt::none(),
    )
    .unwrap();
    for f in report
        .findings
        .iter()
        .filter(|f| f.severity == check::Severity::Error)
    {
        v.push(format!("check: {}: {}", f.object, f.message));
    }
    v
}

/// Every archive in the store restores to its source, byte for byte.
fn restores(store: Arc<dyn Store>, sources: &HashMap<String, PathBuf>) {
    let repo = open(store);
    let (index, _) = repo.load_index().unwrap();
    for (_, meta) in archive::load_all(&repo).unwrap().archives {
        let target = tempfile::tempdir().unwrap();
        let opts = RestoreOptions {
            meta: Default::default(),
            target: target.path().to_path_buf(),
            selection: Default::default(),
            threads: 2,
            overwrite: Default::default(),
            delete: false,
            own: Vec::new(),
            root_ok: false,
            verify: None,
        };
        let r = extract::run(
            &repo,
            &index,
            &meta,
            opts,
            &Progress::hidden(),
            &Interrupt::none(),
        )
        .unwrap();
        assert!(r.errors.is_empty(), "{:?}", r.errors);
        let src = &sources[&meta.name];
        assert_trees_equal(src, &target.path().join(src.strip_prefix("/").unwrap()));
    }
}

/// Which unsynced directory changes reach the disk.
type Keep = Box<dyn Fn(&str) -> bool>;

/// Runs `command` against a power-cut store at every step; checks every reboot state.
fn power_cut_matrix(
    label: &str,
    fx: &Fixture,
    command: impl Fn(&Repository) -> cairn::Result<()>,
) -> (u64, u64) {
    let probe = Arc::new(PowerCutStore::new(fx.objects.clone(), 0));
    let repo = open(probe.clone());
    let opened = probe.steps();
    command(&repo).unwrap();
    let steps = probe.steps() - opened;
    let mut states = 0;
    for k in 1..=steps {
        let store = Arc::new(PowerCutStore::new(fx.objects.clone(), 0));
        let repo = open(store.clone());
        store.arm(k);
        let result = command(&repo);
        assert!(
            result.is_err() || !store.was_cut(),
            "{label} step {k}: the cut went unnoticed"
        );
        let keeps: [(&str, Keep); 3] = [
            ("lost", Box::new(|_: &str| false)),
            ("kept", Box::new(|_: &str| true)),
            (
                "mixed",
                Box::new(move |n: &str| (n.len() + k as usize) % 2 == 0),
            ),
        ];
        for (how, keep) in keeps {
            states += 1;
            let after: Arc<dyn Store> = Arc::new(store.after_cut_keeping(&*keep));
            let v = violations(after.clone());
            assert!(
                v.is_empty(),
                "{label}: power cut at step {k} ({how}): {v:?}"
            );
            // The command succeeds when run again, and everything restores.
            command(&open(after.clone()))
                .unwrap_or_else(|e| panic!("{label} step {k} ({how}): rerun: {e}"));
            let again = violations(after.clone());
            assert!(
                again.is_empty(),
                "{label} step {k} ({how}): after the rerun: {again:?}"
            );
            restores(after, &fx.sources);
        }
    }
    eprintln!("{label}: {steps} power-cut points × 3 ways to resolve unsynced directory changes = {states} states, 0 with a missing or short pack referenced");
    (steps, states)
}

#[test]
fn power_cuts_during_create_lose_nothing() {
    let mut fx = fixture(&["one"]);
    let src = fx._dir.path().join("two");
    tree(&src, 20, 4);
    fx.sources.insert("two".into(), src.clone());
    power_cut_matrix("create", &fx, |repo| {
        create::run(
            repo,
            &options("two", &src),
            &Progress::hidden(),
            &Interrupt::none(),
        )
        .map(|_| ())
    });
}

#[test]
fn power_cuts_during_compact_lose_nothing() {
    let mut fx = fixture(&["one", "two", "three"]);
    // Delete "two" (its data stays until compact).
    let mem = Arc::new(MemStore::new());
    for (n, d) in &fx.objects {
        mem.put(n, d).unwrap();
    }
    let repo = open(mem.clone());
    let (id, _) = archive::select(&repo, "two").unwrap();
    mem.delete(&id.object_name()).unwrap();
    fx.objects = objects_of(&*mem);
    fx.sources.remove("two");
    power_cut_matrix("compact", &fx, |repo| {
        compact::run(
            repo,
            &CompactOptions {
                threshold_percent: 10.0,
                dry_run: false,
                removed_older_than: None,
            },
            &Progress::hidden(),
            &Interrupt::none(),
        )
        .map(|_| ())
    });
}

/// The verifier has teeth: a backend that skips the directory fsync loses packs while their
/// index fragment and archive survive, and that is caught.
#[test]
fn a_backend_without_directory_fsync_is_caught() {
    let mut fx = fixture(&["one"]);
    let src = fx._dir.path().join("two");
    tree(&src, 30, 4);
    fx.sources.insert("two".into(), src.clone());
    let store = Arc::new(PowerCutStore::new(fx.objects.clone(), 0).without_dir_fsync());
    create::run(
        &open(store.clone()),
        &options("two", &src),
        &Progress::hidden(),
        &Interrupt::none(),
    )
    .unwrap();
    // The power goes off after the backup "succeeded"; the directory entries of the index and
    // the archive happen to reach the disk, those of the packs do not.
    let after: Arc<dyn Store> = Arc::new(store.after_cut_keeping(|n| !n.starts_with("packs/")));
    let v = violations(after);
    assert!(
        !v.is_empty(),
        "losing packs behind the index must be detected"
    );
    eprintln!(
        "broken backend (no directory fsync): {} violations detected",
        v.len()
    );
}
