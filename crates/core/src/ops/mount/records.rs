//! An archive's item stream read at any byte offset: the record there, fetched from the
//! chunks that hold it, with the last few chunks kept decrypted (a directory's records lie
//! together, so loading one reads its chunks once).

use std::sync::{Arc, Mutex};

use crate::error::{Error, Result};
use crate::format::item::{ChunkRef, Item, ItemReader};

/// Reads one chunk of the stream (decrypted, decompressed).
pub type Fetch = Box<dyn Fn(&ChunkRef) -> Result<Vec<u8>> + Send + Sync>;

/// Chunks kept decrypted.
const RECENT: usize = 8;

/// The largest record a stream may hold, as [`ItemReader`] allows.
const MAX_RECORD: usize = 64 * 1024 * 1024;

pub struct Records {
    chunks: Vec<ChunkRef>,
    /// Where each chunk ends in the stream.
    ends: Vec<u64>,
    fetch: Fetch,
    recent: Mutex<Vec<(usize, Arc<Vec<u8>>)>>,
}

impl Records {
    pub fn new(chunks: Vec<ChunkRef>, fetch: Fetch) -> Self {
        let ends = super::tree::ends(&chunks).collect();
        Self {
            chunks,
            ends,
            fetch,
            recent: Mutex::new(Vec::new()),
        }
    }

    /// Every item from the start, with [`ItemReader::offset`] telling where each begins.
    pub fn all(&self) -> ItemReader<impl FnMut(&ChunkRef) -> Result<Vec<u8>> + '_> {
        ItemReader::new(self.chunks.clone(), |c: &ChunkRef| (self.fetch)(c))
    }

    /// The record at `offset`, and where the next one starts.
    pub fn read(&self, offset: u64) -> Result<(Item, u64)> {
        let head = self.bytes(offset, 4)?;
        let len = u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as usize;
        if len > MAX_RECORD {
            return Err(Error::corrupt("item stream", "record length out of range"));
        }
        let body = self.bytes(offset + 4, len)?;
        Ok((Item::decode(&body)?, offset + 4 + len as u64))
    }

    fn bytes(&self, offset: u64, n: usize) -> Result<Vec<u8>> {
        // A record longer than what the stream holds from `offset` is refused before anything
        // is reserved or fetched for it (a hostile length would cost up to 64 MiB otherwise).
        let held = self.ends.last().map_or(0, |end| end.saturating_sub(offset));
        if n as u64 > held {
            return Err(Error::corrupt("item stream", "truncated record"));
        }
        let mut out = Vec::with_capacity(n);
        while out.len() < n {
            let at = offset + out.len() as u64;
            let i = self.ends.partition_point(|e| *e <= at);
            if i == self.chunks.len() {
                return Err(Error::corrupt("item stream", "truncated record"));
            }
            let data = self.chunk(i)?;
            let from = (at - self.start(i)) as usize;
            let take = (n - out.len()).min(data.len() - from);
            out.extend_from_slice(&data[from..from + take]);
        }
        Ok(out)
    }

    fn start(&self, i: usize) -> u64 {
        if i == 0 {
            0
        } else {
            self.ends[i - 1]
        }
    }

    fn chunk(&self, i: usize) -> Result<Arc<Vec<u8>>> {
        let lock = || self.recent.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((_, data)) = lock().iter().find(|(k, _)| *k == i) {
            return Ok(data.clone());
        }
        let data = (self.fetch)(&self.chunks[i])?;
        if data.len() != self.chunks[i].len as usize {
            return Err(Error::corrupt(
                "item stream",
                "metadata chunk has the wrong length",
            ));
        }
        let data = Arc::new(data);
        let mut recent = lock();
        if recent.len() >= RECENT {
            recent.remove(0);
        }
        recent.push((i, data.clone()));
        Ok(data)
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;
    use crate::format::item::ItemKind;
    use crate::util::id::ChunkId;
    use std::collections::HashMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A stream of `items` cut into chunks of `cut` bytes, served from memory.
    pub fn stream(items: &[Item], cut: usize) -> Records {
        counted_stream(items, cut).0
    }

    /// The same, with the count of chunks fetched.
    pub fn counted_stream(items: &[Item], cut: usize) -> (Records, Arc<AtomicUsize>) {
        let mut bytes = Vec::new();
        for i in items {
            i.encode_into(&mut bytes);
        }
        let mut store = HashMap::new();
        let mut chunks = Vec::new();
        for (n, piece) in bytes.chunks(cut).enumerate() {
            let mut id = [0u8; 32];
            id[..8].copy_from_slice(&(n as u64).to_le_bytes());
            let c = ChunkRef {
                id: ChunkId(id),
                len: piece.len() as u32,
            };
            store.insert(c.id, piece.to_vec());
            chunks.push(c);
        }
        let count = Arc::new(AtomicUsize::new(0));
        let counter = count.clone();
        let fetch = move |c: &ChunkRef| {
            counter.fetch_add(1, Ordering::Relaxed);
            store
                .get(&c.id)
                .cloned()
                .ok_or_else(|| Error::corrupt("test", "no such chunk"))
        };
        (Records::new(chunks, Box::new(fetch)), count)
    }

    #[test]
    fn records_are_read_at_their_offsets_across_chunk_boundaries() {
        let items: Vec<Item> = (0..50)
            .map(|n| Item::new(ItemKind::File, format!("file-{n}").into_bytes()))
            .collect();
        let r = stream(&items, 7);
        let mut all = r.all();
        let mut offsets = Vec::new();
        loop {
            let at = all.offset();
            match all.next() {
                Some(item) => offsets.push((at, item.unwrap().path)),
                None => break,
            }
        }
        assert_eq!(offsets.len(), 50);
        for (k, (at, path)) in offsets.iter().enumerate().rev() {
            let (item, next) = r.read(*at).unwrap();
            assert_eq!(&item.path, path);
            if let Some((after, _)) = offsets.get(k + 1) {
                assert_eq!(next, *after);
            }
        }
        assert!(r.read(all.offset()).is_err(), "past the end is an error");
    }

    /// A record whose length says more than the stream holds after it is refused at once:
    /// nothing past its length field is fetched (nor reserved).
    #[test]
    fn a_record_longer_than_the_stream_is_refused_before_it_is_read() {
        let items: Vec<Item> = (0..40)
            .map(|n| Item::new(ItemKind::File, format!("file-{n}").into_bytes()))
            .collect();
        let mut bytes = Vec::new();
        for i in &items {
            i.encode_into(&mut bytes);
        }
        let at = bytes.len() as u64;
        // A last record of 60 MiB, within the record limit, of which the stream holds 5 bytes.
        let mut with_tail = items.clone();
        with_tail.push(Item::new(ItemKind::File, b"x".to_vec()));
        let (r, fetched) = counted_stream(&with_tail, 7);
        let head = r.bytes(at, 4).unwrap();
        assert_eq!(
            u32::from_le_bytes([head[0], head[1], head[2], head[3]]) as u64,
            r.ends.last().unwrap() - at - 4
        );
        let before = fetched.load(Ordering::Relaxed);
        assert!(r.bytes(at + 4, 60 << 20).is_err());
        assert_eq!(
            fetched.load(Ordering::Relaxed),
            before,
            "nothing fetched for it"
        );
        assert!(r
            .bytes(at + 4, (r.ends.last().unwrap() - at - 4) as usize)
            .is_ok());
    }
}
