//! The chunk index at scale, without backing up terabytes: builds a repository's index of N
//! chunks through the library (fragments of 100,000 entries, as a backup's checkpoints write
//! them, in packs of 48 chunks), then opens it and measures
//!   - the heap the loaded index holds, per chunk, and the peak while loading, per chunk;
//!   - the time to load it (list, read, authenticate, decode and merge every fragment);
//!   - lookups per second of chunks it has, and of chunks it does not have.
//!
//! The repository is opened in a child process, which reports its resident memory before and
//! after loading and its peak (`VmHWM`), with glibc told to give large blocks back to the
//! system when they are freed, so that what a freed buffer held is not counted.
//!
//!   cargo run --release --example index_scale -- [N...]     (default: 1000000 5000000 10000000)
//!
//! Prints one line per N: `N loaded_bytes_per_chunk peak_bytes_per_chunk open_s hits_per_s
//! misses_per_s`. The fragments are written under a temporary directory (about 50 bytes per
//! chunk) and removed afterwards.

use std::sync::Arc;
use std::time::Instant;

use cairn::crypto::{EncryptionMode, Padding};
use cairn::index::persist;
use cairn::index::{fragment::IndexFragment, StoredLoc};
use cairn::repo::{InitOptions, Repository};
use cairn::store::local::LocalStore;
use cairn::util::id::{ChunkId, PackId};
use rand::{Rng, SeedableRng};

const PER_FRAGMENT: usize = 100_000;
const PER_PACK: usize = 48;
const SAMPLE: usize = 1_000_000;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if let [flag, dir, n] = args.as_slice() {
        if flag == "--open" {
            return open(std::path::Path::new(dir), n.parse()?);
        }
    }
    let sizes: Vec<usize> = args
        .iter()
        .map(|a| a.replace('_', "").parse())
        .collect::<Result<_, _>>()?;
    let sizes = if sizes.is_empty() {
        vec![1_000_000, 5_000_000, 10_000_000]
    } else {
        sizes
    };
    for n in sizes {
        let dir =
            tempfile::tempdir_in(std::env::var_os("TMPDIR").unwrap_or_else(|| "/var/tmp".into()))?;
        build(dir.path(), n)?;
        let out = std::process::Command::new(std::env::current_exe()?)
            .arg("--open")
            .arg(dir.path())
            .arg(n.to_string())
            .env("MALLOC_MMAP_THRESHOLD_", "65536")
            .env("MALLOC_TRIM_THRESHOLD_", "65536")
            .output()?;
        if !out.status.success() {
            return Err(String::from_utf8_lossy(&out.stderr).into_owned().into());
        }
        print!("{}", String::from_utf8_lossy(&out.stdout));
    }
    Ok(())
}

fn store_at(dir: &std::path::Path) -> Arc<dyn cairn::store::Store> {
    Arc::new(LocalStore::new(dir.join("repo")))
}

/// The ids of the chunks: the same sequence in both processes.
struct Ids(rand::rngs::StdRng);

impl Ids {
    fn new(n: usize) -> Self {
        Self(rand::rngs::StdRng::seed_from_u64(n as u64))
    }

    fn next(&mut self) -> ChunkId {
        ChunkId(self.0.random())
    }
}

/// A repository whose index has `n` chunks, in fragments of 100,000 entries.
fn build(dir: &std::path::Path, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    std::fs::create_dir_all(dir.join("repo"))?;
    let store = store_at(dir);
    let opts = InitOptions {
        encryption: EncryptionMode::None,
        padding: Padding::None,
        ..InitOptions::default()
    };
    let repo = Repository::init(store.clone(), &opts, || Ok(Vec::new()))?;
    let mut ids = Ids::new(n);
    let mut packs = rand::rngs::StdRng::seed_from_u64(!(n as u64));
    let mut written = 0;
    while written < n {
        let count = PER_FRAGMENT.min(n - written);
        let mut entries = Vec::with_capacity(count);
        let mut pack = PackId(packs.random());
        for i in 0..count {
            if i % PER_PACK == 0 {
                pack = PackId(packs.random());
            }
            let loc = StoredLoc {
                pack: 0,
                offset: (i % PER_PACK) as u32 * 1_050_000,
                len: 1_050_000,
                plain_len: 1_048_576,
            };
            entries.push((ids.next(), pack, loc));
        }
        persist::save_fragment(
            &*store,
            repo.crypto(),
            &IndexFragment::from_entries(entries),
        )?;
        written += count;
    }
    Ok(())
}

/// Resident and peak resident memory of this process, in bytes.
fn memory() -> (u64, u64) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    (field("VmRSS:"), field("VmHWM:"))
}

/// Opens the repository, loads its index, and measures.
fn open(dir: &std::path::Path, n: usize) -> Result<(), Box<dyn std::error::Error>> {
    let mut ids = Ids::new(n);
    let step = (n / SAMPLE).max(1);
    let hits: Vec<ChunkId> = (0..n).map(|_| ids.next()).step_by(step).collect();
    let mut other = rand::rngs::StdRng::seed_from_u64(7);
    let misses: Vec<ChunkId> = (0..hits.len()).map(|_| ChunkId(other.random())).collect();

    let (before, _) = memory();
    let t = Instant::now();
    let repo = Repository::open(store_at(dir), || Ok(Vec::new()))?;
    let (index, _) = repo.load_index()?;
    let open = t.elapsed().as_secs_f64();
    let (after, peak) = memory();
    assert_eq!(index.len(), n, "the index lost entries");

    let rate = |ids: &[ChunkId], want: bool| {
        let t = Instant::now();
        let found = ids.iter().filter(|id| index.contains(id)).count();
        assert_eq!(found, if want { ids.len() } else { 0 });
        ids.len() as f64 / t.elapsed().as_secs_f64()
    };
    let (hit_rate, miss_rate) = (rate(&hits, true), rate(&misses, false));
    println!(
        "{n} {:.1} {:.1} {open:.2} {hit_rate:.0} {miss_rate:.0}",
        after.saturating_sub(before) as f64 / n as f64,
        peak.saturating_sub(before) as f64 / n as f64
    );
    Ok(())
}
