//! The repositories `cairn ui` shows: the one of each profile under `~/.config/cairn/`, and
//! `-r`. Each is opened once, when the ui starts, with its passphrase (the profile's
//! `passcommand`, `CAIRN_PASSPHRASE`, or a prompt on the terminal that started the ui); a
//! request names one by its number in this list, never by a location.

use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use zeroize::Zeroizing;

use crate::cli::settings::Settings;
use crate::error::{Error, Result};
use crate::repo::lock::LockKind;
use crate::repo::open::lock_to_read;
use crate::repo::Repository;
use crate::store::location::Location;
use crate::ui::tree::Tree;
use crate::util::id::ArchiveId;

/// Trees kept built, per repository: the archives browsed last.
const TREES_KEPT: usize = 3;

/// A repository the ui shows.
pub struct UiRepo {
    /// The profile's name, or the location.
    pub label: String,
    /// As the profile or `-r` gives it.
    pub location: String,
    pub profile: Option<String>,
    /// The profile's file.
    pub profile_path: Option<PathBuf>,
    /// Whether the profile says what to back up (`[create] paths`): "back up now" needs it.
    pub can_back_up: bool,
    /// The passphrase it was opened with, for the work the ui runs on it.
    pub pass: Option<Zeroizing<Vec<u8>>>,
    /// Open, or why not.
    opened: Mutex<std::result::Result<Repository, String>>,
    /// Why it did not open, kept apart: read without waiting for the repository.
    error: Option<String>,
    /// Requests waiting for the repository, or at it.
    waiting: std::sync::atomic::AtomicUsize,
    parsed: Option<Location>,
    trees: Mutex<Vec<(ArchiveId, Arc<Tree>)>>,
    /// How long a request waits for another client's exclusive lock.
    wait: Duration,
}

/// What a repository is, before it is opened.
pub struct Configured {
    pub label: String,
    pub location: String,
    pub profile: Option<String>,
    pub profile_path: Option<PathBuf>,
    pub passcommand: Option<String>,
    pub can_back_up: bool,
    /// Why its profile cannot be used.
    pub error: Option<String>,
}

/// Requests that may wait for one repository; more are refused (a page that asks again and
/// again must not pile up threads that all run later).
const MOST_WAITING: usize = 8;

/// The repositories of the profiles in the profile directory (in name order), then `-r`'s;
/// a profile that does not load, or names no repository, is said and left out.
pub fn configured(repo: Option<&str>) -> Vec<Configured> {
    let mut found = Vec::new();
    if let Some(dir) = profile_dir() {
        let mut names: Vec<PathBuf> = std::fs::read_dir(&dir)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|x| x == "toml"))
            .collect();
        names.sort();
        for path in names {
            let name = path
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default();
            match crate::cli::profile::load(&path) {
                Ok(p) => match p.repository {
                    Some(location) => found.push(Configured {
                        label: name.clone(),
                        location,
                        profile: Some(name),
                        profile_path: Some(std::path::absolute(&path).unwrap_or(path.clone())),
                        passcommand: p.passcommand,
                        can_back_up: !p.paths.is_empty(),
                        error: None,
                    }),
                    None => crate::say!(
                        "note: profile {} names no repository; not shown",
                        path.display()
                    ),
                },
                // Shown with why, on the page too.
                Err(e) => found.push(Configured {
                    label: name.clone(),
                    location: String::new(),
                    profile: Some(name),
                    profile_path: Some(path.clone()),
                    passcommand: None,
                    can_back_up: false,
                    error: Some(e.to_string()),
                }),
            }
        }
    }
    if let Some(location) = repo {
        if !found.iter().any(|c| c.location == location) {
            found.push(Configured {
                label: location.to_string(),
                location: location.to_string(),
                profile: None,
                profile_path: None,
                passcommand: None,
                can_back_up: false,
                error: None,
            });
        }
    }
    found
}

/// The directory profiles are named in (`~/.config/cairn/`).
fn profile_dir() -> Option<PathBuf> {
    crate::cli::profile::path_of("x")
        .ok()
        .and_then(|p| p.parent().map(PathBuf::from))
}

/// The profile's passphrase command for the repository being opened, and the passphrase it
/// was opened with.
type Asked = (Option<String>, Option<Zeroizing<Vec<u8>>>);

thread_local! {
    static ASKED: RefCell<Asked> = const { RefCell::new((None, None)) };
}

