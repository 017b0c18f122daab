//! Large byte buffers handed back and used again instead of freed: a command that reads many
//! ranges of packs and decodes them one after another (`export-tar`, `dump`) otherwise had the
//! kernel map and zero fresh pages for every buffer, which was a fifth of its time (glibc gives
//! memory of that size back to the kernel when it is freed). Safe code has no say over the
//! allocator; it can keep the buffers.

use std::sync::Mutex;

/// Buffers kept at most: the reads and decoded runs a command has in flight at once.
const KEEP: usize = 6;
/// A larger buffer is freed when handed back, not kept.
const MAX_KEPT: usize = 40 << 20;

/// A few buffers kept for the next user.
pub struct Recycler {
    free: Mutex<Vec<Vec<u8>>>,
}

/// The buffers of pack reads.
pub static READS: Recycler = Recycler::new();
/// The buffers of the plaintext decoded from them.
pub static PLAIN: Recycler = Recycler::new();

impl Recycler {
    pub const fn new() -> Self {
        Self {
            free: Mutex::new(Vec::new()),
        }
    }

    /// A buffer handed back earlier (its contents are stale; its length is what it was), or
    /// a new empty one: the smallest that holds `len` bytes, or else the largest (which then
    /// grows).
    pub fn take(&self, len: usize) -> Vec<u8> {
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        let fits = (0..free.len())
            .filter(|&i| free[i].capacity() >= len)
            .min_by_key(|&i| free[i].capacity());
        let pick = fits.or_else(|| (0..free.len()).max_by_key(|&i| free[i].capacity()));
        pick.map(|i| free.swap_remove(i)).unwrap_or_default()
    }

    /// Hands `buf` back for the next [`take`](Self::take); kept only while fewer than
    /// [`KEEP`] are, and if it is not larger than [`MAX_KEPT`].
    pub fn give(&self, buf: Vec<u8>) {
        if buf.capacity() == 0 || buf.capacity() > MAX_KEPT {
            return;
        }
        let mut free = self.free.lock().unwrap_or_else(|p| p.into_inner());
        if free.len() < KEEP {
            free.push(buf);
        }
    }
}

impl Default for Recycler {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_within_the_bounds() {
        let r = Recycler::new();
        assert_eq!(r.take(10).capacity(), 0, "nothing kept yet");
        let b = vec![7u8; 1000];
        let at = b.as_ptr();
        r.give(b);
        let again = r.take(10);
        let same = (again.as_ptr(), again.len());
        assert_eq!(same, (at, 1000), "the same memory, as it was");
        // The smallest that holds what is asked, else the largest.
        for n in [100, 5000, 2000] {
            r.give(Vec::with_capacity(n));
        }
        assert_eq!(r.take(1500).capacity(), 2000);
        assert_eq!(r.take(9000).capacity(), 5000);
        assert_eq!(r.take(1).capacity(), 100);
        // Empty and oversized buffers are not kept; no more than KEEP are.
        r.give(Vec::new());
        r.give(Vec::with_capacity(MAX_KEPT + 1));
        assert_eq!(r.take(0).capacity(), 0);
        for _ in 0..KEEP + 3 {
            r.give(vec![1; 10]);
        }
        let kept = std::iter::from_fn(|| Some(r.take(0)))
            .take_while(|b| b.capacity() > 0)
            .count();
        assert_eq!(kept, KEEP);
    }
}
