//! The sizes a host may see: every whole object's length is rounded up to a point of a
//! geometric grid whose offset is secret (derived from the repository key).
//!
//! Two grids, both `r^(k + φ)` for integers `k`:
//!
//! - **Sessions** (`r` = 1.03): the packs a write session stores between two barriers add up
//!   to a grid point; the last one holds the filler. 3% of a session is the most it costs
//!   (1.5% on average), and a total no closer to another than 3% can share its bucket.
//! - **Objects** (`r` = 2): index fragments, archives and retirement records. Their sizes count
//!   entries (changed files, chunks, packs); a factor of 2 keeps a count within a factor of 2
//!   and costs 44% of objects that are small beside the data.
//!
//! Below the grids, floors: a session is at least 64 KiB and an object at least 4 KiB, so
//! that small ones (a backup of a few changed files, an archive with a few metadata chunks)
//! all look alike.
//!
//! The offsets `φ` are drawn from the encryption key, so two repositories put the same total
//! into unrelated buckets, while one repository pads the same total to the same size every
//! time (repeating a backup teaches the host nothing a single one did not). A host that learns
//! `φ` from the sizes it sees still learns only the bucket: `(r^(k−1+φ), r^(k+φ)]`.

use hkdf::Hkdf;
use sha2::Sha256;

/// Ratio of the sessions' grid.
pub const SESSION_RATIO: f64 = 1.03;
/// Ratio of the objects' grid.
pub const OBJECT_RATIO: f64 = 2.0;
/// The least a session's packs add up to: a backup that changed a few small files shows the
/// host 64 KiB, whatever it changed.
pub const SESSION_FLOOR: u64 = 64 << 10;
/// The least a metadata object is padded to: one archive entry or index entry more cannot
/// move an object this small into another bucket.
pub const OBJECT_FLOOR: u64 = 4 << 10;

/// A repository's two grids.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Buckets {
    session: f64,
    object: f64,
}

impl Buckets {
    /// The grids of the repository with this encryption key.
    pub fn from_key(enc_key: &[u8; 32]) -> Self {
        let hk = Hkdf::<Sha256>::new(None, enc_key);
        let mut okm = [0u8; 16];
        hk.expand(b"cairn size buckets v3", &mut okm)
            .expect("16 bytes is a valid HKDF-SHA256 output length");
        let unit = |b: &[u8]| {
            let v = u64::from_le_bytes(b.try_into().expect("8 bytes"));
            (v >> 11) as f64 / (1u64 << 53) as f64
        };
        Self {
            session: unit(&okm[..8]),
            object: unit(&okm[8..]),
        }
    }

    /// The total a session of `len` bytes is padded to.
    pub fn session(&self, len: u64) -> u64 {
        grid(len, SESSION_RATIO, self.session).max(SESSION_FLOOR)
    }

    /// The length a metadata object of `len` bytes is padded to.
    pub fn object(&self, len: u64) -> u64 {
        grid(len, OBJECT_RATIO, self.object).max(OBJECT_FLOOR)
    }
}

/// The smallest point `⌈ratio^(k + offset)⌉` of the grid that is at least `len`.
pub fn grid(len: u64, ratio: f64, offset: f64) -> u64 {
    if len <= 1 {
        return len;
    }
    let x = (len as f64).ln() / ratio.ln();
    let mut k = (x - offset).ceil();
    // Floating point may land one point off either way: step to the smallest point ≥ len.
    let point = |k: f64| ratio.powf(k + offset).ceil() as u64;
    while point(k - 1.0) >= len {
        k -= 1.0;
    }
    while point(k) < len {
        k += 1.0;
    }
    point(k)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_point_is_never_shorter_and_at_most_one_ratio_longer() {
        for offset in [0.0, 0.25, 0.5, 0.999_999] {
            for len in (2u64..5000).chain([1 << 20, 1 << 30, (1 << 30) + 7, 50_000_123]) {
                for ratio in [SESSION_RATIO, OBJECT_RATIO] {
                    let p = grid(len, ratio, offset);
                    assert!(p >= len, "{len} {ratio} {offset}");
                    assert!(
                        (p as f64) <= (len as f64) * ratio + 1.0,
                        "{len} → {p} ({ratio}, {offset})"
                    );
                    // A point is its own padding: padding twice changes nothing.
                    assert_eq!(grid(p, ratio, offset), p);
                }
            }
        }
    }

    #[test]
    fn lengths_of_one_bucket_pad_alike_and_offsets_come_from_the_key() {
        let b = Buckets::from_key(&[7; 32]);
        assert_eq!(b.object(100), OBJECT_FLOOR);
        assert_eq!(b.session(100), SESSION_FLOOR);
        let p = b.object(10_000);
        assert_eq!(
            b.object(p / 2 + 1),
            p,
            "the whole bucket (p/2, p] pads to p"
        );
        assert!(b.object(p + 1) > p);
        assert_eq!(b, Buckets::from_key(&[7; 32]));
        assert_ne!(b, Buckets::from_key(&[8; 32]));
        // Across keys the same total lands anywhere in its ratio.
        let padded: Vec<u64> = (0..64u8)
            .map(|i| Buckets::from_key(&[i; 32]).session(1_000_000))
            .collect();
        let (lo, hi) = (padded.iter().min().unwrap(), padded.iter().max().unwrap());
        assert!(*lo < 1_005_000 && *hi > 1_025_000, "{lo}..{hi}");
    }
}
