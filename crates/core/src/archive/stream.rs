//! The item stream: items encoded back to back, cut into chunks by the metadata chunker and
//! stored like file data, so that unchanged metadata deduplicates between archives.
//!
//! The writer only cuts a chunk when at least `max_size` bytes follow the cut's start, which
//! makes its chunks exactly those of chunking the whole stream at once, however items arrive.

use crate::chunker::Chunker;
use crate::error::Result;
use crate::format::item::{ChunkRef, Item};
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
