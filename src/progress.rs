//! Progress display on stderr (indicatif), shown when stderr is a terminal or when asked for.

use std::time::Duration;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

pub struct Progress {
    bar: Option<ProgressBar>,
}

impl Progress {
    /// `force`: Some(true) always, Some(false) never, None when stderr is a terminal.
    pub fn new(force: Option<bool>) -> Self {
        use std::io::IsTerminal;
        let show = force.unwrap_or_else(|| std::io::stderr().is_terminal());
        if !show {
            return Self { bar: None };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Self { bar: Some(bar) }
    }

    pub fn hidden() -> Self {
        Self { bar: None }
    }

    pub fn is_visible(&self) -> bool {
        self.bar.is_some()
    }

    pub fn set(&self, msg: impl FnOnce() -> String) {
        if let Some(b) = &self.bar {
            b.set_message(msg());
        }
    }

    /// Prints a line above the bar (warnings), or plainly when there is no bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| eprintln!("{line}")),
            None => eprintln!("{line}"),
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Human-readable byte count (powers of 1000, as `ls -h --si` and borg print).
pub fn size(n: u64) -> String {
    const UNITS: [&str; 6] = ["B", "kB", "MB", "GB", "TB", "PB"];
    let mut v = n as f64;
    let mut u = 0;
    while v >= 1000.0 && u < UNITS.len() - 1 {
        v /= 1000.0;
        u += 1;
    }
    if u == 0 {
        format!("{n} B")
    } else {
        format!("{v:.2} {}", UNITS[u])
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn sizes() {
        assert_eq!(super::size(0), "0 B");
        assert_eq!(super::size(999), "999 B");
        assert_eq!(super::size(1500), "1.50 kB");
        assert_eq!(super::size(52_000_000), "52.00 MB");
    }
}
