//! `cairn serve` and `ssh://` repositories: the server as a forced command behind the
//! machine's real OpenSSH (when `scripts/test.sh` started it: `SFTP_DIR`, `SFTP_PORT`), and
//! behind a stand-in for ssh that runs the server directly (which passes the test hooks on).
//!
//! What is tried: a client holding the key and the passphrase runs every destructive command
//! and writes junk through an append-only connection, and the owner then brings every earlier
//! archive back exactly; a repository outside the restriction, a name that climbs out of the
//! repository and an oversized frame are refused; the quota holds with nothing committed; the
//! connection dropped after each request in turn leaves a repository that the next command
//! and `check` find whole.

use crate::common;

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use cairn::store::ssh::frame::{read_frame, write_frame, Op, Reply, Request, MAX_FRAME, PROTOCOL};
use cairn::store::StoreError;
use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

const BIN: &str = env!("CARGO_BIN_EXE_cairn");

/// A stand-in for ssh that ignores what it is asked and runs `cairn serve ARGS` (a forced
/// command, without the network); the caller's environment reaches the server.
fn fake_ssh(dir: &Path, serve_args: &str) -> PathBuf {
    let path = dir.join(format!("ssh-{:08x}", rand::random::<u32>()));
    std::fs::write(&path, format!("#!/bin/sh\nexec {BIN} serve {serve_args}\n")).unwrap();
    std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    path
}

/// A client of a repository at `dir/srv/repo`, served by `serve_args` through `rsh`.
fn client(dir: &Path, rsh: &str, extra: &[(&str, &str)]) -> Repo {
    let url = format!("ssh://backup-host{}", dir.join("srv/repo").display());
    let mut env = vec![("CAIRN_REPO", url.as_str()), ("CAIRN_RSH", rsh)];
    env.extend_from_slice(extra);
    Repo::with_env(&env)
}

/// The owner's view: the same repository opened directly.
fn owner(r: &Repo, dir: &Path, args: &[&str]) -> std::process::Output {
    let repo = dir.join("srv/repo");
    r.run_env(
        args,
        &[
            ("CAIRN_REPO", repo.to_str().unwrap()),
            ("CAIRN_RSH", "false"),
        ],
    )
}

fn ok(o: &std::process::Output, what: &str) -> String {
    assert_eq!(o.status.code(), Some(0), "{what}: {}", stderr(o));
    stdout(o)
}

/// A backup that must succeed.
fn create(r: &Repo, name: &str, src: &Path) {
    ok(&r.run(&["create", name, src.to_str().unwrap()]), name);
}

/// The repository at `dir/srv/repo` opened with its key, as the client that holds it can
/// compute (reading only what it may read).
fn with_key(dir: &Path) -> cairn::repo::Repository {
    cairn::repo::Repository::open(
        std::sync::Arc::new(cairn::store::local::LocalStore::new(dir.join("srv/repo"))),
        || Ok(b"test passphrase".to_vec()),
    )
    .unwrap()
}

/// The repository at `dir/srv/repo` as a client's store, through `rsh` (ssh's words).
fn served_store(dir: &Path, rsh: &str) -> std::sync::Arc<dyn cairn::store::Store> {
    let settings = cairn::store::StoreSettings {
        remote: cairn::store::RemoteSettings {
            rsh: rsh.split_whitespace().map(String::from).collect(),
            ..Default::default()
        },
        ..Default::default()
    };
    let url = format!("ssh://backup-host{}", dir.join("srv/repo").display());
    cairn::store::location::Location::parse(&url)
        .unwrap()
        .open_store(&settings)
        .unwrap()
}

fn source(dir: &Path, name: &str, seed: u64) -> PathBuf {
    let src = dir.join(name);
    std::fs::create_dir_all(src.join("sub")).unwrap();
    std::fs::write(src.join("a"), random_bytes(seed, 300_000)).unwrap();
    std::fs::write(src.join("sub/b"), format!("file of {name}")).unwrap();
    src
}

