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
