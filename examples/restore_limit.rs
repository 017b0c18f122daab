//! What a restore cannot go below on this machine: the work every restore of a repository's
//! data must do, each part done the fastest way the machine allows, without cairn's engine.
//!
//! ```text
//! restore_limit REPO SOURCE WORK [THREADS]
//! ```
//! `REPO` holds one backup of `SOURCE` (a local repository; `CAIRN_PASSPHRASE` opens it).
//! Prints, in seconds:
//!
//! - `read`: reading every pack from the file system into memory (one thread per pack, all
//!   cores; the caller warms them first, as before a timed extract);
//! - `decode`: authenticating, decrypting, decompressing and checking the id of every chunk
//!   the index names, from memory, on THREADS threads (default: all cores), and the CPU it
//!   took (`decode_cpu`);
//! - `write`: writing SOURCE's files, with their sizes, from memory into a new directory under
//!   WORK (same file system as a restore's target): create, write, close, in the order the walk
//!   finds them, on one thread and on THREADS threads; the faster, and its CPU (`write_cpu`).
//!
//! `scripts/bench-restore.sh` adds what an empty restore costs (open the repository, read the
//! archive) and reports extract against `fixed + max((read + decode + write CPU) / cores,
//! write wall)`: the CPU all of it needs spread over every core, or the file system's own
//! time to take the bytes, whichever is longer.

use std::fs;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use cairn::index::StoredLoc;
use cairn::repo::Repository;
use cairn::store::local::LocalStore;
use cairn::util::id::{ChunkId, PackId};

fn cpu() -> Duration {
    let ts = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(
        ts.tv_sec.max(0) as u64,
        ts.tv_nsec.clamp(0, 999_999_999) as u32,
    )
}

/// Runs `work(i)` for every `i < n` on `threads` threads; returns wall and CPU time.
fn parallel(threads: usize, n: usize, work: impl Fn(usize) + Sync) -> (Duration, Duration) {
    let next = AtomicUsize::new(0);
    let (t, c) = (Instant::now(), cpu());
    std::thread::scope(|s| {
        for _ in 0..threads {
            s.spawn(|| loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= n {
                    break;
                }
                work(i);
            });
        }
    });
    (t.elapsed(), cpu() - c)
}

fn files_of(source: &Path) -> Vec<(PathBuf, u64)> {
    let mut files = Vec::new();
    for e in walkdir::WalkDir::new(source) {
        let e = e.expect("walk the source");
        if e.file_type().is_file() {
            let rel = e.path().strip_prefix(source).expect("under the source");
            files.push((rel.to_path_buf(), e.metadata().expect("stat").len()));
        }
    }
    files
}

const WRITE: usize = 1 << 20;

/// Writes `files` from `data` under `to` on `threads` threads; wall and CPU.
fn write_files(
    files: &[(PathBuf, u64)],
    data: &[u8],
    to: &Path,
    threads: usize,
) -> (Duration, Duration) {
    // Directories first (a restore makes them as it goes; they are few).
    let (t, c) = (Instant::now(), cpu());
    fs::create_dir_all(to).expect("make the target");
    let mut dirs: Vec<&Path> = files.iter().filter_map(|(p, _)| p.parent()).collect();
    dirs.sort();
    dirs.dedup();
    for d in dirs {
        fs::create_dir_all(to.join(d)).expect("make a directory");
    }
    let (dirs_wall, dirs_cpu) = (t.elapsed(), cpu() - c);
    let (wall, used) = parallel(threads, files.len(), |i| {
        let (path, len) = &files[i];
        let mut f = fs::File::create_new(to.join(path)).expect("create a file");
        let mut left = *len as usize;
        while left > 0 {
            // In writes of 1 MiB, about a chunk as extract writes them: larger writes were
            // measured up to 8x slower in the kernel on this machine (2.6 s of system time
            // for 1 GiB in writes of 4 MiB against 0.3 s in writes of 1 MiB).
            let n = left.min(WRITE);
            f.write_all(&data[..n]).expect("write");
            left -= n;
        }
    });
    (dirs_wall + wall, dirs_cpu + used)
}

/// Writes `len` bytes from `data` into a pipe of 1 MiB that another thread reads and drops,
/// in writes of 1 MiB; wall and CPU of both ends.
fn pipe(len: usize, data: &[u8]) -> (Duration, Duration) {
    use std::io::Read;
    let (rx, tx) = nix::unistd::pipe().expect("a pipe");
    // As large as export-tar makes a pipe on its stdout.
    let _ = nix::fcntl::fcntl(&tx, nix::fcntl::FcntlArg::F_SETPIPE_SZ(1 << 20));
    let (mut rx, mut tx) = (fs::File::from(rx), fs::File::from(tx));
    let (t, c) = (Instant::now(), cpu());
    std::thread::scope(|s| {
        s.spawn(move || {
            let mut buf = vec![0u8; 1 << 20];
            while rx.read(&mut buf).expect("read the pipe") > 0 {}
        });
        let mut left = len;
        while left > 0 {
            let n = left.min(1 << 20);
            tx.write_all(&data[..n]).expect("write the pipe");
            left -= n;
        }
        drop(tx);
    });
    (t.elapsed(), cpu() - c)
}