/// `archives` as (id, name) pairs, by the owner, from `list --json-lines`.
fn archive_ids(out: &str) -> Vec<(String, String)> {
    out.lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            (
                v["id"].as_str().unwrap().to_string(),
                v["name"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// The ssh command of a private key whose line in the test server's `authorized_keys`
/// forces `command`: a user's own configuration (`restrict` and a forced command), or
/// `None` when no test server runs.
fn forced_key(dir: &Path, command: &str) -> Option<String> {
    let (Ok(sshd), Ok(port)) = (std::env::var("SFTP_DIR"), std::env::var("SFTP_PORT")) else {
        eprintln!("skipped: no test sshd (scripts/test.sh starts one)");
        return None;
    };
    let key = dir.join("id_served");
    let made = Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", "", "-C", "served", "-f"])
        .arg(&key)
        .status()
        .unwrap();
    assert!(made.success());
    let public = std::fs::read_to_string(key.with_extension("pub")).unwrap();
    let line = format!("command=\"{command}\",restrict {public}");
    std::fs::OpenOptions::new()
        .append(true)
        .open(Path::new(&sshd).join("authorized_keys"))
        .unwrap()
        .write_all(line.as_bytes())
        .unwrap();
    let user = String::from_utf8(Command::new("id").arg("-un").output().unwrap().stdout)
        .unwrap()
        .trim()
        .to_string();
    let config = dir.join("ssh_config");
    std::fs::write(
        &config,
        format!(
            "Host backup-host\n  HostName 127.0.0.1\n  Port {port}\n  User {user}\n  IdentityFile {}\n  IdentitiesOnly yes\n  UserKnownHostsFile {sshd}/known_hosts\n  StrictHostKeyChecking yes\n  BatchMode yes\n  LogLevel ERROR\n",
            key.display()
        ),
    )
    .unwrap();
    Some(format!("ssh -F {}", config.display()))
}

#[test]
fn a_taken_over_client_cannot_destroy_what_the_owner_restores() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("srv")).unwrap();
    let command = format!(
        "{BIN} serve --restrict-to-path {} --append-only",
        dir.join("srv").display()
    );
    let rsh = match forced_key(dir, &command) {
        Some(rsh) => rsh,
        // Without sshd, the same server behind the stand-in.
        None => fake_ssh(
            dir,
            &format!(
                "--restrict-to-path {} --append-only",
                dir.join("srv").display()
            ),
        )
        .display()
        .to_string(),
    };
    let r = client(dir, &rsh, &[]);
    let (one, two) = (source(dir, "one", 1), source(dir, "two", 2));
    create(&r, "one", &one);
    create(&r, "two", &two);
    create(&r, "two", &two);
    let before = archive_ids(&ok(
        &owner(&r, dir, &["list", "--json-lines"]),
        "owner list",
    ));
    assert_eq!(before.len(), 3);

    // Everything a ransomware with the key would try.
    ok(&r.run(&["delete", "one"]), "delete");
    ok(&r.run(&["prune", "--keep-last", "1"]), "prune");
    ok(&r.run(&["rename", "two", "renamed"]), "rename");
    ok(&r.run(&["comment", "renamed", "gone"]), "comment");
    let o = r.run(&["rewrite", "renamed", "--exclude", "*/sub"]);
    assert!(o.status.code().is_some_and(|c| c <= 1), "{}", stderr(&o));
    let o = r.run(&["compact", "--threshold", "0"]);
    assert!(ok(&o, "compact").contains("append-only"));
    let o = r.run_env(
        &["key", "change-passphrase"],
        &[("CAIRN_NEW_PASSPHRASE", "mine now")],
    );
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("append-only"), "{}", stderr(&o));
    let o = r.run(&["check", "--repair"]);
    assert_eq!(o.status.code(), Some(2));
    // Junk through the protocol itself, and a lock held for ever.
    let store = served_store(dir, &rsh);
    assert!(store.append_only());
    for o in store.list("").unwrap() {
        let refused = store.put(&o.name, b"junk");
        if !o.name.starts_with("locks/") {
            assert!(
                matches!(refused, Err(StoreError::Refused { .. })),
                "{}",
                o.name
            );
            assert!(matches!(
                store.delete(&o.name),
                Err(StoreError::Refused { .. }) | Ok(())
            ));
        }
    }
    store
        .put(&format!("archives/{}", "ab".repeat(32)), b"junk archive")
        .unwrap();
    store
        .put(&format!("packs/cd/{}", "cd".repeat(32)), b"junk pack")
        .unwrap();
    // Names no repository has are refused (one would stop every command that lists).
    for junk in ["archives/README", "packs/cd/cdcd", "notes"] {
        assert!(
            matches!(store.put(junk, b"x"), Err(StoreError::Refused { .. })),
            "{junk}"
        );
    }
    store
        .create_new(&format!("locks/{}", "0f".repeat(16)), b"forged")
        .unwrap();
    for name in ["removed/x", &format!("appended/{}", "ab".repeat(32))] {
        assert!(matches!(
            store.put(name, b""),
            Err(StoreError::Refused { .. })
        ));
    }
    let o = stdout(&r.run(&["list"]));
    assert!(!o.contains("one "), "the client sees its deletions: {o}");

    // The owner lists what was removed, brings it all back, and restores every archive.
    // (The forged lock first: it is the owner's to break.)
    ok(&owner(&r, dir, &["break-lock"]), "break-lock");
    let removed = ok(&owner(&r, dir, &["list", "--removed"]), "list --removed");
    assert!(
        removed.contains("one") && removed.contains("removed"),
        "{removed}"
    );
    ok(&owner(&r, dir, &["undelete", "--all"]), "undelete");
    for (id, name) in &before {
        let target = dir.join(format!("restored-{id}"));
        std::fs::create_dir_all(&target).unwrap();
        let o = owner(
            &r,
            dir,
            &[
                "extract",
                &format!("aid:{id}"),
                "--target",
                target.to_str().unwrap(),
            ],
        );
        ok(&o, "extract");
        let src = if name == "one" { &one } else { &two };
        assert_trees_equal(src, &target.join(src.strip_prefix("/").unwrap()));
    }
    let listed = stdout(&owner(&r, dir, &["list"]));
    for (id, _) in &before {
        assert!(listed.contains(&id[..8]), "{id} not listed again: {listed}");
    }
}

