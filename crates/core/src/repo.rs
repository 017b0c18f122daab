//! A repository: its store, config and keys, opened or created.

pub mod archives;
pub mod cache_dir;
mod chunks;
pub mod config;
pub mod foreign;
pub mod keys;
pub mod known;
pub mod lock;
pub mod maintenance;
pub mod open;
pub mod reconcile;
pub mod removed;
pub mod retire;
pub mod session;
pub mod signals;
pub mod unusable;

use std::sync::Arc;

use crate::chunker::{Chunker, ChunkerParams};
use crate::crypto::kdf::{KdfBudget, KdfParams};
use crate::crypto::keyfile::{KeyFile, MAX_KEY_FILE_LEN};
use crate::crypto::{Crypto, EncryptionMode, MasterKey, Padding, Suite};
use crate::error::{Error, Result};
use crate::index::persist::{self, LoadReport};
use crate::index::ChunkIndex;
use crate::pack::writer::{PackOptions, PackTuning, DEFAULT_PACK_SIZE};
use crate::repo::lock::{Lock, LockHealth, LockKind, LockTiming};
use crate::store::{ObjectInfo, Store, StoreError};
use crate::util::id::sha256;
use crate::util::id::ArchiveId;
use config::Config;
use reconcile::{Adopt, ReconcileReport};
use session::{CheckpointPolicy, Commit, WriteSession};
use zeroize::Zeroizing;

pub struct InitOptions {
    pub encryption: EncryptionMode,
    /// The cipher suite of an encrypted repository (an unencrypted one has the first's ids).
    pub suite: Suite,
    pub pack_size: usize,
    pub padding: Padding,
    /// Chunk like another repository (`init --copy-chunker-params-from`), so that archives
    /// copied from it deduplicate with its later backups.
    pub chunking: Option<Chunking>,
}

/// How a repository cuts files into chunks: the parameters and the key of the gear table.
pub struct Chunking {
    pub params: ChunkerParams,
    pub key: Zeroizing<[u8; 32]>,
}

impl Default for InitOptions {
    fn default() -> Self {
        Self {
            encryption: EncryptionMode::Repokey,
            suite: Suite::fastest_here(),
            pack_size: DEFAULT_PACK_SIZE,
            // Measured at 1.2% more space on 1 GiB and 2.5% on 20,000 small files, and no
            // time (docs/benchmarks.md, "Padding"), for lengths the host can no longer read
            // exactly.
            padding: Padding::Buckets,
            chunking: None,
        }
    }
}

/// A passphrase for a new key file: wiped when dropped, and never empty (an empty passphrase
/// protects nothing, yet the repository would say it is encrypted).
fn new_passphrase(pass: Vec<u8>) -> Result<Zeroizing<Vec<u8>>> {
    let pass = Zeroizing::new(pass);
    if pass.is_empty() {
        return Err(Error::Passphrase(
            "the passphrase is empty; an encrypted repository needs one that protects it \
             (or use --encryption none, for tests)"
                .into(),
        ));
    }
    Ok(pass)
}

/// Key files a repository may hold (`key add`): each one a passphrase is checked against
/// costs a key derivation, and an open spends at most 8 defaults' worth.
pub const MAX_KEYS: usize = 8;

pub struct Repository {
    store: Arc<dyn Store>,
    config: Config,
    repo_id: [u8; 32],
    crypto: Arc<Crypto>,
    /// The lock this process holds; every commit verifies it.
    lock: Option<Lock>,
    tuning: Tuning,
    /// The key file the passphrase opened (encrypted repositories opened, not made).
    key_name: Option<String>,
    location: Option<String>,
}

pub use cache_dir::lock_memory;

/// A repository being opened: its config read, its key not yet unlocked
/// ([`Repository::begin_open`]).
pub struct Opening {
    store: Arc<dyn Store>,
    config: Config,
    repo_id: [u8; 32],
    mode: EncryptionMode,
    /// The key files (none when unencrypted).
    keys: Vec<ObjectInfo>,
}

impl Opening {
    pub fn id_hex(&self) -> String {
        hex::encode(self.repo_id)
    }

