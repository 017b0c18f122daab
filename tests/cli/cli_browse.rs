//! Looking into backups without restoring them whole: find, dump, export-tar, mount, and
//! extract's --strip-components and --exclude. The real binary on real directories.

use crate::common;

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use common::{assert_trees_equal, random_bytes, stderr, stdout, Repo};

fn is_root() -> bool {
    rustix::process::geteuid().is_root()
}

/// A tree with what a backup holds: nested directories, a multi-chunk file, an empty file,
/// a symlink, two names of one inode, a fifo, a user xattr (where the file system takes
/// them), nanosecond mtimes, and as root a character device.
fn sample(root: &Path) -> PathBuf {
    let src = root.join("src");
    std::fs::create_dir_all(src.join("docs/deep")).unwrap();
    std::fs::create_dir_all(src.join("photos")).unwrap();
    std::fs::write(src.join("docs/notes.txt"), b"remember the milk\n").unwrap();
    std::fs::write(src.join("docs/deep/report.pdf"), random_bytes(1, 40_000)).unwrap();
    std::fs::write(src.join("photos/big.jpg"), random_bytes(2, 3_500_000)).unwrap();
    std::fs::write(src.join("photos/empty.jpg"), b"").unwrap();
    std::fs::write(src.join("photos/cache.tmp"), b"scratch").unwrap();
    std::os::unix::fs::symlink("../docs/notes.txt", src.join("photos/link")).unwrap();
    std::fs::hard_link(
        src.join("docs/notes.txt"),
        src.join("photos/notes-again.txt"),
    )
    .unwrap();
    let fifo = src.join("docs/pipe");
    assert!(std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap()
        .success());
    let _ = xattr::set(src.join("docs/notes.txt"), "user.color", b"blue");
    if is_root() {
        assert!(std::process::Command::new("mknod")
            .arg(src.join("docs/null"))
            .args(["c", "1", "3"])
            .status()
            .unwrap()
            .success());
    }
    let mut t = SystemTime::UNIX_EPOCH + Duration::new(1_600_000_000, 123_456_789);
    for e in walkdir::WalkDir::new(&src).contents_first(true) {
        let e = e.unwrap();
        t += Duration::new(61, 7);
        if e.file_type().is_file() || e.file_type().is_dir() {
            std::fs::File::open(e.path())
                .and_then(|f| f.set_times(std::fs::FileTimes::new().set_modified(t)))
                .unwrap();
        }
    }
    src
}

/// A repository holding `sample` as archive "snap" (stored as `src/...`).
fn backed_up() -> (Repo, PathBuf) {
    let repo = Repo::new();
    let src = sample(repo.dir.path());
    let o = repo.run_in(repo.dir.path(), &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "create: {}", stderr(&o));
    (repo, src)
}