/// A client with the key writes, through the append-only server, an index fragment that
/// places the chunks of every file of the existing archives in a pack of junk, named to be
/// loaded before the real fragments. The owner's plain compact once took the real copies for
/// spares and freed them; it must keep the copies that authenticate, and its new index makes
/// every archive restore again.
#[test]
fn a_forged_index_cannot_make_the_owners_compact_free_real_data() {
    use cairn::index::fragment::IndexFragment;
    use cairn::index::StoredLoc;
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("srv")).unwrap();
    let rsh = fake_ssh(dir, "--append-only");
    let r = client(dir, rsh.to_str().unwrap(), &[]);
    let (one, two) = (source(dir, "one", 11), source(dir, "two", 12));
    create(&r, "one", &one);
    create(&r, "two", &two);

    // What the client computes with its key (reading what it may read).
    let repo_dir = dir.join("srv/repo");
    let repo = with_key(dir);
    let (index, _) = repo.load_index().unwrap();
    let list = cairn::repo::archives::load_all(&repo).unwrap();
    let metadata: std::collections::HashSet<_> = list
        .archives
        .iter()
        .flat_map(|(_, m)| m.items.iter().map(|c| c.id))
        .collect();
    let longest = index.iter_stored().map(|(_, _, l)| l.len).max().unwrap();
    let junk = vec![0x5a; longest as usize + 64];
    let junk_pack = common::planted_pack_id(&repo_dir, &junk);
    let forged: Vec<_> = index
        .iter_stored()
        .filter(|(id, _, _)| !metadata.contains(id))
        .map(|(id, _, l)| {
            let loc = StoredLoc {
                pack: 0,
                offset: 0,
                ..l
            };
            (id, junk_pack, loc)
        })
        .collect();
    assert!(forged.len() >= 2);
    let fragment = IndexFragment::from_entries(forged);
    let first = std::fs::read_dir(repo_dir.join("index"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .min()
        .unwrap();
    let (bytes, name) = loop {
        let b = fragment.seal(repo.crypto()).unwrap();
        let n = IndexFragment::object_name(&b);
        if n < format!("index/{first}") {
            break (b, n);
        }
    };
    let store = served_store(dir, rsh.to_str().unwrap());
    store.put(&junk_pack.object_name(), &junk).unwrap();
    store.put(&name, &bytes).unwrap();
    drop(store);

    // The attack bites: a restore reads junk.
    let target = dir.join("before");
    let o = owner(
        &r,
        dir,
        &["extract", "one", "--target", target.to_str().unwrap()],
    );
    assert_ne!(
        o.status.code(),
        Some(0),
        "the forged index was not read first"
    );
    // The owner's routine maintenance, then every archive restores exactly.
    ok(&owner(&r, dir, &["compact", "--threshold", "0"]), "compact");
    for (name, src) in [("one", &one), ("two", &two)] {
        let target = dir.join(format!("restored-{name}"));
        std::fs::create_dir_all(&target).unwrap();
        let o = owner(
            &r,
            dir,
            &["extract", name, "--target", target.to_str().unwrap()],
        );
        ok(&o, "extract");
        assert_trees_equal(src, &target.join(src.strip_prefix("/").unwrap()));
    }
    ok(&owner(&r, dir, &["check", "--verify-data"]), "check");
}

/// A pack with an authentic table of contents (the client has the key) that lists every
/// chunk of the repository over junk, its name ground to sort before the real packs.
fn forged_pack(repo: &cairn::repo::Repository) -> (String, Vec<u8>) {
    use cairn::pack::format::{self, PackEntry};
    let store = repo.store();
    let packs = cairn::index::persist::list_packs(&**store).unwrap();
    let first = packs.keys().map(|p| p.0).min().unwrap();
    let mut listed: Vec<PackEntry> = Vec::new();
    for (p, size) in &packs {
        let toc = format::read_toc(&**store, repo.crypto(), p, *size).unwrap();
        listed.extend(toc.entries.iter().copied());
    }
    for attempt in 0u64.. {
        let mut pack = format::MAGIC.to_vec();
        let mut entries = Vec::new();
        for e in &listed {
            let offset = pack.len() as u32;
            pack.extend(random_bytes(attempt, e.len as usize));
            entries.push(PackEntry { offset, ..*e });
        }
        let total = format::pack_len(pack.len() - format::HEADER_SIZE, entries.len()) as u64;
        let id = format::finish(repo.crypto(), &mut pack, &entries, total).unwrap();
        if id.0 < first {
            return (id.object_name(), pack);
        }
    }
    unreachable!()
}

/// Through the append-only server, a client plants a pack whose contents list the
/// repository's chunks over junk. The owner's `check` then suggests `check --repair`, which
/// once kept the junk (the first pack of each chunk won, unread) and deleted the real packs
/// as redundant; with `--verify-data`, one bad copy took every copy of its chunk out. Both
/// must keep the copies that authenticate.
#[test]
fn a_forged_pack_cannot_make_the_owners_repair_delete_real_data() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("srv")).unwrap();
    let rsh = fake_ssh(dir, "--append-only");
    let r = client(dir, rsh.to_str().unwrap(), &[]);
    let (one, two) = (source(dir, "one", 21), source(dir, "two", 22));
    create(&r, "one", &one);
    create(&r, "two", &two);
    let repo_dir = dir.join("srv/repo");
    let repo = with_key(dir);
    let (name, bytes) = forged_pack(&repo);
    let store = served_store(dir, rsh.to_str().unwrap());
    store.put(&name, &bytes).unwrap();
    // A record naming the real packs for deletion is not the client's to write …
    let real: Vec<_> = cairn::index::persist::list_packs(&**repo.store())
        .unwrap()
        .into_keys()
        .filter(|p| p.object_name() != name)
        .collect();
    let (record, sealed) =
        cairn::repo::retire::seal(repo.crypto(), cairn::repo::retire::Mode::Deleting, &real)
            .unwrap();
    assert!(matches!(
        store.put(&record, &sealed),
        Err(StoreError::Refused { .. })
    ));
    drop(store);
    // … but one left by an owner's interrupted compact, beside the forged pack, must not make
    // repair take the real copies with the packs it names either.
    let planted = dir.join("srv-doomed");
    common::copy_tree(&dir.join("srv"), &planted);
    let at = planted.join("repo").join(&record);
    std::fs::create_dir_all(at.parent().unwrap()).unwrap();
    std::fs::write(&at, &sealed).unwrap();
    // The same planted repository three times: repaired plainly, reading every blob, and with
    // the real packs named for deletion.
    let copy = dir.join("srv-copy");
    common::copy_tree(&dir.join("srv"), &copy);
    for (root, verify) in [
        (repo_dir.clone(), false),
        (copy.join("repo"), true),
        (planted.join("repo"), false),
    ] {
        let at = |args: &[&str]| {
            r.run_env(
                args,
                &[
                    ("CAIRN_REPO", root.to_str().unwrap()),
                    ("CAIRN_RSH", "false"),
                ],
            )
        };
        let mut repair = vec!["check", "--repair"];
        if verify {
            repair.push("--verify-data");
        }
        let o = at(&repair);
        assert!(o.status.code().is_some_and(|c| c <= 1), "{}", stderr(&o));
        for (archive, src) in [("one", &one), ("two", &two)] {
            let target = root.with_file_name(format!("restored-{archive}"));
            std::fs::create_dir_all(&target).unwrap();
            ok(
                &at(&["extract", archive, "--target", target.to_str().unwrap()]),
                "extract",
            );
            assert_trees_equal(src, &target.join(src.strip_prefix("/").unwrap()));
        }
        ok(&at(&["check", "--verify-data"]), "check");
    }
}

