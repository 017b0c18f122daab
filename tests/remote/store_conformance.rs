//! One conformance suite, run against every store backend (local, in-memory, SFTP, S3) and
//! over the wrappers every command may add (slow-store emulation, fault injection).
//! The remote ones need servers: `scripts/test.sh` starts them and sets
//! `CAIRN_TEST_SFTP` (a base URL) with `CAIRN_RSH`, and `CAIRN_TEST_S3` with the `AWS_*`
//! credentials; without them those cases say so and pass.

use std::sync::Arc;

use cairn::store::local::LocalStore;
use cairn::store::location::Location;
use cairn::store::mem::MemStore;
use cairn::store::{ByteRange, Store, StoreError};

/// Keeps whatever a backend's test needs alive (a temporary directory).
type Guard = Option<tempfile::TempDir>;

/// A fresh, empty repository location under the base URL in `var`, opened as a store.
fn remote(var: &str) -> Option<(Arc<dyn Store>, Guard)> {
    remote_named(var, "conformance").map(|(s, _)| (s, None))
}

/// A new store under the test server in `var`, named `<kind>-<random>`, and its URL.
fn remote_named(var: &str, kind: &str) -> Option<(Arc<dyn Store>, String)> {
    let Ok(base) = std::env::var(var) else {
        eprintln!("skipped: {var} is not set (scripts/test.sh starts the servers)");
        return None;
    };
    let url = format!(
        "{}/{kind}-{:016x}",
        base.trim_end_matches('/'),
        rand::random::<u64>()
    );
    let loc = Location::parse(&url).unwrap();
    // Read as the command line reads them (CAIRN_RSH, the S3 settings).
    let settings = cairn::cli::settings::Settings::from_env().unwrap();
    loc.prepare_new(&settings.store.remote).unwrap();
    Some((loc.open_store(&settings.store).unwrap(), url))
}

/// Whether the test servers of `backend` are known to ignore create-if-absent: rclone's S3
/// server and Garage overwrite on `If-None-Match: *` (scripts/test.sh and test-garage.sh say
/// so with `CAIRN_TEST_S3_OVERWRITES_ON_CREATE=yes`). Any other server must honour it.
fn overwrites_on_create(backend: &str) -> bool {
    backend == "s3" && std::env::var("CAIRN_TEST_S3_OVERWRITES_ON_CREATE").is_ok_and(|v| v == "yes")
}

