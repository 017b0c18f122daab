//! The item stream: items encoded back to back, cut into chunks by the metadata chunker and
//! stored like file data, so that unchanged metadata deduplicates between archives.
//!
//! The writer only cuts a chunk when at least `max_size` bytes follow the cut's start, which
//! makes its chunks exactly those of chunking the whole stream at once, however items arrive.

use crate::archive::item::{ChunkRef, Item};
use crate::chunker::Chunker;
use crate::error::{Error, Result};
use crate::repo::session::WriteSession;

pub struct ItemStreamWriter {
    chunker: Chunker,
    buf: Vec<u8>,
    chunks: Vec<ChunkRef>,
    /// Total encoded bytes.
    pub bytes: u64,
    pub items: u64,
}

impl ItemStreamWriter {
    pub fn new(chunker: Chunker) -> Self {
        Self {
            chunker,
            buf: Vec::new(),
            chunks: Vec::new(),
            bytes: 0,
            items: 0,
        }
    }

    pub fn push(&mut self, item: &Item, up: &mut WriteSession) -> Result<()> {
        let before = self.buf.len();
        item.encode_into(&mut self.buf);
        self.bytes += (self.buf.len() - before) as u64;
        self.items += 1;
        let max = self.chunker.params().max_size as usize;
        if self.buf.len() >= 2 * max {
            self.cut(up, false)?;
        }
        Ok(())
    }

    fn cut(&mut self, up: &mut WriteSession, eof: bool) -> Result<()> {
        let max = self.chunker.params().max_size as usize;
        let mut pos = 0;
        while pos < self.buf.len() && (eof || self.buf.len() - pos >= max) {
            let n = self
                .chunker
                .cut(&self.buf[pos..])
                .max(1)
                .min(self.buf.len() - pos);
            let data = &self.buf[pos..pos + n];
            let id = up.store_chunk(data)?;
            self.chunks.push(ChunkRef { id, len: n as u32 });
            pos += n;
        }
        self.buf.drain(..pos);
        Ok(())
    }

    /// Stores what is left; returns the stream's chunks.
    pub fn finish(&mut self, up: &mut WriteSession) -> Result<Vec<ChunkRef>> {
        self.cut(up, true)?;
        Ok(std::mem::take(&mut self.chunks))
    }
}

/// Decodes items from a stream's chunks, fetching each chunk when it is needed.
pub struct ItemReader<F> {
    fetch: F,
    chunks: std::vec::IntoIter<ChunkRef>,
    buf: Vec<u8>,
    pos: usize,
    failed: bool,
}

impl<F: FnMut(&ChunkRef) -> Result<Vec<u8>>> ItemReader<F> {
    pub fn new(chunks: Vec<ChunkRef>, fetch: F) -> Self {
        Self {
            fetch,
            chunks: chunks.into_iter(),
            buf: Vec::new(),
            pos: 0,
            failed: false,
        }
    }

    /// Makes sure `n` bytes are buffered from `pos`; false at the end of the stream.
    fn want(&mut self, n: usize) -> Result<bool> {
        while self.buf.len() - self.pos < n {
            let Some(c) = self.chunks.next() else {
                return Ok(false);
            };
            let data = (self.fetch)(&c)?;
            if data.len() != c.len as usize {
                return Err(Error::corrupt(
                    "item stream",
                    "metadata chunk has the wrong length",
                ));
            }
            self.buf.drain(..self.pos);
            self.pos = 0;
            self.buf.extend_from_slice(&data);
        }
        Ok(true)
    }

    fn next_item(&mut self) -> Result<Option<Item>> {
        if !self.want(4)? {
            if self.buf.len() > self.pos {
                return Err(Error::corrupt("item stream", "truncated record length"));
            }
            return Ok(None);
        }
        let len = u32::from_le_bytes([
            self.buf[self.pos],
            self.buf[self.pos + 1],
            self.buf[self.pos + 2],
            self.buf[self.pos + 3],
        ]) as usize;
        if len > 64 * 1024 * 1024 {
            return Err(Error::corrupt("item stream", "record length out of range"));
        }
        if !self.want(4 + len)? {
            return Err(Error::corrupt("item stream", "truncated record"));
        }
        let item = Item::decode(&self.buf[self.pos + 4..self.pos + 4 + len])?;
        self.pos += 4 + len;
        Ok(Some(item))
    }
}

impl<F: FnMut(&ChunkRef) -> Result<Vec<u8>>> Iterator for ItemReader<F> {
    type Item = Result<Item>;

    fn next(&mut self) -> Option<Result<Item>> {
        if self.failed {
            return None;
        }
        match self.next_item() {
            Ok(Some(i)) => Some(Ok(i)),
            Ok(None) => None,
            Err(e) => {
                self.failed = true;
                Some(Err(e))
            }
        }
    }
}