/// A client writes archives of the owner's name through the append-only server. The owner's
/// prune once counted them with the owner's own: it kept the client's newest and deleted the
/// owner's archive for good. Now the client's archives form a series of their own, and those
/// pruned are set aside, for the owner to bring back.
#[test]
fn an_owners_prune_never_loses_an_archive_to_ones_a_client_wrote() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("srv")).unwrap();
    let rsh = fake_ssh(dir, "--append-only");
    let r = client(dir, rsh.to_str().unwrap(), &[]);
    let mine = source(dir, "mine", 31);
    let junk = dir.join("junk");
    std::fs::create_dir(&junk).unwrap();
    std::fs::write(junk.join("j"), b"junk").unwrap();
    ok(
        &owner(&r, dir, &["create", "home", mine.to_str().unwrap()]),
        "owner's create",
    );
    for _ in 0..3 {
        std::thread::sleep(std::time::Duration::from_millis(1100));
        create(&r, "home", &junk);
    }
    let o = ok(&owner(&r, dir, &["prune", "--keep-last", "1"]), "prune");
    assert!(o.contains("set aside"), "{o}");
    ok(&owner(&r, dir, &["compact", "--threshold", "0"]), "compact");
    let target = dir.join("restored");
    std::fs::create_dir(&target).unwrap();
    let listed = ok(&owner(&r, dir, &["list", "--json-lines"]), "list");
    let owners = archive_ids(&listed)
        .into_iter()
        .map(|(id, _)| id)
        .find(|id| {
            let o = owner(&r, dir, &["list", &format!("aid:{id}")]);
            stdout(&o).contains("/a")
        })
        .expect("the owner's archive is still there");
    ok(
        &owner(
            &r,
            dir,
            &[
                "extract",
                &format!("aid:{owners}"),
                "--target",
                target.to_str().unwrap(),
            ],
        ),
        "extract",
    );
    assert_trees_equal(&mine, &target.join(mine.strip_prefix("/").unwrap()));
    let removed = ok(&owner(&r, dir, &["list", "--removed"]), "list --removed");
    assert_eq!(removed.lines().count(), 2, "{removed}");
    ok(&owner(&r, dir, &["undelete", "--all"]), "undelete");
    assert_eq!(
        archive_ids(&ok(&owner(&r, dir, &["list", "--json-lines"]), "list")).len(),
        4
    );
}