/// Every pack read into memory, on `threads` threads; wall and CPU.
fn read_packs(
    repo_dir: &Path,
    packs: &[PackId],
    threads: usize,
) -> (Vec<Vec<u8>>, (Duration, Duration)) {
    let read: Vec<std::sync::Mutex<Vec<u8>>> = packs.iter().map(|_| Default::default()).collect();
    let took = parallel(threads, packs.len(), |i| {
        let path = repo_dir.join(packs[i].object_name());
        *read[i].lock().expect("lock") = fs::read(path).unwrap_or_default();
    });
    let read = read
        .into_iter()
        .map(|m| m.into_inner().expect("lock"))
        .collect();
    (read, took)
}

/// Every chunk opened from the packs in memory, on `threads` threads: the bytes they hold,
/// wall and CPU.
fn decode_all(
    repo: &Repository,
    chunks: &[(ChunkId, PackId, StoredLoc)],
    packs: &[PackId],
    read: &[Vec<u8>],
    threads: usize,
) -> (usize, (Duration, Duration)) {
    let number: std::collections::HashMap<PackId, usize> =
        packs.iter().enumerate().map(|(i, p)| (*p, i)).collect();
    let decoded = AtomicUsize::new(0);
    let took = parallel(threads, chunks.len(), |i| {
        let (id, pack, loc) = &chunks[i];
        let bytes = &read[number[pack]];
        let blob = &bytes[loc.offset as usize..(loc.offset + loc.len) as usize];
        let plain = repo
            .open_chunk(id, blob, "pack")
            .expect("a chunk that opens");
        decoded.fetch_add(plain.len(), Ordering::Relaxed);
    });
    (decoded.into_inner(), took)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() < 4 {
        eprintln!("usage: restore_limit REPO SOURCE WORK [THREADS]");
        std::process::exit(2);
    }
    let (repo_dir, source, work) = (
        Path::new(&args[1]),
        Path::new(&args[2]),
        Path::new(&args[3]),
    );
    let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
    let threads = args.get(4).map_or(cores, |t| t.parse().expect("THREADS"));
    let store = Arc::new(LocalStore::new(repo_dir));
    let pass = std::env::var("CAIRN_PASSPHRASE").unwrap_or_default();
    let repo = Repository::open(store, || Ok(pass.into_bytes())).expect("open the repository");
    let (index, _) = repo.load_index_for_reading().expect("load the index");

    let packs: Vec<PackId> = index.packs().to_vec();
    let (read, (read_wall, read_cpu)) = read_packs(repo_dir, &packs, cores);
    let chunks: Vec<_> = index.iter_stored().collect();
    let (decoded, (decode_wall, decode_cpu)) = decode_all(&repo, &chunks, &packs, &read, threads);

    // Write the source's files from memory (noise: what the file system stores is the same
    // whatever the bytes, and nothing is left for it to skip).
    let files = files_of(source);
    let data: Vec<u8> = (0..(4u32 << 20))
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8)
        .collect();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    // Each from a clean page cache: what the earlier phases left dirty written back first.
    rustix::fs::sync();
    let one = write_files(&files, &data, &work.join(format!("limit-1-{stamp}")), 1);
    rustix::fs::sync();
    let many = write_files(
        &files,
        &data,
        &work.join(format!("limit-n-{stamp}")),
        threads,
    );
    let (write_wall, write_cpu) = if one.0 <= many.0 { one } else { many };
    // The same bytes into a pipe, read by another thread (as `cat` reads export-tar's).
    let (pipe_wall, pipe_cpu) = pipe(decoded, &data);
    let s = |d: Duration| d.as_secs_f64();
    println!(
        "cores {cores} packs {} chunks {} decoded_bytes {} files {}",
        packs.len(),
        chunks.len(),
        decoded,
        files.len()
    );
    println!("read {:.3} read_cpu {:.3}", s(read_wall), s(read_cpu));
    println!(
        "decode {:.3} decode_cpu {:.3}",
        s(decode_wall),
        s(decode_cpu)
    );
    println!("pipe {:.3} pipe_cpu {:.3}", s(pipe_wall), s(pipe_cpu));
    println!(
        "write {:.3} write_cpu {:.3} write_1 {:.3} write_{threads} {:.3}",
        s(write_wall),
        s(write_cpu),
        s(one.0),
        s(many.0)
    );
}