macro_rules! store_suite {
    ($modname:ident, $make:expr) => {
        mod $modname {
            use super::*;

            fn store() -> Option<(Arc<dyn Store>, Guard)> {
                $make()
            }

            #[test]
            fn put_get_whole_and_ranges() {
                let Some((s, _keep)) = store() else { return };
                s.put("packs/ab/abcdef", b"0123456789").unwrap();
                assert_eq!(s.get("packs/ab/abcdef", None).unwrap(), b"0123456789");
                assert_eq!(
                    s.get("packs/ab/abcdef", Some(ByteRange::new(2, 3)))
                        .unwrap(),
                    b"234"
                );
                assert_eq!(
                    s.get("packs/ab/abcdef", Some(ByteRange::new(10, 0)))
                        .unwrap(),
                    b""
                );
                assert_eq!(s.info("packs/ab/abcdef").unwrap().size, 10);
            }

            /// An object larger than one request or one multipart part: whole, and ranges
            /// that straddle request boundaries, byte for byte.
            #[test]
            fn large_objects_and_unaligned_ranges() {
                let Some((s, _keep)) = store() else { return };
                let data: Vec<u8> = (0..9_000_001u32)
                    .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
                    .collect();
                s.put("packs/cd/large", &data).unwrap();
                assert_eq!(s.info("packs/cd/large").unwrap().size, data.len() as u64);
                assert!(s.get("packs/cd/large", None).unwrap() == data);
                for (off, len) in [
                    (0, 1),
                    (131_071, 2),
                    (131_072 * 3 - 5, 700_000),
                    (8_999_000, 1001),
                ] {
                    let got = s
                        .get(
                            "packs/cd/large",
                            Some(ByteRange::new(off as u64, len as u64)),
                        )
                        .unwrap();
                    assert!(got == data[off..off + len], "range {off}+{len}");
                }
                assert!(matches!(
                    s.get("packs/cd/large", Some(ByteRange::new(8_999_000, 1002))),
                    Err(StoreError::Short { .. })
                ));
            }

            /// Ranges of a few objects read by many threads at once, as extract's workers
            /// read packs: each gets its own bytes (a server that ignores ranges is read
            /// once per object while the others wait for it).
            #[test]
            fn concurrent_ranges_of_a_few_objects() {
                let Some((s, _keep)) = store() else { return };
                let object = |k: u32| -> Vec<u8> {
                    (0..3_000_000u32)
                        .map(|i| (i.wrapping_add(k).wrapping_mul(2_654_435_761) >> 13) as u8)
                        .collect()
                };
                for k in 0..6 {
                    s.put(&format!("packs/ef/obj{k}"), &object(k)).unwrap();
                }
                std::thread::scope(|scope| {
                    for t in 0..12u32 {
                        let s = &s;
                        scope.spawn(move || {
                            for round in 0..6u32 {
                                let k = (t + round) % 6;
                                let off = (t as usize * 211_111 + round as usize * 7) % 2_900_000;
                                let got = s
                                    .get(
                                        &format!("packs/ef/obj{k}"),
                                        Some(ByteRange::new(off as u64, 100_000)),
                                    )
                                    .unwrap();
                                assert!(got == object(k)[off..off + 100_000], "obj{k} at {off}");
                            }
                        });
                    }
                });
            }

            /// A whole read with a bound: the object when it fits, `TooLarge` (naming the
            /// size) when it does not, `NotFound` when it is missing.
            #[test]
            fn bounded_reads() {
                let Some((s, _keep)) = store() else { return };
                s.put("keys/k", b"0123456789").unwrap();
                assert_eq!(s.get_bounded("keys/k", 10).unwrap(), b"0123456789");
                match s.get_bounded("keys/k", 9) {
                    Err(StoreError::TooLarge {
                        size: 10, max: 9, ..
                    }) => {}
                    other => panic!("{other:?}"),
                }
                assert!(matches!(
                    s.get_bounded("keys/missing", 10),
                    Err(StoreError::NotFound { .. })
                ));
            }

            #[test]
            fn short_read_is_an_error() {
                let Some((s, _keep)) = store() else { return };
                s.put("index/x", b"abc").unwrap();
                assert!(matches!(
                    s.get("index/x", Some(ByteRange::new(1, 5))),
                    Err(StoreError::Short { .. })
                ));
                assert!(matches!(
                    s.get("index/x", Some(ByteRange::new(4, 1))),
                    Err(StoreError::Short { .. })
                ));
            }

            #[test]
            fn empty_and_overflowing_ranges() {
                let Some((s, _keep)) = store() else { return };
                s.put("index/e", b"abc").unwrap();
                // An empty range within the object (its end included) is empty; past it, short.
                for at in [0, 3] {
                    let got = s.get("index/e", Some(ByteRange::new(at, 0))).unwrap();
                    assert!(got.is_empty(), "empty range at {at}");
                }
                assert!(matches!(
                    s.get("index/e", Some(ByteRange::new(4, 0))),
                    Err(StoreError::Short { .. })
                ));
                // A range whose end does not fit in 64 bits is short, not a wrapped read.
                assert!(matches!(
                    s.get("index/e", Some(ByteRange::new(u64::MAX - 1, 5))),
                    Err(StoreError::Short { .. })
                ));
            }

            #[test]
            fn overwrite_replaces_atomically() {
                let Some((s, _keep)) = store() else { return };
                s.put("config", b"old").unwrap();
                s.put("config", b"new contents").unwrap();
                assert_eq!(s.get("config", None).unwrap(), b"new contents");
                // Ranged reads see the new object too (no copy of the old one is kept), and
                // after a delete nothing of it is served.
                s.put("packs/00/p", b"first version").unwrap();
                assert_eq!(
                    s.get("packs/00/p", Some(ByteRange { offset: 0, len: 5 }))
                        .unwrap(),
                    b"first"
                );
                s.put("packs/00/p", b"second version").unwrap();
                assert_eq!(
                    s.get("packs/00/p", Some(ByteRange { offset: 0, len: 6 }))
                        .unwrap(),
                    b"second"
                );
                s.delete("packs/00/p").unwrap();
                assert!(s
                    .get("packs/00/p", Some(ByteRange { offset: 0, len: 3 }))
                    .unwrap_err()
                    .is_not_found());
            }

            #[test]
            fn list_is_sorted_recursive_and_scoped() {
                let Some((s, _keep)) = store() else { return };
                for n in [
                    "packs/01/b",
                    "packs/00/a",
                    "index/z",
                    "archives/q",
                    "config",
                ] {
                    s.put(n, n.as_bytes()).unwrap();
                }
                let names: Vec<String> = s
                    .list("packs")
                    .unwrap()
                    .into_iter()
                    .map(|o| o.name)
                    .collect();
                assert_eq!(names, vec!["packs/00/a", "packs/01/b"]);
                assert_eq!(s.list("locks").unwrap(), vec![]);
                let all: Vec<String> = s.list("").unwrap().into_iter().map(|o| o.name).collect();
                let mut sorted = all.clone();
                sorted.sort();
                assert_eq!(all, sorted);
                assert_eq!(all.len(), 5);
                assert_eq!(s.list("index").unwrap()[0].size, 7);
            }

            #[test]
            fn not_found_is_typed() {
                let Some((s, _keep)) = store() else { return };
                assert!(matches!(
                    s.get("index/none", None),
                    Err(StoreError::NotFound { .. })
                ));
                assert!(matches!(
                    s.delete("index/none"),
                    Err(StoreError::NotFound { .. })
                ));
                assert!(matches!(
                    s.info("index/none"),
                    Err(StoreError::NotFound { .. })
                ));
            }

            #[test]
            fn delete_removes_and_a_missing_object_is_not_found() {
                let Some((s, _keep)) = store() else { return };
                s.put("locks/a", b"x").unwrap();
                s.delete("locks/a").unwrap();
                assert!(s.get("locks/a", None).unwrap_err().is_not_found());
                assert!(s.delete("locks/a").unwrap_err().is_not_found());
                assert!(s.list("locks").unwrap().is_empty());
            }

            /// Create-if-absent, as lock objects are written: a second create of a name is
            /// refused and leaves the first object as it was; after a delete the name can be
            /// created again; of eight clients creating one name at once, one wins.
            #[test]
            fn create_new_never_overwrites() {
                let Some((s, _keep)) = store() else { return };
                s.create_new("broken/0a", b"first").unwrap();
                match s.create_new("broken/0a", b"second") {
                    Err(StoreError::Exists { .. }) => {
                        eprintln!("{}: create-if-absent honoured", stringify!($modname));
                    }
                    Ok(()) if overwrites_on_create(stringify!($modname)) => {
                        // A server known to ignore If-None-Match (docs/design.md, "S3"): the
                        // lock protocol never relies on it, and this says so.
                        eprintln!(
                            "{}: the server ignores create-if-absent",
                            stringify!($modname)
                        );
                        assert_eq!(s.get("broken/0a", None).unwrap(), b"second");
                        return;
                    }
                    other => panic!("a second create of one name: {other:?}"),
                }
                assert_eq!(s.get("broken/0a", None).unwrap(), b"first");
                s.delete("broken/0a").unwrap();
                s.create_new("broken/0a", b"again").unwrap();
                assert_eq!(s.get("broken/0a", None).unwrap(), b"again");
                let won: usize = std::thread::scope(|t| {
                    let tries: Vec<_> = (0..8u8)
                        .map(|i| {
                            let s = &s;
                            t.spawn(move || s.create_new("locks/race", &[i; 100]).is_ok())
                        })
                        .collect();
                    tries
                        .into_iter()
                        .map(|h| usize::from(h.join().unwrap()))
                        .sum()
                });
                assert_eq!(won, 1, "clients that created the same name");
                assert_eq!(s.get("locks/race", None).unwrap().len(), 100);
                assert_eq!(
                    s.list("locks").unwrap().len(),
                    1,
                    "no temporary object shows"
                );
            }

            /// The lane for urgent small operations reaches the same objects.
            #[test]
            fn the_lane_sees_the_same_objects() {
                let Some((s, _keep)) = store() else { return };
                let lane = cairn::store::lane_of(&s);
                s.put("locks/a", b"from the store").unwrap();
                assert_eq!(lane.get("locks/a", None).unwrap(), b"from the store");
                lane.create_new("locks/b", b"from the lane").unwrap();
                assert_eq!(s.get("locks/b", None).unwrap(), b"from the lane");
                lane.delete("locks/a").unwrap();
                assert!(s.get("locks/a", None).unwrap_err().is_not_found());
            }

            /// The bytes of a put come back exactly once, whatever the outcome, and on `Ok`
            /// the object is there whole.
            #[test]
            fn put_releasing_gives_the_bytes_back_once() {
                let Some((s, _keep)) = store() else { return };
                let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
                let mut back = 0;
                s.put_releasing("packs/ef/released", data.clone(), &mut |_| back += 1)
                    .unwrap();
                assert_eq!(back, 1);
                assert!(s.get("packs/ef/released", None).unwrap() == data);
                let mut back = 0;
                assert!(s
                    .put_releasing("../bad", vec![1, 2, 3], &mut |_| back += 1)
                    .is_err());
                assert_eq!(back, 1, "given back once when the put fails too");
            }

            /// A lane, where there is one, is a way to the same objects; whether there is one
            /// is said without opening it.
            #[test]
            fn the_lane_is_said_as_it_is() {
                let Some((s, _keep)) = store() else { return };
                if !s.has_lane() {
                    return;
                }
                let lane = s.lane().expect("has_lane says there is one");
                lane.put("index/by-lane", b"x").unwrap();
                assert_eq!(s.get("index/by-lane", None).unwrap(), b"x");
                assert_eq!(lane.is_remote(), s.is_remote());
            }

            #[test]
            fn invalid_names_are_refused() {
                let Some((s, _keep)) = store() else { return };
                for bad in ["../x", "/abs", "a//b", ".tmp", "a/../b", ""] {
                    assert!(
                        matches!(s.put(bad, b"x"), Err(StoreError::InvalidName { .. })),
                        "{bad}"
                    );
                }
            }
        }
    };
}

