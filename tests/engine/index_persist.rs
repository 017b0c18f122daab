//! Chunk index persistence: checkpoints, merging fragments, rebuilding from packs.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use cairn::crypto::EncryptionMode;
use cairn::index::persist;
use cairn::pack::writer::{PackOptions, Trace};
use cairn::repo::lock::LockKind;
use cairn::repo::session::{CheckpointPolicy, Commit, WriteSession};
use cairn::repo::{InitOptions, Repository};
use cairn::store::mem::MemStore;
use cairn::store::Store;
use cairn::util::id::ChunkId;
use common::random_bytes;

const PACK: usize = 4000;

fn repo(mem: &Arc<MemStore>) -> Repository {
    std::env::set_var("CAIRN_TEST_CHEAP_KDF", "1");
    let mut r = Repository::init(
        mem.clone(),
        &InitOptions {
            encryption: EncryptionMode::Repokey,
            pack_size: PACK,
            padding: cairn::crypto::Padding::None,
            chunking: None,
            ..Default::default()
        },
        || Ok(b"pw".to_vec()),
    )
    .unwrap();
    r.lock(LockKind::Exclusive, "test", Duration::ZERO).unwrap();
    r
}

/// Runs `work` in a write session with small packs, checkpointing every `every_packs` packs.
fn session<'r, T: 'r>(
    repo: &'r Repository,
    every_packs: u64,
    work: impl FnOnce(&mut WriteSession<'r>) -> cairn::error::Result<Commit<'r, 'r, T>>,
) -> cairn::error::Result<T> {
    let (index, _, _) = repo.load_index_for_writing().unwrap();
    repo.write_with(
        index,
        PackOptions {
            target_size: PACK,
            async_store: true,
            max_in_flight: 1,
            max_buffers: None,
            paced: false,
            trace: Trace::Off,
        },
        CheckpointPolicy {
            every_packs,
            every: Duration::from_secs(3600),
        },
        work,
    )
}

fn upload(repo: &Repository, seeds: std::ops::Range<u64>, every_packs: u64) -> Vec<ChunkId> {
    session(repo, every_packs, |up| {
        let ids = seeds
            .map(|s| up.store_chunk(&random_bytes(s, 1500)).unwrap())
            .collect();
        Ok(Commit::chunks().map(|_| ids))
    })
    .unwrap()
}

#[test]
fn checkpoints_write_fragments_during_long_work() {
    let mem = Arc::new(MemStore::new());
    let repo = repo(&mem);
    session(&repo, 2, |up| {
        for s in 0..40 {
            up.store_chunk(&random_bytes(s, 1500)).unwrap();
        }
        // Before the end, fragments already exist, and each names only stored packs.
        let mid = mem.list("index").unwrap();
        assert!(
            mid.len() >= 3,
            "periodic checkpoints wrote {} fragments",
            mid.len()
        );
        let (loaded, report) = persist::load(&*mem, repo.crypto()).unwrap();
        assert!(report.damaged_fragments.is_empty());
        for (_, pack, _) in loaded.iter_stored() {
            mem.info(&pack.object_name())
                .expect("fragment names a stored pack");
        }
        assert!(up.stats().checkpoints >= 3);
        Ok(Commit::chunks())
    })
    .unwrap();
    let (all, _) = persist::load(&*mem, repo.crypto()).unwrap();
    assert_eq!(all.len(), 40);
}

#[test]
fn fragments_merge_and_dedup_across_sessions() {
    let mem = Arc::new(MemStore::new());
    let repo = repo(&mem);
    let a = upload(&repo, 0..10, 100);
    let b = upload(&repo, 5..15, 100);
    let (index, report) = persist::load(&*mem, repo.crypto()).unwrap();
    assert_eq!(report.fragments.len(), 2);
    assert_eq!(index.len(), 15);
    for id in a.iter().chain(&b) {
        repo.read_chunk(&index, id).unwrap();
    }
}

#[test]
fn missing_index_is_rebuilt_from_packs() {
    let mem = Arc::new(MemStore::new());
    let repo = repo(&mem);
    let ids = upload(&repo, 0..12, 100);
    for f in mem.list("index").unwrap() {
        mem.delete(&f.name).unwrap();
    }
    let (index, load, rec) = repo.load_index_for_writing().unwrap();
    assert!(load.fragments.is_empty());
    assert!(!rec.adopted_packs.is_empty());
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            repo.read_chunk(&index, id).unwrap(),
            random_bytes(i as u64, 1500)
        );
    }
    // The next write session persists the rebuilt entries.
    upload(&repo, 100..101, 100);
    let (index, _) = persist::load(&*mem, repo.crypto()).unwrap();
    assert_eq!(index.len(), 13);
}

