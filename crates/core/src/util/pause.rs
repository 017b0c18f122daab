//! Pause points for tests (the `testing` feature; in the cairn that ships they compile to
//! nothing): `CAIRN_TEST_PAUSE_AT=POINT` stops the process (SIGSTOP, to the calling thread,
//! which takes the stop before it runs another line) the first time it reaches `POINT`, so
//! that a test can act as another local user would between two steps that no store operation
//! separates, then let it go on with SIGCONT. The store's fault rules
//! ([`crate::store::faulty`]) pause between store operations; these pause between file system
//! steps of a restore.

/// Stops here once if `CAIRN_TEST_PAUSE_AT` names `point`.
#[cfg(feature = "testing")]
pub fn point(point: &str) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    static WANTED: OnceLock<Option<String>> = OnceLock::new();
    static DONE: AtomicBool = AtomicBool::new(false);
    let wanted = WANTED.get_or_init(|| std::env::var("CAIRN_TEST_PAUSE_AT").ok());
    if wanted.as_deref() == Some(point) && !DONE.swap(true, Ordering::SeqCst) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}

/// Stops here once if `CAIRN_TEST_PAUSE_AT` names `point` (test builds only).
#[cfg(not(feature = "testing"))]
#[inline(always)]
pub fn point(_point: &str) {}