store_suite!(local, || {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    let s: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path().join("repo")));
    Some((s, Some(dir)))
});

store_suite!(sftp, || remote("CAIRN_TEST_SFTP"));

store_suite!(s3, || remote("CAIRN_TEST_S3"));

// `cairn serve` behind a stand-in for ssh that runs it directly.
store_suite!(serve, || {
    let dir = tempfile::tempdir().unwrap();
    let ssh = dir.path().join("ssh");
    std::fs::write(
        &ssh,
        format!("#!/bin/sh\nexec {} serve\n", env!("CARGO_BIN_EXE_cairn")),
    )
    .unwrap();
    std::fs::set_permissions(&ssh, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    let target = cairn::store::location::SftpTarget {
        user: None,
        host: "backup-host".into(),
        port: None,
        path: dir.path().join("repo").display().to_string(),
    };
    let s = cairn::store::ssh::SshStore::new(target, vec![ssh.display().to_string()], "cairn");
    s.create_root().unwrap();
    let s: Arc<dyn Store> = Arc::new(s);
    Some((s, Some(dir)))
});

#[test]
fn local_store_never_recreates_a_vanished_root() {
    let dir = tempfile::tempdir().unwrap();
    let s = LocalStore::new(dir.path().join("gone"));
    let err = s.put("packs/aa/x", b"x").unwrap_err();
    assert!(err.to_string().contains("does not exist"), "{err}");
    assert!(!dir.path().join("gone").exists());
}

store_suite!(mem, || {
    let s: Arc<dyn Store> = Arc::new(MemStore::new());
    Some((s, None))
});

// The wrappers keep the contract too: they sit between every command and its backend.
store_suite!(slow_over_mem, || {
    let s: Arc<dyn Store> = Arc::new(cairn::store::slow::SlowStore::with_connections(
        Arc::new(MemStore::new()),
        std::time::Duration::from_micros(100),
        Some(10_000_000_000),
        2,
    ));
    Some((s, None))
});

store_suite!(faulty_over_local, || {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    let s: Arc<dyn Store> = Arc::new(cairn::store::faulty::FaultyStore::new(
        Arc::new(LocalStore::new(dir.path().join("repo"))),
        vec![],
    ));
    Some((s, Some(dir)))
});

store_suite!(warm_over_mem, || {
    let s: Arc<dyn Store> = Arc::new(cairn::store::warm::WarmStore::new(
        Arc::new(MemStore::new()),
    ));
    Some((s, None))
});

store_suite!(logged_over_mem, || {
    let dir = tempfile::tempdir().unwrap();
    let s: Arc<dyn Store> = Arc::new(
        cairn::store::logged::LoggedStore::new(
            Arc::new(MemStore::new()),
            &dir.path().join("ops.log"),
        )
        .unwrap(),
    );
    Some((s, Some(dir)))
});

// The power-cut model with the power never cut: what the crash tests rely on is that it
// behaves as a store until the cut.
store_suite!(powercut_never_cut, || {
    let s: Arc<dyn Store> = Arc::new(cairn::store::powercut::PowerCutStore::new([], 0));
    Some((s, None))
});

/// A local repository in a temporary directory.
fn local_repo() -> (Arc<dyn Store>, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("repo")).unwrap();
    let s: Arc<dyn Store> = Arc::new(LocalStore::new(dir.path().join("repo")));
    (s, dir)
}