#[test]
fn a_repository_outside_the_restriction_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("allowed")).unwrap();
    let rsh = fake_ssh(
        dir,
        &format!("--restrict-to-path {}", dir.join("allowed").display()),
    );
    for path in [dir.join("srv/repo"), dir.join("allowed/../srv/repo")] {
        let o = common::cairn(
            &["init"],
            &[
                ("CAIRN_REPO", &format!("ssh://h{}", path.display())),
                ("CAIRN_RSH", rsh.to_str().unwrap()),
                ("CAIRN_PASSPHRASE", "p"),
            ],
        );
        assert_eq!(o.status.code(), Some(2));
        assert!(stderr(&o).contains("restricted to"), "{}", stderr(&o));
        assert!(!dir.join("srv").exists());
    }
}

#[test]
fn a_client_cannot_open_the_inside_of_a_repository_or_what_holds_it() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("srv")).unwrap();
    let srv = dir.join("srv");
    let rsh = fake_ssh(
        dir,
        &format!("--restrict-to-path {} --append-only", srv.display()),
    );
    let r = client(dir, rsh.to_str().unwrap(), &[]);
    let src = source(dir, "src", 3);
    create(&r, "a", &src);
    let restrict = format!("--restrict-to-path={}", srv.display());
    for (root, why) in [
        (srv.join("repo/removed"), "inside the repository"),
        (srv.join("repo/packs"), "inside the repository"),
        (srv.clone(), "holds the repository"),
    ] {
        let (replies, clean) = raw_session(&[&restrict, "--append-only"], &root, &[]);
        assert!(!clean, "{}", root.display());
        match &replies[0].result {
            Err(StoreError::Refused { why: w, .. }) => assert!(w.contains(why), "{w}"),
            other => panic!("{}: {other:?}", root.display()),
        }
    }
    assert!(!srv.join("repo/removed").exists());
    ok(&owner(&r, dir, &["list"]), "list");
}