#[test]
fn corrupt_fragment_is_skipped_and_its_packs_readopted() {
    let mem = Arc::new(MemStore::new());
    let repo = repo(&mem);
    let ids = upload(&repo, 0..12, 100);
    let frag = mem.list("index").unwrap().remove(0).name;
    mem.tamper(&frag, |b| b[30] ^= 1);
    let (index, load, rec) = repo.load_index_for_writing().unwrap();
    assert_eq!(load.damaged_fragments.len(), 1);
    assert_eq!(load.damaged_fragments[0].name, frag);
    assert!(!rec.adopted_packs.is_empty());
    for id in &ids {
        repo.read_chunk(&index, id).unwrap();
    }
}

#[test]
fn entries_of_missing_packs_are_dropped_before_writing() {
    let mem = Arc::new(MemStore::new());
    let repo = repo(&mem);
    let ids = upload(&repo, 0..12, 100);
    let pack = mem.list("packs").unwrap().remove(0).name;
    mem.delete(&pack).unwrap();
    let (index, _, rec) = repo.load_index_for_writing().unwrap();
    assert_eq!(rec.missing_packs.len(), 1);
    assert!(rec.dropped_entries > 0);
    // A new session re-stores the lost chunks instead of deduplicating against them.
    let lost: Vec<_> = ids.iter().filter(|id| !index.contains(id)).collect();
    assert!(!lost.is_empty());
    upload(&repo, 0..12, 100);
    let (index, _, rec) = repo.load_index_for_writing().unwrap();
    assert!(rec.dropped_entries == 0 || rec.missing_packs.len() == 1);
    for (i, id) in ids.iter().enumerate() {
        assert_eq!(
            repo.read_chunk(&index, id).unwrap(),
            random_bytes(i as u64, 1500)
        );
    }
}

#[test]
fn orphan_pack_from_a_crash_is_adopted() {
    let mem = Arc::new(MemStore::new());
    let repo = repo(&mem);
    // A session that stores packs and then dies before its index fragment.
    let (index, _, _) = repo.load_index_for_writing().unwrap();
    let ids: Vec<_> = repo
        .write(index, |up| {
            let ids = (0..10)
                .map(|s| up.store_chunk(&random_bytes(s, 1500)).unwrap())
                .collect();
            Ok(Commit::nothing().map(|_| ids))
        })
        .unwrap();
    assert!(mem.list("index").unwrap().is_empty());
    assert!(!mem.list("packs").unwrap().is_empty());
    let (index, _, rec) = repo.load_index_for_writing().unwrap();
    assert!(!rec.adopted_packs.is_empty());
    let adopted = ids.iter().filter(|id| index.contains(id)).count();
    assert!(adopted > 0);
}

/// A session whose lock was broken (another client took it for abandoned, and a compact may
/// have deleted packs since) writes no more index fragments: its checkpoints verify the lock.
#[test]
fn a_session_whose_lock_was_broken_writes_no_fragment() {
    let mem = Arc::new(MemStore::new());
    let repo = repo(&mem);
    for o in mem.list("locks").unwrap() {
        mem.delete(&o.name).unwrap();
    }
    let stored = session(&repo, 2, |up| {
        for s in 0..40 {
            up.store_chunk(&random_bytes(s, 1500))?;
        }
        Ok(Commit::chunks().map(|_| ()))
    });
    let err = stored.unwrap_err().to_string();
    assert!(err.contains("removed by another process"), "{err}");
    assert!(
        mem.list("index").unwrap().is_empty(),
        "a fragment was written"
    );
}