store_suite!(slow_over_local, || {
    let (local, dir) = local_repo();
    let s: Arc<dyn Store> = Arc::new(cairn::store::slow::SlowStore::new(
        local,
        std::time::Duration::from_micros(100),
        None,
    ));
    Some((s, Some(dir)))
});

store_suite!(logged_over_local, || {
    let (local, dir) = local_repo();
    let log = dir.path().join("ops.log");
    let s: Arc<dyn Store> = Arc::new(cairn::store::logged::LoggedStore::new(local, &log).unwrap());
    Some((s, Some(dir)))
});

store_suite!(warm_over_local, || {
    let (local, dir) = local_repo();
    let s: Arc<dyn Store> = Arc::new(cairn::store::warm::WarmStore::new(local));
    Some((s, Some(dir)))
});

store_suite!(releasing_over_local, || {
    let (local, dir) = local_repo();
    let s: Arc<dyn Store> = Arc::new(cairn::store::reserve::Releasing::new(local));
    Some((s, Some(dir)))
});

/// Every wrapper over a local disk passes its early release through: the bytes come back
/// before the object has its name (the fault-injecting, slow, logging and warming stores
/// gave them back only when the put ended, so no test through them saw a buffer refilled
/// while its store still ran: issue 45).
#[test]
fn wrappers_over_a_local_disk_give_the_bytes_back_before_the_object_is_named() {
    type Wrap = fn(Arc<dyn Store>, &std::path::Path) -> Arc<dyn Store>;
    let wraps: [(&str, Wrap); 4] = [
        ("faulty", |s, _| {
            Arc::new(cairn::store::faulty::FaultyStore::new(s, vec![]))
        }),
        ("logged", |s, d| {
            Arc::new(cairn::store::logged::LoggedStore::new(s, &d.join("ops.log")).unwrap())
        }),
        ("slow", |s, _| {
            Arc::new(cairn::store::slow::SlowStore::new(
                s,
                std::time::Duration::ZERO,
                None,
            ))
        }),
        ("warm", |s, _| {
            Arc::new(cairn::store::warm::WarmStore::new(s))
        }),
    ];
    for (what, wrap) in wraps {
        let (local, dir) = local_repo();
        let s = wrap(local, dir.path());
        let path = dir.path().join("repo/packs/ab/abcdef");
        let mut named_at_release = None;
        s.put_releasing("packs/ab/abcdef", vec![7; 1 << 20], &mut |_| {
            named_at_release = Some(path.exists());
        })
        .unwrap();
        assert_eq!(named_at_release, Some(false), "{what}");
        assert!(path.exists(), "{what}");
    }
}