/// The passphrase, as the command line would find it, kept for the ui's later work.
fn ask_and_keep(prompt: &str) -> Result<Vec<u8>> {
    let command = ASKED.with(|a| a.borrow().0.clone());
    let p = crate::cli::passphrase::obtain_for(prompt, command.as_deref())?;
    ASKED.with(|a| a.borrow_mut().1 = Some(Zeroizing::new(p.clone())));
    Ok(p)
}

impl UiRepo {
    /// Opens the repository `c` names (asking for its passphrase); one that does not open is
    /// shown with why.
    pub fn open(
        c: Configured,
        settings: &Settings,
        allow_unencrypted: bool,
        wait: Duration,
    ) -> Self {
        ASKED.with(|a| *a.borrow_mut() = (c.passcommand.clone(), None));
        let parsed = match &c.error {
            Some(e) => Err(Error::invalid(e.clone())),
            None => Location::parse(&c.location),
        };
        let opened = parsed
            .as_ref()
            .map_err(|e| e.to_string())
            .and_then(|location| {
                crate::repo::open::open(
                    location,
                    &settings.store,
                    &settings.tuning,
                    allow_unencrypted,
                    ask_and_keep,
                )
                .map_err(|e| e.to_string())
            });
        let pass = ASKED.with(|a| a.borrow_mut().1.take());
        let error = opened.as_ref().err().cloned();
        Self {
            label: c.label,
            location: c.location,
            profile: c.profile,
            profile_path: c.profile_path,
            can_back_up: c.can_back_up,
            pass,
            opened: Mutex::new(opened),
            error,
            waiting: std::sync::atomic::AtomicUsize::new(0),
            parsed: parsed.ok(),
            trees: Mutex::new(Vec::new()),
            wait,
        }
    }

    /// Why it did not open.
    pub fn error(&self) -> Option<String> {
        self.error.clone()
    }

    /// Runs `f` on the repository under a shared lock (none on a repository this user may
    /// only read), as a command that reads does; one request at a time, a few waiting.
    pub fn read<T>(&self, f: impl FnOnce(&Repository) -> Result<T>) -> Result<T> {
        use std::sync::atomic::Ordering;
        struct Waiting<'a>(&'a std::sync::atomic::AtomicUsize);
        impl Drop for Waiting<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let before = self.waiting.fetch_add(1, Ordering::SeqCst);
        let _waiting = Waiting(&self.waiting);
        if before >= MOST_WAITING {
            return Err(Error::invalid(format!(
                "{} is busy with {before} requests; try again when they are done",
                self.label
            )));
        }
        let mut opened = self.opened.lock().unwrap_or_else(|p| p.into_inner());
        let repo = opened
            .as_mut()
            .map_err(|e| Error::invalid(format!("the repository did not open: {e}")))?;
        let taken = repo.lock(LockKind::Shared, "ui", self.wait);
        match &self.parsed {
            Some(location) => lock_to_read(location, taken)?,
            None => taken?,
        }
        let out = self.same_repository(repo).and_then(|()| f(repo));
        repo.release_lock();
        out
    }

    /// That the repository at the location is still the one opened when the ui started (not
    /// another one made there since, which this key cannot read).
    fn same_repository(&self, repo: &Repository) -> Result<()> {
        use crate::repo::config::{self, Config};
        let bytes = repo
            .store()
            .get_bounded(config::NAME, config::MAX_LEN as u64)
            .map_err(|e| Error::invalid(format!("{}: {e}", self.location)))?;
        if Config::parse(&bytes)?.repo_id()? != repo.id() {
            return Err(Error::invalid(format!(
                "the repository at {} is not the one cairn ui opened when it started (another was made there since): restart cairn ui",
                self.location
            )));
        }
        Ok(())
    }

    /// The tree of archive `id`, built once (a few are kept).
    pub fn tree(
        &self,
        id: ArchiveId,
        build: impl FnOnce(&Repository) -> Result<Tree>,
    ) -> Result<Arc<Tree>> {
        if let Some(t) = self.kept_tree(&id) {
            return Ok(t);
        }
        let tree = Arc::new(self.read(build)?);
        let mut trees = self.trees.lock().unwrap_or_else(|p| p.into_inner());
        trees.retain(|(kept, _)| *kept != id);
        trees.push((id, tree.clone()));
        if trees.len() > TREES_KEPT {
            trees.remove(0);
        }
        Ok(tree)
    }

    fn kept_tree(&self, id: &ArchiveId) -> Option<Arc<Tree>> {
        let trees = self.trees.lock().unwrap_or_else(|p| p.into_inner());
        trees.iter().find(|(k, _)| k == id).map(|(_, t)| t.clone())
    }
}