/// Talks to `cairn serve` on its pipes: the hello, then `frames` as they are.
fn raw_session(serve_args: &[&str], repo: &Path, frames: &[Vec<u8>]) -> (Vec<Reply>, bool) {
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(serve_args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let hello = Request {
        id: 0,
        op: Op::Hello {
            protocol: PROTOCOL.into(),
            repo: repo.display().to_string(),
        },
    };
    write_frame(&mut stdin, &hello.encode()).unwrap();
    for f in frames {
        let _ = stdin.write_all(f);
    }
    drop(stdin);
    let mut out = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut out).unwrap();
    let status = child.wait().unwrap();
    let mut replies = Vec::new();
    let mut r = out.as_slice();
    while let Ok(Some(f)) = read_frame(&mut r, MAX_FRAME) {
        replies.push(Reply::decode(&f).unwrap());
    }
    replies.sort_by_key(|r| r.id);
    (replies, status.success())
}

fn framed(req: Request) -> Vec<u8> {
    let mut v = Vec::new();
    write_frame(&mut v, &req.encode()).unwrap();
    v
}

#[test]
fn names_that_climb_out_and_oversized_frames_are_refused() {
    let d = tempfile::tempdir().unwrap();
    let repo = d.path().join("repo");
    std::fs::create_dir(&repo).unwrap();
    std::fs::write(d.path().join("secret"), b"s").unwrap();
    std::os::unix::fs::symlink(d.path(), repo.join("up")).unwrap();
    let get = |id, name: &str| {
        framed(Request {
            id,
            op: Op::Get {
                name: name.into(),
                range: None,
            },
        })
    };
    std::fs::write(repo.join("config"), b"c").unwrap();
    let bounded = framed(Request {
        id: 4,
        op: Op::GetBounded {
            name: "config".into(),
            max: u64::MAX,
        },
    });
    let (replies, clean) = raw_session(
        &[],
        &repo,
        &[
            get(1, "../secret"),
            get(2, "/etc/passwd"),
            get(3, "up/secret"),
            bounded,
        ],
    );
    assert!(clean);
    assert_eq!(replies.len(), 5);
    // The largest bound there is reads the object (it once overflowed, and a worker died).
    assert!(
        matches!(&replies[4].result, Ok(cairn::store::ssh::frame::Answer::Data(d)) if d == b"c")
    );
    for r in &replies[1..4] {
        assert!(
            matches!(
                r.result,
                Err(StoreError::InvalidName { .. }) | Err(StoreError::Refused { .. })
            ),
            "{:?}",
            r.result
        );
    }
    // A frame announcing 4 GiB: refused before it is read, the connection closed.
    let mut huge = u32::MAX.to_le_bytes().to_vec();
    huge.extend_from_slice(&[0; 64]);
    let (replies, clean) = raw_session(&[], &repo, &[huge, get(9, "x")]);
    assert!(!clean, "the server ends the connection with an error");
    assert_eq!(replies.len(), 1, "only the hello is answered");
}