store_suite!(slow_flush_over_local, || {
    let (local, dir) = local_repo();
    let s: Arc<dyn Store> = Arc::new(cairn::store::slow::SlowFlush::new(
        local,
        std::time::Duration::from_millis(1),
    ));
    Some((s, Some(dir)))
});

/// A tree deeper than any cairn makes (a stranger's, a hostile one, or a loop of links the
/// server follows) is an error over SFTP, not walked without end nor silently cut short; a
/// repository's own depth lists in full.
#[test]
fn sftp_refuses_to_walk_a_tree_deeper_than_cairn_makes() {
    let Some((s, url)) = remote_named("CAIRN_TEST_SFTP", "deep") else {
        return;
    };
    s.put("packs/ab/abcdef", b"x").unwrap();
    let names =
        |l: Vec<cairn::store::ObjectInfo>| l.into_iter().map(|o| o.name).collect::<Vec<_>>();
    assert_eq!(names(s.list("").unwrap()), ["packs/ab/abcdef"]);
    // The test server is on this machine: plant the deep tree beside the store's back.
    let (_, path) = url["sftp://".len()..].split_once('/').unwrap();
    let root = std::path::Path::new("/").join(path);
    std::fs::create_dir_all(root.join("packs/ab/c/d")).unwrap();
    std::fs::write(root.join("packs/ab/c/d/f"), b"y").unwrap();
    let err = s.list("").unwrap_err().to_string();
    assert!(err.contains("levels deep"), "{err}");
    // Four levels below the listed prefix are still walked.
    assert_eq!(
        names(s.list("packs").unwrap()),
        ["packs/ab/abcdef", "packs/ab/c/d/f"]
    );
    std::fs::remove_dir_all(&root).unwrap();
}
