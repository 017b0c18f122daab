//! The writer's trace (`CAIRN_PACK_TRACE`): per pack `<` (store started), `H` (finishing the
//! hash), `S` (storing), `>` (finished), so that a run with one pack in flight reads
//! `<HS><HS><HS>`; timed, the caller's side too (`B`, `W`/`w`, `F`/`f`), and remarks between
//! events (`[in flight: 3]`). To stderr, or captured in a string for tests.

use std::io::Write;
use std::sync::{Arc, Mutex};

/// Where trace events go.
#[derive(Clone, Default)]
pub enum Trace {
    #[default]
    Off,
    Stderr,
    /// Each event followed by the seconds since the command started (`CAIRN_PACK_TRACE=time`,
    /// for benchmarks: `<0.480 H0.480 S0.541 >0.762 `).
    StderrTimed(std::time::Instant),
    /// Appended to a shared string (tests).
    Capture(Arc<Mutex<String>>),
    /// The same, with the caller's side too (tests that wait until the caller is waiting).
    CaptureTimed(Arc<Mutex<String>>),
}

impl Trace {
    pub fn event(&self, c: char) {
        match self {
            Trace::Off => {}
            Trace::Stderr => {
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "{c}");
                let _ = e.flush();
            }
            Trace::StderrTimed(t0) => {
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "{c}{:.3} ", t0.elapsed().as_secs_f64());
                let _ = e.flush();
            }
            Trace::Capture(s) | Trace::CaptureTimed(s) => {
                s.lock().unwrap_or_else(|p| p.into_inner()).push(c)
            }
        }
    }

    /// An event only the timed trace shows (the caller's side, for benchmarks): `B` the
    /// writer was made, `W`/`w` the caller began/stopped waiting for a store, `F`/`f` a
    /// barrier began/ended.
    pub fn timed(&self, c: char) {
        if let Trace::StderrTimed(_) | Trace::CaptureTimed(_) = self {
            self.event(c);
        }
    }

    /// A remark between events: `[in flight: 3]`.
    pub fn note(&self, text: &str) {
        match self {
            Trace::Off => {}
            Trace::Stderr | Trace::StderrTimed(_) => {
                let mut e = std::io::stderr().lock();
                let _ = write!(e, "[{text}]");
                let _ = e.flush();
            }
            Trace::Capture(s) | Trace::CaptureTimed(s) => s
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push_str(&format!("[{text}]")),
        }
    }
}