    /// Asks for the passphrase, if the repository is encrypted.
    pub fn passphrase(
        &self,
        ask: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Option<Zeroizing<Vec<u8>>>> {
        Ok(match self.mode {
            EncryptionMode::Repokey => Some(Zeroizing::new(ask()?)),
            EncryptionMode::None => None,
        })
    }

    /// Unlocks the key with the passphrase ([`passphrase`](Self::passphrase)'s), and checks
    /// the config against the copy the key authenticates.
    pub fn unlock(self, pass: Option<Zeroizing<Vec<u8>>>) -> Result<Repository> {
        let Opening {
            store,
            config,
            repo_id,
            mode,
            keys,
        } = self;
        let mut key_name = None;
        let key = match (mode, pass) {
            (EncryptionMode::None, _) => MasterKey::for_unencrypted(&repo_id),
            (EncryptionMode::Repokey, None) => {
                return Err(Error::internal(
                    "an encrypted repository opened without a passphrase",
                ))
            }
            (EncryptionMode::Repokey, Some(pass)) => {
                let (key, name, authentic) =
                    Repository::unlock_with(&*store, &repo_id, keys, &pass)?;
                key_name = Some(name);
                let differences = config.differences(&authentic);
                if !differences.is_empty() {
                    return Err(Error::corrupt(
                        config::NAME,
                        format!(
                            "it does not match the copy the key authenticates ({}); refusing to \
                             use it: someone with access to the storage may have changed it",
                            differences.join("; ")
                        ),
                    ));
                }
                key
            }
        };
        let crypto = Crypto::of_suite(mode, config.suite()?, &key, config.padding()?);
        Ok(Repository::with_key(
            store, config, repo_id, crypto, key_name,
        ))
    }
}

/// What the command line tunes of a repository's work (from `CAIRN_*`; the defaults without).
#[derive(Clone, Default)]
pub struct Tuning {
    pub pack: PackTuning,
    pub checkpoint: CheckpointPolicy,
    pub lock: LockTiming,
}

impl Repository {
    /// Creates a repository in an empty store. The key is written before the config, so a
    /// store with a config always has its key.
    pub fn init(
        store: Arc<dyn Store>,
        opts: &InitOptions,
        passphrase: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Self> {
        if !store.list("")?.is_empty() {
            return Err(Error::invalid(
                "the repository location is not empty; cairn init needs an empty or new directory",
            ));
        }
        if opts.chunking.is_some() && opts.encryption == EncryptionMode::None {
            return Err(Error::invalid(
                "an unencrypted repository's chunker key is derived from its own id, so it cannot \
                 chunk like another repository; use --encryption repokey",
            ));
        }
        let repo_id: [u8; 32] = rand::random();
        let suite = match opts.encryption {
            EncryptionMode::Repokey => opts.suite,
            EncryptionMode::None => Suite::Aes256Gcm,
        };
        let mut config = Config::new(
            repo_id,
            opts.encryption,
            suite,
            opts.pack_size as u64,
            opts.padding,
        );
        if let Some(c) = &opts.chunking {
            c.params.validate()?;
            config.chunker.params = c.params;
        }
        let config_bytes = config.to_bytes();
        let key = match opts.encryption {
            EncryptionMode::Repokey => {
                let pass = new_passphrase(passphrase()?)?;
                let mut key = MasterKey::generate();
                if let Some(c) = &opts.chunking {
                    key.chunker_key = *c.key;
                }
                let kf = KeyFile::wrap(
                    &key,
                    &config_bytes,
                    &repo_id,
                    &pass,
                    KdfParams::new_default(),
                )?;
                let bytes = kf.to_bytes();
                store.put(&format!("keys/{}", hex::encode(sha256(&bytes))), &bytes)?;
                key
            }
            EncryptionMode::None => MasterKey::for_unencrypted(&repo_id),
        };
        crate::store::reserve::create(&*store)?;
        store.put(config::NAME, &config_bytes)?;
        let crypto = Crypto::of_suite(opts.encryption, suite, &key, opts.padding);
        Ok(Self::with_key(store, config, repo_id, crypto, None))
    }

    /// A repository opened (or made) with its key: no lock held yet, default tuning.
    fn with_key(
        store: Arc<dyn Store>,
        config: Config,
        repo_id: [u8; 32],
        crypto: Crypto,
        key_name: Option<String>,
    ) -> Self {
        Self {
            store,
            repo_id,
            config,
            crypto: Arc::new(crypto),
            lock: None,
            tuning: Tuning::default(),
            key_name,
            location: None,
        }
    }

    /// Opens a repository; `passphrase` is asked only when the repository is encrypted.
    pub fn open(
        store: Arc<dyn Store>,
        passphrase: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<Self> {
        let opening = Self::begin_open(store)?;
        let pass = opening.passphrase(passphrase)?;
        opening.unlock(pass)
    }

    /// The first steps of [`open`](Self::open): the config and the names of the key files.
    /// What is left (the passphrase, and the key derivation that takes a fifth of a second of
    /// one core) is [`Opening`]'s, so that a caller can talk to the store meanwhile.
    pub fn begin_open(store: Arc<dyn Store>) -> Result<Opening> {
        let bytes = match store.get_bounded(config::NAME, config::MAX_LEN as u64) {
            Ok(b) => b,
            Err(e) if e.is_not_found() => {
                return Err(Error::invalid(
                    "not a cairn repository (it has no config object)",
                ))
            }
            Err(e) => return Err(e.into()),
        };
        let config = Config::parse(&bytes)?;
        let repo_id = config.repo_id()?;
        let mode = config.mode()?;
        let keys = store.list("keys")?;
        match mode {
            EncryptionMode::None if !keys.is_empty() => {
                return Err(Error::corrupt(
                    config::NAME,
                    "it says the repository is unencrypted, but the repository has a key: \
                     refusing (the config may have been tampered with to make cairn store \
                     plaintext)",
                ))
            }
            EncryptionMode::Repokey if keys.is_empty() => {
                return Err(Error::corrupt("keys", "the repository has no key file"))
            }
            _ => {}
        }
        Ok(Opening {
            store,
            config,
            repo_id,
            mode,
            keys,
        })
    }

    /// Finds the key file the passphrase opens; returns the key, the key file's name and the
    /// authenticated copy of the config it holds.
    fn unlock(
        store: &dyn Store,
        repo_id: &[u8; 32],
        passphrase: impl FnOnce() -> Result<Vec<u8>>,
    ) -> Result<(MasterKey, String, Config)> {
        let keys = store.list("keys")?;
        if keys.is_empty() {
            return Err(Error::corrupt("keys", "the repository has no key file"));
        }
        let pass = Zeroizing::new(passphrase()?);
        Self::unlock_with(store, repo_id, keys, &pass)
    }

    /// Tries the passphrase on the key files `keys`, in turn.
    fn unlock_with(
        store: &dyn Store,
        repo_id: &[u8; 32],
        keys: Vec<ObjectInfo>,
        pass: &[u8],
    ) -> Result<(MasterKey, String, Config)> {
        let mut last = None;
        // Every key file is read and parsed first (each a small bounded read); then they are
        // tried cheapest key derivation first. A repository has at most MAX_KEYS key files
        // (one more briefly during a passphrase change); a hostile store that plants a key
        // file of the largest allowed cost, named to sort first, no longer spends the whole
        // budget before the real key is tried, and what was left untried is said.
        let mut candidates = Vec::new();
        for k in keys.into_iter().take(4 * MAX_KEYS) {
            let bytes = match store.get_bounded(&k.name, MAX_KEY_FILE_LEN as u64) {
                Ok(b) => b,
                Err(e @ StoreError::TooLarge { .. }) => {
                    last.get_or_insert(Error::corrupt(&k.name, e.to_string()));
                    continue;
                }
                Err(e) if e.is_not_found() => continue,
                Err(e) => return Err(e.into()),
            };
            match KeyFile::parse(&bytes, &k.name).and_then(|kf| {
                kf.kdf.validate()?;
                Ok(kf)
            }) {
                Ok(kf) => candidates.push((k.name, kf)),
                Err(e) => {
                    last.get_or_insert(e);
                }
            }
        }
        candidates.sort_by_key(|(name, kf)| (kf.kdf.work(), name.clone()));
        let mut budget = KdfBudget::default();
        let mut untried = 0;
        for (name, kf) in candidates {
            if untried > 0 || budget.spend(&kf.kdf).is_err() {
                untried += 1;
                continue;
            }
            let attempt = kf.unwrap_key(repo_id, pass).and_then(|(key, config)| {
                let config = Config::parse(&config).map_err(|e| {
                    Error::corrupt(&name, format!("the config it holds is invalid: {e}"))
                })?;
                Ok((key, config))
            });
            match attempt {
                Ok((key, config)) => return Ok((key, name, config)),
                Err(Error::WrongPassphrase) => last = Some(Error::WrongPassphrase),
                Err(e) => {
                    if last.is_none() {
                        last = Some(e)
                    }
                }
            }
        }
        if untried > 0 {
            return Err(Error::Passphrase(format!(
                "the passphrase opened none of the key files tried, and {} not tried: their key derivation would exceed {} × the default's work in all (a repository has one key file, two during a passphrase change; see cairn key list)",
                if untried == 1 {
                    "1 key file was".to_string()
                } else {
                    format!("{untried} key files were")
                },
                crate::crypto::kdf::MAX_FACTOR
            )));
        }
        Err(last.unwrap_or(Error::WrongPassphrase))
    }

    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    pub fn config(&self) -> &Config {
        &self.config
    }

    pub fn id(&self) -> [u8; 32] {
        self.repo_id
    }

    pub fn id_hex(&self) -> String {
        hex::encode(self.repo_id)
    }

    pub fn crypto(&self) -> &Crypto {
        &self.crypto
    }

    /// The crypto state, shared (pack store threads seal tables of contents with it).
    pub fn crypto_arc(&self) -> Arc<Crypto> {
        Arc::clone(&self.crypto)
    }

    /// The file-data chunker, keyed with the repository's chunker key.
    pub fn data_chunker(&self) -> Result<Chunker> {
        Chunker::new(self.config.chunker.params, self.crypto.chunker_key())
    }

    /// How this repository chunks files (for `init --copy-chunker-params-from`).
    pub fn chunking(&self) -> Chunking {
        Chunking {
            params: self.config.chunker.params,
            key: Zeroizing::new(*self.crypto.chunker_key()),
        }
    }

    /// The metadata (item stream) chunker.
    pub fn metadata_chunker(&self) -> Result<Chunker> {
        Chunker::new(ChunkerParams::METADATA, self.crypto.chunker_key())
    }

    /// Sets what the command line tunes (pack writing, checkpoints, lock timing).
    pub fn set_tuning(&mut self, tuning: Tuning) {
        self.tuning = tuning;
    }

    /// Pack options: the config's pack size, unless tuned.
    pub fn pack_options(&self) -> PackOptions {
        self.tuning
            .pack
            .options(self.config.pack_size as usize, self.store.is_remote())
    }

    /// The lock protocol's timing.
    pub fn lock_timing(&self) -> LockTiming {
        self.tuning.lock
    }

    /// When write sessions persist the index.
    pub fn checkpoint_policy(&self) -> CheckpointPolicy {
        self.tuning.checkpoint
    }

    /// Loads the index from its fragments.
    pub fn load_index(&self) -> Result<(ChunkIndex, LoadReport)> {
        persist::load(&*self.store, &self.crypto)
    }

    /// Loads the index for a reader. Entries whose pack is gone fall back on another
    /// fragment's location of the same chunk; if a fragment is damaged, the packs it covered
    /// are indexed from their tables of contents (in memory), so that their chunks can still
    /// be read. Returns notes for the user.
    pub fn load_index_for_reading(&self) -> Result<(ChunkIndex, Vec<String>)> {
        let (mut index, load) = self.load_index()?;
        let mut notes = Vec::new();
        // Retired packs still hold chunks an archive may need (one committed by a client
        // that another judged gone, before that archive's chunks were indexed again): they
        // are read from their tables of contents.
        let retired = self.retired()?;
        if !retired.is_empty() {
            reconcile::adopt_retired(&*self.store, &self.crypto, &mut index, &retired.all())?;
        }
        let damaged = !load.damaged_fragments.is_empty();
        // Only a damaged fragment, or a chunk placed twice (whose first pack may be gone),
        // needs the list of packs: the common read stays one listing of the index.
        if !damaged && load.alternates.is_empty() {
            return Ok((index, notes));
        }
        for d in &load.damaged_fragments {
            notes.push(format!(
                "skipping damaged index fragment {} ({})",
                d.name, d.reason
            ));
        }
        let rec = reconcile::reconcile(
            &*self.store,
            &self.crypto,
            &mut index,
            &load.alternates,
            damaged.then_some(Adopt::Toc),
            &std::collections::HashSet::new(),
        )?;
        if damaged {
            notes.push(format!(
                "indexed {} from their tables of contents instead; run cairn check --repair",
                crate::util::progress::count(rec.adopted_packs.len() as u64, "pack")
            ));
        }
        Ok((index, notes))
    }

    /// Loads the index and reconciles it with the packs that exist: what a writer needs, so
    /// that it never deduplicates against a chunk that is gone, or in a pack that is retired
    /// (being deleted, or waiting to be: `repo/retire.rs`).
    /// Objects remembered as unusable packs (`repo/unusable.rs`) are not read again; new ones
    /// are reported in the [`ReconcileReport`] once, and remembered.
    pub fn load_index_for_writing(&self) -> Result<(ChunkIndex, LoadReport, ReconcileReport)> {
        let (mut index, load) = self.load_index()?;
        let mut unusable = unusable::Unusable::open(&self.id_hex());
        let mut skip = self.retired()?.all();
        skip.extend(unusable.packs());
        let rec = self.reconcile_for_writing(&mut index, &load, &skip)?;
        if !rec.damaged_packs.is_empty() || unusable.packs().next().is_some() {
            let existing = persist::list_packs(&*self.store)?;
            unusable.remember(rec.damaged_packs.iter().map(|d| d.name.as_str()), |p| {
                existing.contains_key(p)
            });
        }
        Ok((index, load, rec))
    }

    /// Reconciles a loaded index as a writer needs it: unindexed packs adopted after being
    /// read whole, `retired` packs left out.
    fn reconcile_for_writing(
        &self,
        index: &mut ChunkIndex,
        load: &LoadReport,
        retired: &std::collections::HashSet<crate::util::id::PackId>,
    ) -> Result<ReconcileReport> {
        reconcile::reconcile(
            &*self.store,
            &self.crypto,
            index,
            &load.alternates,
            Some(Adopt::Verified),
            retired,
        )
    }

    /// Loads the index for a command that deletes packs: every pack's chunks, retired ones
    /// included (a retired pack may hold the only copy of a chunk an archive committed since
    /// needs: it is copied out, or the pack kept), unindexed ones adopted after reading them
    /// whole.
    pub fn load_index_for_maintenance(
        &self,
        retired: &retire::Retired,
    ) -> Result<(ChunkIndex, LoadReport, ReconcileReport)> {
        let (mut index, load) = self.load_index()?;
        let all = retired.all();
        let in_retired: Vec<_> = index
            .iter_stored()
            .filter(|(_, p, _)| all.contains(p))
            .collect();
        let rec = self.reconcile_for_writing(&mut index, &load, &all)?;
        // Reconciling left retired packs out; their chunks go back in, after everything
        // else (a chunk that is also elsewhere keeps the other place), where the pack exists.
        let existing = persist::list_packs(&*self.store)?;
        for (id, pack, loc) in in_retired {
            let end = u64::from(loc.offset) + u64::from(loc.len);
            if existing.get(&pack).is_some_and(|size| *size >= end) {
                index.insert_stored(id, pack, loc.offset, loc.len, loc.plain_len, true);
            }
        }
        reconcile::adopt_retired(&*self.store, &self.crypto, &mut index, &all)?;
        Ok((index, load, rec))
    }

    /// The records of retired packs.
    pub fn retired(&self) -> Result<retire::Retired> {
        retire::Retired::load(&*self.store, &self.crypto)
    }

    /// Right after a commit: whether the held lock is still exactly ours (see
    /// [`Lock::confirm`]).
    pub fn confirm_lock(&self) -> Result<crate::repo::lock::Confirmed> {
        Ok(self.held_lock()?.confirm())
    }

    /// Takes the repository lock (see [`crate::repo::lock`]). What this client sees of others'
    /// locks is remembered in the cache, so that it can judge them abandoned by its own clock.
    pub fn lock(&mut self, kind: LockKind, command: &str, wait: std::time::Duration) -> Result<()> {
        self.lock = None;
        self.lock = Some(Lock::acquire(
            self.store.clone(),
            kind,
            command,
            wait,
            lock_memory(&self.id_hex()),
            self.tuning.lock,
            &crate::repo::lock::KEEP_WAITING,
            crate::repo::lock::SealSlot::with(crate::repo::lock::LockSeal::of(self.crypto())),
        )?);
        Ok(())
    }

    /// Holds `lock`, taken on this repository's store while it was being opened.
    pub fn hold_lock(&mut self, lock: Lock) {
        self.lock = Some(lock);
    }

    /// The held lock's object name, if a lock is held.
    pub fn lock_name(&self) -> Option<String> {
        self.lock.as_ref().map(Lock::name)
    }

    /// The held lock's health, for long work to poll.
    pub fn lock_health(&self) -> Option<Arc<LockHealth>> {
        self.lock.as_ref().map(Lock::health)
    }

    /// `Err` once the held lock is lost (or when none is held).
    pub fn lock_ok(&self) -> Result<()> {
        self.held_lock()?.check()
    }

    fn held_lock(&self) -> Result<&Lock> {
        self.lock
            .as_ref()
            .ok_or_else(|| Error::internal("writing to a repository without holding its lock"))
    }

    /// The held lock, if it is of kind `need` or stronger (no I/O).
    pub fn require_lock(&self, need: LockKind) -> Result<&Lock> {
        let lock = self.held_lock()?;
        if need == LockKind::Exclusive && lock.kind() != LockKind::Exclusive {
            return Err(Error::internal(
                "this change needs an exclusive repository lock",
            ));
        }
        Ok(lock)
    }

    /// Right before a commit: the lock is held, of kind `need` or stronger, and still ours
    /// (read back and refreshed now).
    pub fn verify_lock(&self, need: LockKind) -> Result<()> {
        self.require_lock(need)?.verify()
    }

    /// Deletes one archive (delete, prune, a relabel's second step); needs the exclusive
    /// lock, read back from the store first: an archive is never removed once the lock is
    /// known lost (a command paused while another client judged its lock abandoned would
    /// otherwise remove what that client decided to keep). A pause between that read and the
    /// removal is found by [`Self::confirm_removals`] afterwards.
    pub fn delete_archive(&self, id: &ArchiveId) -> Result<()> {
        self.require_lock(LockKind::Exclusive)?.verify()?;
        match self.store.delete(&id.object_name()) {
            Ok(()) => Ok(()),
            Err(e) if e.is_not_found() => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// Sets an archive aside as an append-only server sets aside what its clients delete: a
    /// removal record (`repo::removed`), the archive hidden and kept until `undelete` or
    /// `compact --removed-older-than`. What the owner's prune does to archives written
    /// through an append-only server: a client that was taken over can write archives that
    /// push real ones out of the keep rules, and this leaves the owner a way back. The same
    /// lock rules as [`Self::delete_archive`].
    pub fn set_archive_aside(&self, id: &ArchiveId) -> Result<()> {
        self.require_lock(LockKind::Exclusive)?.verify()?;
        let record = crate::repo::removed::record_now();
        match self
            .store
            .create_new(&crate::repo::removed::removal_name(id), &record)
        {
            Ok(()) => Ok(()),
            Err(StoreError::Exists { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    /// After archives were removed: the lock must still be ours (read back from the store).
    /// If it was lost, another client may have acted meanwhile on what it saw before the
    /// last removal: the command fails (exit 2) saying what it removed.
    pub fn confirm_removals(&self, removed: &[String]) -> Result<()> {
        if removed.is_empty() {
            return Ok(());
        }
        match self.confirm_lock()? {
            crate::repo::lock::Confirmed::Held => Ok(()),
            crate::repo::lock::Confirmed::Lost(reason) => Err(Error::Locked(format!(
                "{reason}; this command removed {} before it knew ({}), the last perhaps after another client took over: run cairn list to see what the repository holds",
                crate::util::progress::count(removed.len() as u64, "archive"),
                removed.join(", ")
            ))),
        }
    }

    /// Runs `work` in a write session over `index`, the only way to write packs, fragments
    /// and archives (see [`session`]), and ends the session as `work`'s [`Commit`] says; if
    /// `work` fails, the session is stopped ([`WriteSession::stop`]'s rules) and the failure
    /// returned.
    pub fn write<'r, 'c, T: 'c>(
        &'r self,
        index: ChunkIndex,
        work: impl FnOnce(&mut WriteSession<'r>) -> Result<Commit<'r, 'c, T>>,
    ) -> Result<T> {
        self.write_with(index, self.pack_options(), self.tuning.checkpoint, work)
    }

    /// [`Repository::write`] with explicit pack options and checkpoint policy.
    pub fn write_with<'r, 'c, T: 'c>(
        &'r self,
        index: ChunkIndex,
        opts: PackOptions,
        policy: CheckpointPolicy,
        work: impl FnOnce(&mut WriteSession<'r>) -> Result<Commit<'r, 'c, T>>,
    ) -> Result<T> {
        self.held_lock()?;
        session::run(WriteSession::new(self, index, opts, policy), work)
    }
}