#[test]
fn find_names_and_paths_in_every_archive() {
    let (repo, src) = backed_up();
    std::fs::remove_file(src.join("docs/deep/report.pdf")).unwrap();
    let o = repo.run_in(repo.dir.path(), &["create", "later", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));

    // A name pattern matches at any depth, in every archive that holds it.
    let out = repo.ok(&["find", "*.pdf"]);
    assert!(out.contains("archive snap of "), "{out}");
    assert!(out.contains("src/docs/deep/report.pdf"), "{out}");
    assert!(!out.contains("archive later"), "{out}");
    assert_eq!(out.matches("report.pdf").count(), 1, "{out}");

    // A path pattern matches the stored path; --archive limits the search.
    let out = repo.ok(&["find", "src/*/notes*", "--archive", "later"]);
    assert!(out.contains("archive later of "), "{out}");
    assert!(out.contains("src/docs/notes.txt"), "{out}");
    assert!(out.contains("src/photos/notes-again.txt"), "{out}");
    assert!(!out.contains("archive snap"), "{out}");

    // For scripts: one object per match, with the archive.
    let out = repo.ok(&["find", "--json-lines", "big.jpg"]);
    let rows: Vec<serde_json::Value> = out
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(rows.len(), 2, "{out}");
    assert_eq!(rows[0]["archive"], "snap");
    assert_eq!(rows[1]["archive"], "later");
    assert_eq!(rows[0]["path"], "src/photos/big.jpg");
    assert_eq!(rows[0]["size"], 3_500_000);
    assert!(rows[0]["mtime"].as_str().unwrap().starts_with("2020-09-"));

    // Nothing found: said, exit 1.
    let o = repo.run(&["find", "*.docx"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("nothing matches \"*.docx\" in 2 archives"));
    assert!(stdout(&o).is_empty());
    let o = repo.run(&["find", "*.pdf", "--archive", "nosuch"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("no archive named \"nosuch\""),
        "{}",
        stderr(&o)
    );
}

#[test]
fn dump_writes_one_file_or_a_directory_as_tar() {
    let (repo, src) = backed_up();
    let o = repo.run(&["dump", "snap", "src/photos/big.jpg"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout == std::fs::read(src.join("photos/big.jpg")).unwrap());
    // A leading slash is taken as in extract.
    let o = repo.run(&["dump", "snap", "/src/photos/empty.jpg"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(o.stdout.is_empty());

    // A directory: a tar stream of it, which tar reads.
    let o = repo.run(&["dump", "snap", "src/docs"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = repo.dir.path().join("docs.tar");
    std::fs::write(&out, &o.stdout).unwrap();
    let listed = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&out)
        .output()
        .unwrap();
    let names = stdout(&listed);
    assert!(names.contains("src/docs/\n"), "{names}");
    assert!(names.contains("src/docs/deep/report.pdf\n"), "{names}");
    assert!(!names.contains("photos"), "{names}");

    // What cannot be dumped says why.
    for (path, why) in [
        ("src/nope", "no such path in archive snap"),
        ("src/photos/link", "is a symbolic link to ../docs/notes.txt"),
        ("src/docs/pipe", "is a fifo, which has no contents"),
        ("/", "dump needs a path inside the archive"),
    ] {
        let o = repo.run(&["dump", "snap", path]);
        assert_eq!(o.status.code(), Some(2), "{path}");
        assert!(stderr(&o).contains(why), "{path}: {}", stderr(&o));
    }
}

/// GNU tar, as a user would run it to restore an export.
fn gnu_untar(tar_file: &Path, into: &Path, extra: &[&str]) {
    std::fs::create_dir_all(into).unwrap();
    let o = std::process::Command::new("tar")
        .args(["--xattrs", "--xattrs-include=*", "--numeric-owner", "-xpf"])
        .arg(tar_file)
        .arg("-C")
        .arg(into)
        .args(extra)
        .output()
        .unwrap();
    assert!(o.status.success(), "tar: {}", stderr(&o));
}

/// Many small files are read ahead in groups, a large one among them on its own, with
/// directories, a symlink, an empty file and a hardlinked pair between: every entry in its
/// place with its own bytes, as GNU tar restores them, and the stream exactly what `dump`
/// of the whole archive writes.
#[test]
fn export_tar_of_many_small_files_keeps_each_in_its_place() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    for d in 0..3 {
        let dir = src.join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for i in 0..150u64 {
            let n = d * 1000 + i;
            std::fs::write(
                dir.join(format!("f{i:03}")),
                random_bytes(n, 100 + (n as usize * 37) % 9000),
            )
            .unwrap();
        }
    }
    std::fs::write(src.join("d1/f075-large"), random_bytes(99, 2_500_000)).unwrap();
    std::fs::write(src.join("d1/f076-empty"), b"").unwrap();
    std::os::unix::fs::symlink("f001", src.join("d2/link")).unwrap();
    std::fs::hard_link(src.join("d0/f010"), src.join("d2/f010-again")).unwrap();
    let o = repo.run_in(base, &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let tar_file = base.join("snap.tar");
    repo.ok(&["export-tar", "snap", tar_file.to_str().unwrap()]);
    let untarred = base.join("untarred");
    gnu_untar(&tar_file, &untarred, &[]);
    assert_trees_equal(&src, &untarred.join("src"));
    let o = repo.run(&["dump", "snap", "src"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        o.stdout == std::fs::read(&tar_file).unwrap(),
        "dump and export-tar differ"
    );
}

/// `export-tar` of archive `snap` (with `extra` options) to stdout, which a damaged chunk
/// stops: exit 2, the error naming a corrupt chunk. What the stream holds is restored by GNU
/// tar (which fails at its end) under `into`; returns the names restored in `src`, sorted.
fn export_stopped_by_damage(repo: &Repo, extra: &[&str], into: &Path) -> Vec<String> {
    let args: Vec<&str> = ["export-tar"]
        .into_iter()
        .chain(extra.iter().copied())
        .chain(["snap", "-"])
        .collect();
    let o = repo.run(&args);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("corrupt chunk"), "{}", stderr(&o));
    let partial = into.with_extension("tar");
    std::fs::write(&partial, &o.stdout).unwrap();
    std::fs::create_dir_all(into).unwrap();
    let _ = std::process::Command::new("tar")
        .arg("-xf")
        .arg(&partial)
        .arg("-C")
        .arg(into)
        .output()
        .unwrap();
    let mut names: Vec<String> = std::fs::read_dir(into.join("src"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// A damaged chunk among small files read ahead together: the stream stops at the file it
/// belongs to, with the error naming the chunk, and every file before it is whole.
#[test]
fn export_tar_stops_at_the_damaged_small_file() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..300u64 {
        std::fs::write(src.join(format!("f{i:03}")), random_bytes(i, 4096)).unwrap();
    }
    let o = repo.run_in(base, &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    // The data pack is the largest; a bit flipped in its middle damages one file's chunk.
    let pack = walkdir::WalkDir::new(repo.path.join("packs"))
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .max_by_key(|e| e.metadata().unwrap().len())
        .unwrap()
        .into_path();
    let mut bytes = std::fs::read(&pack).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(&pack, bytes).unwrap();
    let into = base.join("untarred");
    let mut names = export_stopped_by_damage(&repo, &[], &into);
    // The last name is the damaged file (its header was written); the ones before are whole
    // and are every file before it.
    let last = names.pop().unwrap();
    assert!(
        names.len() > 64 && names.len() < 299,
        "{} files before {last}",
        names.len()
    );
    for (i, name) in names.iter().enumerate() {
        assert_eq!(name, &format!("f{i:03}"));
        let got = std::fs::read(into.join("src").join(name)).unwrap();
        assert!(got == random_bytes(i as u64, 4096), "{name} differs");
    }
}

/// Large files one after another are read through one pipeline (the next one's first runs
/// decrypted while the end of the one before is written), with a small file, a later name of
/// one of them and an empty file among them: each whole in its place, as GNU tar restores
/// them, and the later name a link to the first.
#[test]
fn export_tar_of_consecutive_large_files_keeps_each_whole() {
    // Small packs: each file's chunks lie in several packs, so several runs a file.
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path();
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    for i in 0..4u64 {
        let len = 2_500_000 + i as usize * 300_001;
        std::fs::write(src.join(format!("big{i}")), random_bytes(200 + i, len)).unwrap();
    }
    std::fs::write(src.join("big1-small"), b"between").unwrap();
    std::fs::hard_link(src.join("big2"), src.join("big2-again")).unwrap();
    std::fs::write(src.join("big2-empty"), b"").unwrap();
    let o = repo.run_in(base, &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let tar_file = base.join("snap.tar");
    // Several threads whatever this machine has.
    let to = tar_file.to_str().unwrap();
    repo.ok(&["export-tar", "--threads", "4", "snap", to]);
    let untarred = base.join("untarred");
    gnu_untar(&tar_file, &untarred, &[]);
    assert_trees_equal(&src, &untarred.join("src"));
    let ino = |name: &str| {
        std::fs::metadata(untarred.join("src").join(name))
            .unwrap()
            .ino()
    };
    assert_eq!(ino("big2"), ino("big2-again"), "the later name is a link");
    let o = repo.run(&["dump", "snap", "src"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        o.stdout == std::fs::read(&tar_file).unwrap(),
        "dump and export-tar differ"
    );

    // A damaged chunk a third of the way into the data, past the first file: the stream
    // stops in the file it belongs to, after that file's header, and the files before it
    // are whole.
    let mut packs: Vec<(SystemTime, PathBuf)> = walkdir::WalkDir::new(repo.path.join("packs"))
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file() && e.metadata().unwrap().len() > 100_000)
        .map(|e| (e.metadata().unwrap().modified().unwrap(), e.into_path()))
        .collect();
    packs.sort();
    let victim = &packs[packs.len() / 3].1;
    let mut bytes = std::fs::read(victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 1;
    std::fs::write(victim, bytes).unwrap();
    let into = base.join("partial");
    let mut names = export_stopped_by_damage(&repo, &["--threads", "4"], &into);
    let damaged = names.pop().unwrap();
    assert!(
        damaged.starts_with("big") && !names.is_empty(),
        "{names:?} {damaged}"
    );
    for name in &names {
        let got = std::fs::read(into.join("src").join(name)).unwrap();
        assert!(
            got == std::fs::read(src.join(name)).unwrap(),
            "{name} differs"
        );
    }
}

/// A small file with many names is read once: its later names are link entries, and what
/// reads ahead does not fetch and decrypt it again for each (3,000 names took 12 times as
/// long as before reading ahead).
#[test]
fn export_tar_reads_a_hardlinked_small_file_once() {
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a"), random_bytes(3, 100_000)).unwrap();
    for i in 0..300 {
        std::fs::hard_link(src.join("a"), src.join(format!("l{i:03}"))).unwrap();
    }
    let o = repo.run_in(base, &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let log = base.join("store.log");
    let o = repo.run_env(
        &["export-tar", "snap", "-"],
        &[("CAIRN_STORE_LOG", log.to_str().unwrap())],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let reads = std::fs::read_to_string(&log)
        .unwrap()
        .lines()
        .filter(|l| l.contains(" get packs/"))
        .count();
    // The archive's items, and the file once (29 reads when each name was read ahead).
    assert!(reads <= 6, "{reads} pack reads");
}

/// A small file of two chunks whose second is damaged: what was read of it before the
/// damage is in the stream, as when it was read as its turn came, then the error.
#[test]
fn export_tar_writes_a_small_file_up_to_its_damaged_chunk() {
    // Packs handed off past 200 kB: each chunk of the file in a pack of its own, in order.
    // The chunker's cuts are keyed, so a 1 MiB file is two chunks in some repositories only.
    let data = random_bytes(11, 1 << 20);
    for _attempt in 0..20 {
        let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
        let base = repo.dir.path();
        let src = base.join("src");
        std::fs::create_dir_all(&src).unwrap();
        std::fs::write(src.join("a"), &data).unwrap();
        std::fs::write(src.join("b"), b"after").unwrap();
        let o = repo.run_in(base, &["create", "snap", "src"], &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        let mut packs: Vec<(SystemTime, u64, PathBuf)> =
            walkdir::WalkDir::new(repo.path.join("packs"))
                .into_iter()
                .map(|e| e.unwrap())
                .filter(|e| e.file_type().is_file())
                .map(|e| {
                    let md = e.metadata().unwrap();
                    (md.modified().unwrap(), md.len(), e.path().to_path_buf())
                })
                .filter(|(_, len, _)| *len > 100_000)
                .collect();
        if packs.len() != 2 {
            continue;
        }
        packs.sort();
        let second = &packs[1].2;
        let mut bytes = std::fs::read(second).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 1;
        std::fs::write(second, bytes).unwrap();
        let o = repo.run(&["export-tar", "snap", "-"]);
        assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
        assert!(stderr(&o).contains("corrupt chunk"), "{}", stderr(&o));
        // The first chunk (at least 512 KiB) is there, right after the header.
        let first = &data[..512 << 10];
        assert!(
            o.stdout.windows(first.len()).any(|w| w == first),
            "the first chunk is not in the {} bytes written",
            o.stdout.len()
        );
        return;
    }
    panic!("no repository cut the file in two chunks");
}

/// A stream to a pipe goes through a pipe of 1 MiB, not the system's 64 KiB (cairn and the
/// reader took turns for every 64 KiB: 1.5 times the time for 1 GiB to `cat`); what comes
/// out is the file.
#[test]
fn dump_and_export_tar_to_a_pipe_widen_it() {
    use std::io::Read;
    use std::os::fd::AsFd;
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    let data = random_bytes(21, 3 << 20);
    std::fs::write(src.join("big"), &data).unwrap();
    let o = repo.run_in(base, &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    for args in [
        &["dump", "snap", "src/big"][..],
        &["export-tar", "snap", "-"][..],
    ] {
        let mut child = repo
            .command(base, args, &[])
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = child.stdout.take().unwrap();
        let mut first = [0u8; 1];
        out.read_exact(&mut first).unwrap();
        let size = nix::fcntl::fcntl(out.as_fd(), nix::fcntl::FcntlArg::F_GETPIPE_SZ).unwrap();
        let mut rest = Vec::new();
        out.read_to_end(&mut rest).unwrap();
        assert!(child.wait().unwrap().success(), "{args:?}");
        assert_eq!(size, 1 << 20, "{args:?}");
        if args[0] == "dump" {
            assert!(first[0] == data[0] && rest == data[1..], "dump's bytes");
        }
    }
}

#[test]
fn export_tar_extracts_with_gnu_tar_to_what_extract_restores() {
    let (repo, _src) = backed_up();
    let base = repo.dir.path();
    let restored = base.join("restored");
    repo.ok(&["extract", "snap", "--target", restored.to_str().unwrap()]);

    let tar_file = base.join("snap.tar");
    let out = repo.ok(&["export-tar", "snap", tar_file.to_str().unwrap()]);
    let items = if is_root() { 13 } else { 12 };
    assert!(out.contains(&format!("Wrote {items} items")), "{out}");
    let untarred = base.join("untarred");
    gnu_untar(&tar_file, &untarred, &[]);
    assert_trees_equal(&restored, &untarred);
    let notes = std::fs::metadata(untarred.join("src/docs/notes.txt")).unwrap();
    assert_eq!(notes.nlink(), 2, "the hardlink is a link in the tar");

    // To stdout, only some paths, names shortened.
    let o = repo.run(&[
        "export-tar",
        "--strip-components",
        "1",
        "--exclude",
        "*.tmp",
        "snap",
        "-",
        "src/photos",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let part = base.join("part.tar");
    std::fs::write(&part, &o.stdout).unwrap();
    let listed = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&part)
        .output()
        .unwrap();
    let mut names: Vec<String> = stdout(&listed).lines().map(String::from).collect();
    names.sort();
    assert_eq!(
        names,
        [
            "photos/",
            "photos/big.jpg",
            "photos/empty.jpg",
            "photos/link",
            "photos/notes-again.txt"
        ]
    );

    // A failed export leaves no file behind, and an existing one as it was.
    std::fs::write(&part, b"keep me").unwrap();
    let o = repo.run(&["export-tar", "nosuch", part.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert_eq!(std::fs::read(&part).unwrap(), b"keep me");
    // Into a device, written (not replaced).
    let o = repo.run(&["export-tar", "snap", "/dev/null"]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    use std::os::unix::fs::FileTypeExt;
    assert!(std::fs::metadata("/dev/null")
        .unwrap()
        .file_type()
        .is_char_device());
}

/// A file with holes is exported sparse (PAX sparse format 1.0) and inode flags as
/// SCHILY.fflags: GNU tar and bsdtar both restore the file with its holes and its bytes, and
/// bsdtar --fflags restores the flags.
#[test]
fn export_tar_keeps_holes_and_inode_flags() {
    use std::os::unix::fs::FileExt;
    let repo = Repo::new();
    let base = repo.dir.path();
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    const MIB: u64 = 1 << 20;
    let disk = std::fs::File::create(src.join("disk.img")).unwrap();
    disk.set_len(40 * MIB).unwrap();
    disk.write_all_at(b"head", 0).unwrap();
    disk.write_all_at(&random_bytes(7, 300_000), 20 * MIB)
        .unwrap();
    disk.write_all_at(b"tail", 40 * MIB - 4).unwrap();
    drop(disk);
    let empty = std::fs::File::create(src.join("empty.img")).unwrap();
    empty.set_len(24 * MIB).unwrap();
    drop(empty);
    std::fs::write(src.join("flagged"), b"not for dump").unwrap();
    let flags = std::process::Command::new("chattr")
        .args(["+d"])
        .arg(src.join("flagged"))
        .status()
        .is_ok_and(|s| s.success());
    let o = repo.run_in(base, &["create", "s", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let tar_file = base.join("s.tar");
    repo.ok(&["export-tar", "s", tar_file.to_str().unwrap()]);
    // The holes are not in the tar: 64 MiB of files, well under 8 MiB of tar.
    let tar_len = std::fs::metadata(&tar_file).unwrap().len();
    assert!(tar_len < 8 * MIB, "the tar holds {tar_len} bytes");
    let check = |root: &Path, tool: &str| {
        for name in ["disk.img", "empty.img"] {
            let (a, b) = (src.join(name), root.join("src").join(name));
            assert!(
                std::fs::read(&a).unwrap() == std::fs::read(&b).unwrap(),
                "{tool}: {name}"
            );
            let blocks = std::fs::metadata(&b).unwrap().blocks() * 512;
            assert!(
                blocks < 4 * MIB,
                "{tool}: {name} takes {blocks} bytes on disk"
            );
        }
    };
    let gnu = base.join("gnu");
    gnu_untar(&tar_file, &gnu, &[]);
    check(&gnu, "GNU tar");
    if std::process::Command::new("bsdtar")
        .arg("--version")
        .output()
        .is_err()
    {
        eprintln!("bsdtar is not installed: its half of the test was not run");
        return;
    }
    let bsd = base.join("bsd");
    std::fs::create_dir_all(&bsd).unwrap();
    let o = std::process::Command::new("bsdtar")
        .args(["--fflags", "-xpf"])
        .arg(&tar_file)
        .arg("-C")
        .arg(&bsd)
        .output()
        .unwrap();
    assert!(o.status.success(), "bsdtar: {}", stderr(&o));
    check(&bsd, "bsdtar");
    if flags {
        let attrs = std::process::Command::new("lsattr")
            .arg(bsd.join("src/flagged"))
            .output()
            .unwrap();
        let shown = stdout(&attrs);
        let mode = shown.split_whitespace().next().unwrap_or("");
        assert!(mode.contains('d'), "nodump not restored: {shown}");
    } else {
        eprintln!("chattr +d is not supported here: the flags were not checked");
    }
}

#[test]
fn extract_strips_components_and_excludes() {
    let (repo, src) = backed_up();
    let base = repo.dir.path();
    let t = base.join("t");
    let o = repo.run(&[
        "extract",
        "snap",
        "--target",
        t.to_str().unwrap(),
        "--strip-components",
        "2",
        "--exclude",
        "*.tmp",
        "--exclude",
        "src/docs/deep",
        "src/photos",
        "src/docs",
    ]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut got: Vec<String> = walkdir::WalkDir::new(&t)
        .min_depth(1)
        .into_iter()
        .map(|e| {
            e.unwrap()
                .path()
                .strip_prefix(&t)
                .unwrap()
                .to_string_lossy()
                .into_owned()
        })
        .collect();
    got.sort();
    let mut want = vec![
        "big.jpg",
        "empty.jpg",
        "link",
        "notes-again.txt",
        "notes.txt",
        "pipe",
    ];
    if is_root() {
        want.push("null");
    }
    want.sort();
    assert_eq!(got, want);
    assert_eq!(
        std::fs::read(t.join("big.jpg")).unwrap(),
        std::fs::read(src.join("photos/big.jpg")).unwrap()
    );
    // The two names of one inode are still one inode under their new names.
    assert_eq!(
        std::fs::metadata(t.join("notes.txt")).unwrap().ino(),
        std::fs::metadata(t.join("notes-again.txt")).unwrap().ino()
    );
}

/// Unmounts on drop, so that a failing test leaves no mount behind.
struct Mounted(PathBuf);

impl Drop for Mounted {
    fn drop(&mut self) {
        for (tool, flags) in [
            ("fusermount", &["-u"][..]),
            ("fusermount3", &["-u"]),
            ("umount", &[]),
        ] {
            let done = std::process::Command::new(tool)
                .args(flags)
                .arg(&self.0)
                .output();
            if done.is_ok_and(|o| o.status.success()) {
                break;
            }
        }
    }
}

fn is_mounted(at: &Path) -> bool {
    let at = at.canonicalize().unwrap();
    std::fs::read_to_string("/proc/self/mounts")
        .unwrap()
        .lines()
        .any(|l| l.split(' ').nth(1) == Some(at.to_str().unwrap()))
}

fn fuse_usable() -> bool {
    let ok = Path::new("/dev/fuse").exists() && is_root();
    if !ok {
        eprintln!("skipped: FUSE is not usable here (needs /dev/fuse and root)");
    }
    ok
}

#[test]
fn mount_serves_an_archive_with_its_metadata_and_unmounts() {
    if !fuse_usable() {
        return;
    }
    let (repo, src) = backed_up();
    let base = repo.dir.path();
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let restored = base.join("restored");
    repo.ok(&["extract", "snap", "--target", restored.to_str().unwrap()]);

    // Returns once mounted, the server in the background.
    let out = repo.ok(&["mount", "snap", mnt.to_str().unwrap()]);
    let guard = Mounted(mnt.clone());
    assert!(out.contains("Mounted at"), "{out}");
    assert!(is_mounted(&mnt));
    assert_trees_equal(&restored.join("src"), &mnt.join("src"));
    assert_trees_equal(&src, &mnt.join("src"));
    let a = std::fs::metadata(mnt.join("src/docs/notes.txt")).unwrap();
    let b = std::fs::metadata(mnt.join("src/photos/notes-again.txt")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2), "one inode, two names");
    // Read-only.
    let err = std::fs::write(mnt.join("src/docs/new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(nix::errno::Errno::EROFS as i32));
    // Reads at any offset, across chunk boundaries.
    let want = std::fs::read(src.join("photos/big.jpg")).unwrap();
    let f = std::fs::File::open(mnt.join("src/photos/big.jpg")).unwrap();
    for off in [0u64, 1, 1_048_575, 2_000_001, 3_499_990] {
        let mut buf = vec![0u8; 300_000];
        let n = std::os::unix::fs::FileExt::read_at(&f, &mut buf, off).unwrap();
        let end = (off as usize + 300_000).min(want.len());
        assert_eq!(&buf[..n], &want[off as usize..end], "at {off}");
    }
    drop(f);

    repo.ok(&["umount", mnt.to_str().unwrap()]);
    assert!(!is_mounted(&mnt));
    drop(guard);
    // The server is gone with its lock: a command that needs the repository alone runs.
    repo.ok(&["compact"]);
}

#[test]
fn mount_of_a_repository_lists_archives_and_stops_on_sigterm() {
    if !fuse_usable() {
        return;
    }
    let (repo, src) = backed_up();
    let o = repo.run_in(repo.dir.path(), &["create", "other", "src/docs"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mnt = repo.dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    let mut child = repo
        .command(
            repo.dir.path(),
            &["mount", "-f", mnt.to_str().unwrap()],
            &[],
        )
        .spawn()
        .unwrap();
    let _guard = Mounted(mnt.clone());
    let t0 = std::time::Instant::now();
    while !is_mounted(&mnt) {
        assert!(t0.elapsed() < Duration::from_secs(20), "not mounted");
        std::thread::sleep(Duration::from_millis(50));
    }
    let mut dirs: Vec<String> = std::fs::read_dir(&mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    dirs.sort();
    assert_eq!(dirs.len(), 2, "{dirs:?}");
    for (d, name) in dirs.iter().zip(["other", "snap"]) {
        // NAME-YYYY-MM-DDTHH:MM:SS-xxxxxxxx
        assert!(d.starts_with(&format!("{name}-")), "{d}");
        let id = d.rsplit('-').next().unwrap();
        assert!(
            id.len() == 8 && id.bytes().all(|b| b.is_ascii_hexdigit()),
            "{d}"
        );
        assert_eq!(d.len(), name.len() + 1 + 19 + 1 + 8, "{d}");
    }
    let snap = mnt.join(&dirs[1]);
    assert_trees_equal(&src, &snap.join("src"));
    assert!(!mnt.join(&dirs[0]).join("src/photos").exists());

    rustix::process::kill_process(
        rustix::process::Pid::from_child(&child),
        rustix::process::Signal::TERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "{:?}", child.stderr.take());
    assert!(!is_mounted(&mnt));
}

#[test]
fn mount_refuses_what_it_cannot_mount() {
    let (repo, _) = backed_up();
    let file = repo.dir.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let o = repo.run(&["mount", "snap", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("not a directory"), "{}", stderr(&o));
    let o = repo.run(&["mount", "snap", "/nonexistent/mnt"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("/nonexistent/mnt"), "{}", stderr(&o));
    if fuse_usable() {
        let mnt = repo.dir.path().join("m");
        std::fs::create_dir(&mnt).unwrap();
        let o = repo.run(&["mount", "nosuch", mnt.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(2));
        assert!(
            stderr(&o).contains("no archive named \"nosuch\""),
            "{}",
            stderr(&o)
        );
        assert!(!is_mounted(&mnt));
    }
}

#[test]
fn export_leaves_out_a_damaged_file_and_says_so() {
    // Small packs: the big file's first chunk gets a pack of its own, written first (a pack
    // is handed off once it passes 200 kB, and chunks are at least 512 KiB); the archive's
    // metadata comes last, in another.
    let repo = Repo::with_env(&[("CAIRN_PACK_SIZE", "200000")]);
    let base = repo.dir.path();
    let src = base.join("src");
    std::fs::create_dir_all(&src).unwrap();
    std::fs::write(src.join("a-big.bin"), random_bytes(5, 3_000_000)).unwrap();
    std::fs::write(src.join("z.txt"), b"still here\n").unwrap();
    let o = repo.run_in(base, &["create", "snap", "src"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mut packs: Vec<(SystemTime, PathBuf)> = walkdir::WalkDir::new(repo.path.join("packs"))
        .into_iter()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().is_file())
        .map(|e| {
            (
                e.metadata().unwrap().modified().unwrap(),
                e.path().to_path_buf(),
            )
        })
        .collect();
    packs.sort();
    assert!(packs.len() >= 2, "{packs:?}");
    std::fs::remove_file(&packs[0].1).unwrap();
    // The repair drops the lost chunks from the index and flags the file damaged.
    let o = repo.run(&["check", "--repair"]);
    assert_ne!(o.status.code(), Some(0), "the repair found damage");

    let tar_file = base.join("out.tar");
    let o = repo.run(&["export-tar", "snap", tar_file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(
        stderr(&o).contains("src/a-big.bin: not exported: chunk"),
        "{}",
        stderr(&o)
    );
    let listed = std::process::Command::new("tar")
        .arg("-tf")
        .arg(&tar_file)
        .output()
        .unwrap();
    let names = stdout(&listed);
    assert!(names.contains("src/z.txt"), "{names}");
    assert!(!names.contains("a-big.bin"), "{names}");
    // One file asked for, and it cannot be read: an error.
    let o = repo.run(&["dump", "snap", "src/a-big.bin"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(stderr(&o).contains("missing"), "{}", stderr(&o));
}

#[test]
fn mount_of_an_archive_out_of_tree_order_shares_hardlinks_across_roots() {
    // `create ooo b a` walks b before a: the item stream is not in tree order, so the
    // mount reads it whole. A hardlink across the roots keeps one inode.
    if !fuse_usable() {
        return;
    }
    let repo = Repo::new();
    let base = repo.dir.path();
    std::fs::create_dir_all(base.join("a")).unwrap();
    std::fs::create_dir_all(base.join("b")).unwrap();
    std::fs::write(base.join("a/x"), b"hello").unwrap();
    std::fs::hard_link(base.join("a/x"), base.join("b/y")).unwrap();
    std::fs::write(base.join("b/z"), b"other").unwrap();
    let o = repo.run_in(base, &["create", "ooo", "b", "a"], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let mnt = base.join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    repo.ok(&["mount", "ooo", mnt.to_str().unwrap()]);
    let _guard = Mounted(mnt.clone());
    let a = std::fs::metadata(mnt.join("a/x")).unwrap();
    let b = std::fs::metadata(mnt.join("b/y")).unwrap();
    assert_eq!((a.ino(), a.nlink()), (b.ino(), 2));
    assert_eq!(std::fs::read(mnt.join("b/y")).unwrap(), b"hello");
    assert_eq!(std::fs::read(mnt.join("b/z")).unwrap(), b"other");
    repo.ok(&["umount", mnt.to_str().unwrap()]);
}
