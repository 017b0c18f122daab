//! The sealing workers of `create`: each chunk the reader hands over gets its keyed id, and,
//! unless the repository has it, is compressed and encrypted into a blob; the reader's units
//! carry the answers to the main thread in order.

use crossbeam_channel::{Receiver, Sender};

use crate::error::Result;
use crate::format::item::ChunkRef;
use crate::index::KnownChunks;
use crate::util::id::ChunkId;
use crate::util::parallel::Budget;

/// A chunk after the workers: its id, and its sealed blob (with the blob's CRC-32 from right
/// after encryption) unless the repository had it.
pub struct Sealed {
    pub id: ChunkId,
    pub len: u32,
    pub blob: Option<Vec<u8>>,
    pub crc: u32,
    /// Bytes of the byte budget this chunk still holds: the sealed blob's, at most the
    /// plaintext's that the reader acquired (the worker released the rest once it had
    /// dropped the plaintext). The consumer releases them.
    pub held: u32,
}

/// Work for a sealing worker.
pub struct Job {
    pub data: Vec<u8>,
    pub reply: Sender<Result<Sealed>>,
}

/// A chunk as its sealing worker left it.
pub fn sealed(rx: Receiver<Result<Sealed>>) -> Result<Sealed> {
    rx.recv()
        .map_err(|_| crate::error::Error::internal("a sealing worker stopped"))?
}

/// A sealing worker: keyed id, then compress and encrypt unless the repository has the chunk.
/// The budget counts what is really held: the plaintext until it is sealed, then the sealed
/// blob (for compressible data about half), so that more chunks are in flight within the same
/// bytes; a known chunk, which keeps nothing, gives back all of its bytes at once.
pub fn seal_worker(
    crypto: &crate::crypto::Crypto,
    known: &KnownChunks,
    jobs: Receiver<Job>,
    codec: crate::format::compress::Codec,
    budget: &Budget,
) {
    for job in jobs {
        let result = seal_job(crypto, known, &job.data, codec);
        let plain = job.data.len() as u32;
        drop(job.data);
        let held = match &result {
            Ok(sealed) => sealed.held,
            // The backup stops at this error; the consumer releases all of it.
            Err(_) => plain,
        };
        budget.release((plain - held) as usize);
        let _ = job.reply.send(result);
    }
}

/// One chunk's id and, unless the repository has it, its sealed blob.
fn seal_job(
    crypto: &crate::crypto::Crypto,
    known: &KnownChunks,
    data: &[u8],
    codec: crate::format::compress::Codec,
) -> Result<Sealed> {
    let id = crypto.id_of(data);
    let len = data.len() as u32;
    if known.contains_key(&id) {
        return Ok(Sealed {
            id,
            len,
            blob: None,
            crc: 0,
            held: 0,
        });
    }
    let mut blob = Vec::new();
    let kind = crate::format::blob::BlobKind::Chunk;
    let crc = crate::format::blob::seal_into(crypto, kind, &id.0, data, codec, &mut blob)?;
    #[cfg(feature = "testing")]
    corrupt_for_test(&mut blob);
    // Sealing reserved (and zeroed) room for the worst case, about the plaintext's size: give
    // the rest back, so that the blob's bytes are what it holds and what the budget counts.
    blob.shrink_to_fit();
    let held = (blob.len() as u32).min(len);
    Ok(Sealed {
        id,
        len,
        blob: Some(blob),
        crc,
        held,
    })
}

/// `CAIRN_TEST_CORRUPT_AFTER_SEAL=1` (test builds only, the `testing` feature): flip one bit of the first blob after it
/// was sealed and its CRC taken, as faulty memory would; the pack writer must refuse to store
/// it.
/// The variable is read once per process, not once per blob.
#[cfg(feature = "testing")]
fn corrupt_for_test(blob: &mut [u8]) {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::OnceLock;
    static ASKED: OnceLock<bool> = OnceLock::new();
    static DONE: AtomicBool = AtomicBool::new(false);
    let asked = *ASKED
        .get_or_init(|| std::env::var("CAIRN_TEST_CORRUPT_AFTER_SEAL").is_ok_and(|v| v == "1"));
    if asked && blob.len() > 100 && !DONE.swap(true, Ordering::SeqCst) {
        blob[blob.len() / 2] ^= 0x01;
    }
}

/// The chunk refs of a sealed sequence.
pub fn chunk_ref(s: &Sealed) -> ChunkRef {
    ChunkRef {
        id: s.id,
        len: s.len,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::crypto::{Crypto, EncryptionMode, MasterKey, Padding};
    use crate::format::compress::Codec;
    use crate::index::table::KnownTable;
    use crate::index::StoredLoc;
    use crate::util::parallel::oneshot;

    /// The budget holds what is really held: once a worker has sealed a chunk, only the sealed
    /// blob's bytes stay charged (fewer for compressible data, never more than the plaintext
    /// acquired), and a chunk the repository has gives all of its bytes back.
    #[test]
    fn a_sealed_chunk_holds_only_its_blob_in_the_budget() {
        let crypto = Crypto::new(
            EncryptionMode::Repokey,
            &MasterKey::generate(),
            Padding::None,
        );
        let compressible = vec![7u8; 200_000];
        let mut x = 1u64;
        let random: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let old = b"a chunk the repository has".repeat(1000);
        let loc = StoredLoc {
            pack: 0,
            offset: 0,
            len: 10,
            plain_len: old.len() as u32,
        };
        let known: KnownChunks =
            std::sync::Arc::new(KnownTable::from_sorted(vec![(crypto.id_of(&old), loc)]));
        let budget = Budget::new(1 << 30);
        let (jobs_tx, jobs_rx) = crossbeam_channel::unbounded();
        let mut replies = Vec::new();
        for data in [&compressible, &random, &old] {
            assert!(budget.acquire(data.len()));
            let (reply, rx) = oneshot();
            jobs_tx
                .send(Job {
                    data: data.clone(),
                    reply,
                })
                .unwrap();
            replies.push(rx);
        }
        drop(jobs_tx);
        seal_worker(&crypto, &known, jobs_rx, Codec::Lz4, &budget);
        let sealed: Vec<Sealed> = replies.into_iter().map(|rx| sealed(rx).unwrap()).collect();
        let blob_len = |s: &Sealed| s.blob.as_ref().map_or(0, Vec::len) as u32;
        assert!(sealed[0].held < 10_000, "{}", sealed[0].held);
        assert_eq!(sealed[0].held, blob_len(&sealed[0]));
        assert_eq!(
            sealed[1].held, sealed[1].len,
            "never more than the plaintext"
        );
        assert!(blob_len(&sealed[1]) > sealed[1].len);
        assert_eq!((sealed[2].held, blob_len(&sealed[2])), (0, 0));
        let held: u32 = sealed.iter().map(|s| s.held).sum();
        assert_eq!(budget.in_flight(), held as usize);
        for s in &sealed {
            budget.release(s.held as usize);
        }
        assert_eq!(budget.in_flight(), 0);
    }
}
