//! Ctrl-C and SIGTERM: the first one asks the running command to stop at the next safe point
//! (it then commits nothing and exits 128+signal); a second one ends the process at once.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};

use crate::error::{Error, Result};
use crate::repo::lock::LockHealth;

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

    /// Installs the handlers.
    pub fn install() -> Result<Self> {
        let me = Self::default();
        for sig in [SIGINT, SIGTERM, SIGHUP] {
            let seen = Arc::new(AtomicBool::new(false));
            let reg = || -> std::io::Result<()> {
                // Order matters: the shutdown check runs before the flag is set, so only a
                // second signal exits immediately.
                signal_hook::flag::register_conditional_shutdown(
                    sig,
                    128 + sig,
                    Arc::clone(&seen),
                )?;
                signal_hook::flag::register(sig, Arc::clone(&seen))?;
                signal_hook::flag::register_usize(sig, Arc::clone(&me.signal), sig as usize)?;
                Ok(())
            };
            reg().map_err(|e| Error::invalid(format!("cannot install signal handlers: {e}")))?;
        }
        Ok(me)
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
