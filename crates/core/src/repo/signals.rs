//! Ctrl-C and SIGTERM: the first one asks the running command to stop at the next safe point
//! (it then commits nothing and exits 128+signal); a second one ends the process at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::{Error, Result};
use crate::repo::lock::LockHealth;

/// The flags the handlers set, registered once.
struct Handlers {
    /// The last signal that arrived (0: none).
    signal: Arc<AtomicUsize>,
    /// Whether one arrived: the next then ends the process.
    seen: Arc<AtomicBool>,
}

static INSTALLED: std::sync::Mutex<Option<Handlers>> = std::sync::Mutex::new(None);

#[derive(Clone, Default)]
pub struct Interrupt {
    signal: Arc<AtomicUsize>,
    /// Set by the lock refresher when our repository lock is lost.
    lock: Option<Arc<LockHealth>>,
}

impl Interrupt {
    /// A flag nothing sets (tests, library use).
    pub fn none() -> Self {
        Self::default()
    }

    /// Installs the handlers (once per process; every command run in it shares them).
    pub fn install() -> Result<Self> {
        let mut installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = installed.as_ref() {
            return Ok(Self {
                signal: h.signal.clone(),
                lock: None,
            });
        }
        let h = Handlers {
            signal: Arc::new(AtomicUsize::new(0)),
            seen: Arc::new(AtomicBool::new(false)),
        };
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            let reg = || -> std::io::Result<()> {
                // Order matters: the shutdown check runs before the flag is set, so only a
                // second signal exits immediately.
                signal_hook::flag::register_conditional_shutdown(
                    sig,
                    128 + sig,
                    Arc::clone(&h.seen),
                )?;
                signal_hook::flag::register(sig, Arc::clone(&h.seen))?;
                signal_hook::flag::register_usize(sig, Arc::clone(&h.signal), sig as usize)?;
                Ok(())
            };
            reg().map_err(|e| Error::invalid(format!("cannot install signal handlers: {e}")))?;
        }
        let me = Self {
            signal: h.signal.clone(),
            lock: None,
        };
        *installed = Some(h);
        Ok(me)
    }

    /// Forgets the signals seen so far: the next command run in this process (`cairn ui`
    /// runs one after another) starts afresh, a first signal asking it to stop and only a
    /// second one ending the process.
    pub fn forget_signals() {
        let installed = INSTALLED.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(h) = installed.as_ref() {
            h.signal.store(0, Ordering::SeqCst);
            h.seen.store(false, Ordering::SeqCst);
        }
    }

    /// Also stop when the repository lock is lost.
    pub fn watch_lock(mut self, health: Arc<LockHealth>) -> Self {
        self.lock = Some(health);
        self
    }

    /// `Err(Interrupted)` once a signal has arrived, `Err(Locked)` once our lock is gone.
    pub fn check(&self) -> Result<()> {
        if let Some(lock) = &self.lock {
            lock.check()?;
        }
        match self.signal.load(Ordering::Relaxed) {
            0 => Ok(()),
            sig => Err(Error::Interrupted(sig as i32)),
        }
    }

    pub fn raised(&self) -> bool {
        self.signal.load(Ordering::Relaxed) != 0
    }
}