#[test]
fn the_quota_holds_and_nothing_is_committed() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("srv")).unwrap();
    // Room for the repository's 1 MiB reserve and its first objects, not for the data.
    let rsh = fake_ssh(dir, "--storage-quota 1500k");
    let r = client(dir, rsh.to_str().unwrap(), &[]);
    let src = dir.join("big");
    std::fs::create_dir(&src).unwrap();
    std::fs::write(src.join("f"), random_bytes(9, 3_000_000)).unwrap();
    let o = r.run(&["create", "big", src.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("quota"), "{}", stderr(&o));
    assert_eq!(stdout(&r.run(&["list"])), "");
    let du: u64 = walkdir::WalkDir::new(dir.join("srv/repo"))
        .into_iter()
        .filter_map(|e| e.ok())
        .filter_map(|e| e.metadata().ok())
        .filter(|m| m.is_file())
        .map(|m| m.len())
        .sum();
    assert!(du <= 1500 << 10, "{du} bytes held");
    ok(&r.run(&["check"]), "check");
}

#[test]
fn a_connection_lost_after_any_request_leaves_a_whole_repository() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    std::fs::create_dir_all(dir.join("srv")).unwrap();
    let rsh = fake_ssh(dir, "");
    let r = client(dir, rsh.to_str().unwrap(), &[]);
    let src = source(dir, "src", 5);
    let count = dir.join("count");
    let create = |name: &str, die_at: u64| {
        let _ = std::fs::remove_file(&count);
        std::fs::write(src.join("changing"), name).unwrap();
        let at = format!("{die_at}:{}", count.display());
        r.run_env(
            &["create", name, src.to_str().unwrap()],
            &[("CAIRN_TEST_SERVE_DIE_AT", &at)],
        )
    };
    // How many requests a create makes, counted by the servers.
    ok(&create("counting", u64::MAX), "create");
    let requests = std::fs::metadata(&count).unwrap().len();
    assert!(requests > 10, "{requests}");
    let mut failed = 0;
    for n in 1..=requests {
        let o = create(&format!("a{n}"), n);
        match o.status.code() {
            Some(0) => {}
            Some(2) => failed += 1,
            other => panic!("n={n}: exit {other:?}: {}", stderr(&o)),
        }
        assert!(!stderr(&o).contains("panicked"), "{}", stderr(&o));
        // The next command, with the connection whole, and check.
        ok(&create(&format!("b{n}"), u64::MAX), "next create");
        ok(&r.run(&["check"]), "check");
    }
    eprintln!("{requests} requests; the loss failed {failed} creates, the others retried");
}
