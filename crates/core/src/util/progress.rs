//! Progress display on stderr: a live line (indicatif) when stderr is a terminal; when asked
//! for and stderr is a file, a pipe or a journal, plain lines, at most one a second; with
//! `--log-json`, a JSON object at most once a second, with the line's figures as fields
//! ([`Figures`]).

use std::io::Write;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Plain lines for a stderr that is not a terminal: a ticker thread writes the latest
/// message once a second when it changed, so that a command blocked on something (a slow
/// upload) still says what it waits for, and setting a message costs no I/O.
struct Lines {
    state: Arc<(Mutex<LineState>, Condvar)>,
    ticker: Mutex<Option<std::thread::JoinHandle<()>>>,
}

#[derive(Default)]
struct LineState {
    shown: Shown,
    changed: bool,
    stop: bool,
}

/// What a progress update says: the line, and the figures in it (for `--log-json`).
#[derive(Default, Clone)]
pub struct Shown {
    pub message: String,
    pub figures: Figures,
}

impl From<String> for Shown {
    fn from(message: String) -> Self {
        Self {
            message,
            figures: Figures::default(),
        }
    }
}

/// The figures of a progress line, each where the command has it (`docs/json.md`).
#[derive(Default, Clone, serde::Serialize)]
pub struct Figures {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_done: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_done: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub files_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items_done: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub items_total: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_new: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_stored: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_fetched: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_present: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub current: Option<String>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub waiting: bool,
}

impl Shown {
    /// The JSON record of this update, `elapsed` into the command.
    fn record(&self, elapsed: Duration) -> serde_json::Map<String, serde_json::Value> {
        let secs = elapsed.as_secs_f64();
        let mut m = serde_json::Map::new();
        m.insert("type".into(), "progress".into());
        m.insert("elapsed_secs".into(), ((secs * 10.0).round() / 10.0).into());
        m.insert("message".into(), self.message.clone().into());
        if let Ok(serde_json::Value::Object(f)) = serde_json::to_value(&self.figures) {
            m.extend(f);
        }
        let f = &self.figures;
        if let Some(done) = f.bytes_done {
            let rate = if secs > 0.5 { done as f64 / secs } else { 0.0 };
            if rate > 0.0 {
                m.insert("bytes_per_sec".into(), (rate as u64).into());
            }
            if let Some(total) = f.bytes_total.filter(|t| *t > 0) {
                let total = total.max(done);
                m.insert("percent".into(), (done * 100 / total).into());
                if rate > 0.0 {
                    m.insert(
                        "eta_secs".into(),
                        (((total - done) as f64 / rate) as u64).into(),
                    );
                }
            }
        }
        m
    }
}

const LINE_EVERY: Duration = Duration::from_secs(1);

impl Lines {
    /// `json`: records for `--log-json` rather than text lines.
    fn start(json: bool) -> Self {
        let state = Arc::new((Mutex::new(LineState::default()), Condvar::new()));
        let shared = state.clone();
        let started = Instant::now();
        let ticker = std::thread::Builder::new()
            .name("progress".into())
            .spawn(move || loop {
                let (lock, cv) = &*shared;
                let st = lock.lock().unwrap_or_else(|p| p.into_inner());
                let (mut st, _) = cv
                    .wait_timeout_while(st, LINE_EVERY, |s| !s.stop)
                    .unwrap_or_else(|p| p.into_inner());
                if st.changed {
                    st.changed = false;
                    if json {
                        crate::util::log::emit(st.shown.record(started.elapsed()));
                    } else {
                        let elapsed = started.elapsed().as_secs();
                        let line = format!(
                            "[{:02}:{:02}:{:02}] {}\n",
                            elapsed / 3600,
                            elapsed / 60 % 60,
                            elapsed % 60,
                            st.shown.message
                        );
                        // Progress that cannot be written is not worth failing the command
                        // for.
                        let _ = std::io::stderr().lock().write_all(line.as_bytes());
                    }
                }
                if st.stop {
                    return;
                }
            })
            .ok();
        Self {
            state,
            ticker: Mutex::new(ticker),
        }
    }

    fn set(&self, shown: Shown) {
        let mut st = self.state.0.lock().unwrap_or_else(|p| p.into_inner());
        st.shown = shown;
        st.changed = true;
    }

    fn stop(&self) {
        {
            let mut st = self.state.0.lock().unwrap_or_else(|p| p.into_inner());
            st.stop = true;
            // What is left is said by the command itself.
            st.changed = false;
        }
        self.state.1.notify_all();
        let ticker = self.ticker.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(t) = ticker {
            let _ = t.join();
        }
    }
}

pub struct Progress {
    bar: Option<ProgressBar>,
    lines: Option<Lines>,
}

