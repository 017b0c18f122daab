//! Pause points for tests (the `testing` feature; in the cairn that ships they compile to
//! nothing): `CAIRN_TEST_PAUSE_AT=POINT` stops the process (SIGSTOP, to the calling thread,
//! which takes the stop before it runs another line) the first time it reaches `POINT`, so
//! that a test can act as another local user would between two steps that no store operation
//! separates, then let it go on with SIGCONT. The store's fault rules
//! ([`crate::store::faulty`]) pause between store operations; these pause between file system
//! steps of a restore.

/// Stops here once if `CAIRN_TEST_PAUSE_AT` names `point` (`POINT@N`: the N-th time it is
/// reached, from 1).
#[cfg(feature = "testing")]
pub fn point(point: &str) {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::sync::OnceLock;
    static WANTED: OnceLock<Option<(String, u64)>> = OnceLock::new();
    static REACHED: AtomicU64 = AtomicU64::new(0);
    let wanted = WANTED.get_or_init(|| {
        let v = std::env::var("CAIRN_TEST_PAUSE_AT").ok()?;
        Some(match v.rsplit_once('@') {
            Some((p, n)) => (p.to_string(), n.parse().unwrap_or(1)),
            None => (v, 1),
        })
    });
    if let Some((p, n)) = wanted {
        if p == point && REACHED.fetch_add(1, Ordering::SeqCst) + 1 == *n {
            let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
        }
    }
}

/// Stops here once if `CAIRN_TEST_PAUSE_AT` names `point` (test builds only).
#[cfg(not(feature = "testing"))]
#[inline(always)]
pub fn point(_point: &str) {}
