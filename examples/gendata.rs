//! Benchmark data generator.
//!
//! ```text
//! gendata files DIR COUNT SIZE [SEED]   COUNT files of SIZE bytes in DIR (spread over subdirs)
//! gendata mixed FILE SIZE [SEED]        one file
//! gendata tree DIR COUNT SIZE SHAPE [SEED]
//!     COUNT files of SIZE bytes in DIR, shaped: `flat` puts 100,000 files in each directory
//!     (d000/f00000000), `deep` 100 files in each leaf of a tree six directories deep with ten
//!     subdirectories to a level (0/0/0/1/2/3/f00012345)
//! ```
//! Contents are unique pseudo-random bytes interleaved 1:1 with zeros in 4 KiB runs (the
//! seed's data: about 2:1 compressible with lz4, no deduplication between files).
//! SIZE takes K, M, G suffixes (powers of 1024).

use std::fs;
use std::io::Write;
use std::path::Path;

fn parse_size(s: &str) -> u64 {
    let (num, mul) = match s.chars().last() {
        Some('K') => (&s[..s.len() - 1], 1u64 << 10),
        Some('M') => (&s[..s.len() - 1], 1 << 20),
        Some('G') => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    num.parse::<u64>().expect("size") * mul
}

struct Rng(u64);

impl Rng {
    fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            // wyrand
            self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
            let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
            let v = ((t >> 64) as u64) ^ (t as u64);
            chunk.copy_from_slice(&v.to_le_bytes()[..chunk.len()]);
        }
    }
}

/// `size` bytes: 4 KiB random, 4 KiB zeros, repeated.
fn contents(rng: &mut Rng, size: usize) -> Vec<u8> {
    let mut v = vec![0u8; size];
    for (i, block) in v.chunks_mut(4096).enumerate() {
        if i % 2 == 0 {
            rng.fill(block);
        }
    }
    // Small files: half random, half zeros within the file.
    if size < 8192 {
        rng.fill(&mut v[..size / 2]);
        v[size / 2..].fill(0);
    }
    v
}

fn write_file(path: &Path, rng: &mut Rng, size: u64) {
    let mut f = fs::File::create(path).expect("create");
    let mut left = size;
    while left > 0 {
        let n = left.min(16 << 20) as usize;
        f.write_all(&contents(rng, n)).expect("write");
        left -= n as u64;
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let seed = |i: usize| {
        args.get(i)
            .map(|s| s.parse::<u64>().expect("seed"))
            .unwrap_or(1)
    };
    match args.get(1).map(String::as_str) {
        Some("files") if args.len() >= 5 => {
            let dir = Path::new(&args[2]);
            let count: u64 = args[3].parse().expect("count");
            let size = parse_size(&args[4]);
            let mut rng = Rng(seed(5));
            for i in 0..count {
                let sub = dir.join(format!("d{:03}", i / 1000));
                if i % 1000 == 0 {
                    fs::create_dir_all(&sub).expect("mkdir");
                }
                write_file(&sub.join(format!("f{i:07}")), &mut rng, size);
            }
        }
        Some("tree") if args.len() >= 6 => {
            let dir = Path::new(&args[2]);
            let count: u64 = args[3].parse().expect("count");
            let size = parse_size(&args[4]);
            let shape = args[5].as_str();
            let per_dir = match shape {
                "flat" => 100_000,
                "deep" => 100,
                _ => panic!("shape: flat or deep"),
            };
            let mut rng = Rng(seed(6));
            let mut sub = dir.to_path_buf();
            for i in 0..count {
                if i % per_dir == 0 {
                    let leaf = i / per_dir;
                    sub = if shape == "flat" {
                        dir.join(format!("d{leaf:03}"))
                    } else {
                        let digits = format!("{leaf:06}");
                        digits
                            .chars()
                            .fold(dir.to_path_buf(), |p, c| p.join(c.to_string()))
                    };
                    fs::create_dir_all(&sub).expect("mkdir");
                }
                write_file(&sub.join(format!("f{i:08}")), &mut rng, size);
            }
        }
        Some("mixed") if args.len() >= 4 => {
            let mut rng = Rng(seed(4));
            write_file(Path::new(&args[2]), &mut rng, parse_size(&args[3]));
        }
        _ => {
            eprintln!(
                "usage: gendata files DIR COUNT SIZE [SEED] | gendata mixed FILE SIZE [SEED] | \
                 gendata tree DIR COUNT SIZE flat|deep [SEED]"
            );
            std::process::exit(2);
        }
    }
}