impl Progress {
    /// `force`: Some(true) always, Some(false) never, None when stderr is a terminal.
    pub fn new(force: Option<bool>) -> Self {
        use std::io::IsTerminal;
        let terminal = std::io::stderr().is_terminal();
        let json = crate::util::log::is_json();
        // With --log-json, progress records unless --no-progress.
        if !force.unwrap_or(terminal || json) {
            return Self::hidden();
        }
        if !terminal || json {
            return Self {
                bar: None,
                lines: Some(Lines::start(json)),
            };
        }
        let bar = ProgressBar::with_draw_target(None, ProgressDrawTarget::stderr_with_hz(10));
        bar.set_style(
            ProgressStyle::with_template("{spinner} {elapsed_precise} {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_spinner()),
        );
        bar.enable_steady_tick(Duration::from_millis(200));
        Self {
            bar: Some(bar),
            lines: None,
        }
    }

    pub fn hidden() -> Self {
        Self {
            bar: None,
            lines: None,
        }
    }

    pub fn is_visible(&self) -> bool {
        self.bar.is_some() || self.lines.is_some()
    }

    /// What the progress says now: a line (`String`), or a [`Shown`] with its figures.
    pub fn set<S: Into<Shown>>(&self, msg: impl FnOnce() -> S) {
        if let Some(b) = &self.bar {
            let (_, cols) = console::Term::stderr().size();
            b.set_message(fit(&msg().into().message, usize::from(cols)));
        } else if let Some(l) = &self.lines {
            l.set(msg().into());
        }
    }

    /// Prints a line above the bar (warnings), or plainly when there is no bar.
    pub fn println(&self, line: &str) {
        match &self.bar {
            Some(b) => b.suspend(|| crate::say!("{line}")),
            None => crate::say!("{line}"),
        }
    }

    /// Says a warning about a path, the bar out of the way.
    pub fn warn(&self, w: &crate::util::log::Warning) {
        self.say_about(w, false);
    }

    /// Says a warning (or, with `error`, an error) about a path, the bar out of the way.
    pub fn say_about(&self, w: &crate::util::log::Warning, error: bool) {
        match &self.bar {
            Some(b) => b.suspend(|| w.say(error)),
            None => w.say(error),
        }
    }

    /// Runs `f` (which writes to stdout) with the bar out of the way.
    pub fn suspend<T>(&self, f: impl FnOnce() -> T) -> T {
        match &self.bar {
            Some(b) => b.suspend(f),
            None => f(),
        }
    }

    pub fn finish(&self) {
        if let Some(b) = &self.bar {
            b.finish_and_clear();
        }
        if let Some(l) = &self.lines {
            l.stop();
        }
    }
}

impl Drop for Progress {
    fn drop(&mut self) {
        self.finish();
    }
}

static WARNINGS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// Counts a `warning:` line printed on stderr ([`crate::say`] calls it).
pub fn count_warning() {
    WARNINGS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
}

/// Starts counting again (`cairn ui`, which runs one command after another).
pub fn reset_warnings() {
    WARNINGS.store(0, std::sync::atomic::Ordering::Relaxed);
}

/// The `warning:` lines this process has printed, for a summary that counts what it said.
pub fn warnings_said() -> u64 {
    WARNINGS.load(std::sync::atomic::Ordering::Relaxed)
}

/// Columns the live line takes before the message: the spinner and the elapsed time
/// (`⠁ 00:00:00 `).
const LINE_PREFIX: usize = 11;

/// `msg` cut to what a terminal `cols` wide has room for after the line's prefix (by display
/// width, never inside a character), so that the line never wraps: a wrapped line is not
/// cleared, and each redraw would leave one behind.
fn fit(msg: &str, cols: usize) -> String {
    let room = cols.saturating_sub(LINE_PREFIX + 1).max(8);
    console::truncate_str(msg, room, "…").into_owned()
}

/// A duration for people: `42 s`, `3:07`, `1:02:03`.
pub fn duration(secs: u64) -> String {
    match secs {
        0..=59 => format!("{secs} s"),
        60..=3599 => format!("{}:{:02}", secs / 60, secs % 60),
        _ => format!("{}:{:02}:{:02}", secs / 3600, secs / 60 % 60, secs % 60),
    }
}

/// How far work has got, for a progress line: `37% 1.20 GB of 3.24 GB, 410 MB/s, ETA 0:05`
/// (without a known total: `1.20 GB, 410 MB/s`).
pub fn done_of(done: u64, total: Option<u64>, elapsed: std::time::Duration) -> String {
    let secs = elapsed.as_secs_f64();
    let rate = if secs > 0.5 { done as f64 / secs } else { 0.0 };
    let rate_text = if rate > 0.0 {
        format!(", {}/s", size(rate as u64))
    } else {
        String::new()
    };
    match total {
        Some(total) if total > 0 => {
            let total = total.max(done);
            let pct = done * 100 / total;
            let eta = if rate > 0.0 {
                format!(", ETA {}", duration(((total - done) as f64 / rate) as u64))
            } else {
                String::new()
            };
            format!("{pct}% {} of {}{rate_text}{eta}", size(done), size(total))
        }
        _ => format!("{}{rate_text}", size(done)),
    }
}

/// A count with its noun, singular for one: "1 pack", "3 packs", "0 files".
pub fn count(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        format!("1 {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

/// A size: bytes, or a number with k, M, G or T (powers of 1024; "2.5G", "500k", "1MiB").
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let t = t
        .strip_suffix("iB")
        .or_else(|| t.strip_suffix('B'))
        .unwrap_or(t);
    let (number, unit) = match t.char_indices().last() {
        Some((i, c)) if c.is_ascii_alphabetic() => (&t[..i], Some(c)),
        _ => (t, None),
    };
    let value: f64 = number
        .trim()
        .parse()
        .ok()
        .filter(|v: &f64| v.is_finite() && *v >= 0.0)
        .ok_or_else(|| format!("{s:?} is not a size (a number, then k, M, G or T)"))?;
    let shift = match unit.map(|c| c.to_ascii_lowercase()) {
        None => 0,
        Some('k') => 10,
        Some('m') => 20,
        Some('g') => 30,
        Some('t') => 40,
        Some(_) => return Err(format!("{s:?}: the unit is k, M, G or T")),
    };
    let bytes = value * 2f64.powi(shift);
    if bytes >= u64::MAX as f64 {
        return Err(format!("{s:?} is too large"));
    }
    Ok(bytes.round() as u64)
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
    /// docs/json.md's `progress` table and the record agree: a record with every figure set
    /// has every field the table lists, and nothing it does not.
    #[test]
    fn the_progress_record_has_the_fields_docs_json_lists() {
        let doc = include_str!("../../../../docs/json.md");
        let section = doc
            .split("\n## ")
            .find(|s| s.starts_with("`progress`"))
            .expect("a progress section");
        let mut listed = std::collections::BTreeSet::new();
        for row in section.lines().filter(|l| l.starts_with("| `")) {
            let cell = row.split('|').nth(1).unwrap_or_default();
            for name in cell.split(',') {
                listed.insert(name.trim().trim_matches('`').to_string());
            }
        }
        let f = super::Figures {
            bytes_done: Some(50),
            bytes_total: Some(100),
            files_done: Some(1),
            files_total: Some(2),
            items_done: Some(1),
            items_total: Some(2),
            bytes_new: Some(1),
            bytes_stored: Some(1),
            bytes_fetched: Some(1),
            bytes_present: Some(1),
            current: Some("a".into()),
            waiting: true,
        };
        let shown = super::Shown {
            message: "m".into(),
            figures: f,
        };
        let record = shown.record(std::time::Duration::from_secs(2));
        let said: std::collections::BTreeSet<String> =
            record.keys().filter(|k| *k != "type").cloned().collect();
        assert_eq!(said, listed);
    }

    #[test]
    fn the_live_line_never_wraps() {
        let long = "storing home/alice/".to_string() + &"é".repeat(200);
        for cols in [20u16, 80, 200] {
            let fitted = super::fit(&long, usize::from(cols));
            let width = console::measure_text_width(&fitted);
            assert!(
                width + super::LINE_PREFIX < usize::from(cols),
                "{cols}: {fitted}"
            );
            assert!(fitted.ends_with('…') && long.starts_with(fitted.trim_end_matches('…')));
        }
        assert_eq!(super::fit("short", 80), "short");
    }

    #[test]
    fn sizes() {
        assert_eq!(super::size(0), "0 B");
        assert_eq!(super::size(999), "999 B");
        assert_eq!(super::size(1500), "1.50 kB");
        assert_eq!(super::size(52_000_000), "52.00 MB");
        assert_eq!(super::count(1u64, "pack"), "1 pack");
        assert_eq!(super::count(0u64, "file"), "0 files");
        assert_eq!(super::count(7u32, "warning"), "7 warnings");
        assert_eq!(super::duration(42), "42 s");
        assert_eq!(super::duration(187), "3:07");
        assert_eq!(super::duration(3723), "1:02:03");
        let t = std::time::Duration::from_secs(2);
        assert_eq!(
            super::done_of(1_000_000, Some(4_000_000), t),
            "25% 1.00 MB of 4.00 MB, 500.00 kB/s, ETA 6 s"
        );
        assert_eq!(super::done_of(1_000_000, None, t), "1.00 MB, 500.00 kB/s");
    }
}
