//! Sparse files in a tar stream, as PAX sparse format 1.0 (GNU tar and bsdtar restore them
//! with their holes).
//!
//! A file's holes are the chunks that are all zeros. Content-defined chunking cuts a run of
//! zeros into chunks of the largest size (nothing in zeros marks a cut), so a hole is known
//! without reading anything: a chunk whose id is the id of `max_size` zeros. Those chunks
//! are neither fetched nor written. The zeros around them, in the chunks where data begins
//! and ends, are found by reading those chunks ahead ([`refine`]: whole 4 KiB blocks of
//! zeros, as `extract` leaves holes) when they hold at most [`READ_AHEAD`] bytes; a file with
//! more data keeps them as data.
//!
//! The entry: a PAX header with `GNU.sparse.major=1`, `GNU.sparse.minor=0`,
//! `GNU.sparse.name` (the real name) and `GNU.sparse.realsize`; the ustar name
//! `DIR/GNUSparseFile.0/NAME` (what a reader that knows no sparse files extracts it as);
//! the data area starts with the map (the number of data segments, then each one's offset
//! and length, in decimal, one per line, padded to 512 bytes), then the segments' bytes. A
//! file that ends in a hole ends its map with a segment of length 0 at its size.

use crate::format::item::ChunkRef;
use crate::util::id::ChunkId;

/// A file's data segments: `(offset, length)` of each run of chunks that are not holes, and
/// `(size, 0)` when the file ends in a hole; `None` when it has no hole.
pub fn segments(chunks: &[ChunkRef], hole: &ChunkId) -> Option<Vec<(u64, u64)>> {
    if !chunks.iter().any(|c| c.id == *hole) {
        return None;
    }
    let mut out: Vec<(u64, u64)> = Vec::new();
    let mut offset = 0u64;
    let mut run: Option<(u64, u64)> = None;
    for c in chunks {
        let len = u64::from(c.len);
        if c.id == *hole {
            out.extend(run.take());
        } else {
            let r = run.get_or_insert((offset, 0));
            r.1 += len;
        }
        offset += len;
    }
    match run {
        Some(r) => out.push(r),
        None => out.push((offset, 0)),
    }
    Some(out)
}

/// The most data of one sparse file read ahead to find the zeros inside its data chunks.
pub const READ_AHEAD: u64 = 64 << 20;

const BLOCK: u64 = 4096;

/// The data segments (`coarse`, whose bytes `data` holds one after the other) split where
/// whole 4 KiB blocks of zeros (aligned in the file) lie inside them: each piece as
/// `(offset, length, position in data)`, and `(size, 0, 0)` when the file then ends in a hole.
pub fn refine(coarse: &[(u64, u64)], data: &[u8], size: u64) -> Vec<(u64, u64, usize)> {
    let mut out: Vec<(u64, u64, usize)> = Vec::new();
    let mut pos = 0usize;
    for &(offset, len) in coarse {
        let mut at = offset;
        let end = offset + len;
        while at < end {
            let block_end = ((at / BLOCK + 1) * BLOCK).min(end);
            let n = (block_end - at) as usize;
            let zero = data[pos..pos + n].iter().all(|b| *b == 0);
            match out.last_mut() {
                _ if zero => {}
                Some(last) if last.0 + last.1 == at && last.1 > 0 => last.1 += n as u64,
                _ => out.push((at, n as u64, pos)),
            }
            pos += n;
            at = block_end;
        }
    }
    if out.last().is_none_or(|last| last.0 + last.1 < size) {
        out.push((size, 0, 0));
    }
    out
}

/// The map that opens the data area, padded to a whole block.
pub fn map(segments: &[(u64, u64)]) -> Vec<u8> {
    let mut text = format!("{}\n", segments.len());
    for (offset, len) in segments {
        text.push_str(&format!("{offset}\n{len}\n"));
    }
    let mut bytes = text.into_bytes();
    bytes.resize(bytes.len().div_ceil(512) * 512, 0);
    bytes
}

/// The name a sparse entry's ustar header carries: `DIR/GNUSparseFile.0/NAME`, as GNU tar
/// writes it (`./GNUSparseFile.0/NAME` at the top).
pub fn stand_in_name(name: &[u8]) -> Vec<u8> {
    let (dir, base) = match name.iter().rposition(|b| *b == b'/') {
        Some(i) => (&name[..i], &name[i + 1..]),
        None => (&b"."[..], name),
    };
    let mut out = dir.to_vec();
    out.extend_from_slice(b"/GNUSparseFile.0/");
    out.extend_from_slice(base);
    out
}

/// The chunks a sparse entry writes: those that are not holes, in order.
pub fn data_chunks(chunks: &[ChunkRef], hole: &ChunkId) -> Vec<ChunkRef> {
    chunks.iter().filter(|c| c.id != *hole).copied().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: u8, len: u32) -> ChunkRef {
        ChunkRef {
            id: ChunkId([id; 32]),
            len,
        }
    }

    #[test]
    fn segments_are_the_runs_between_holes() {
        let hole = ChunkId([0; 32]);
        let none = [chunk(1, 10), chunk(2, 5)];
        assert_eq!(segments(&none, &hole), None);
        let middle = [
            chunk(1, 10),
            chunk(0, 100),
            chunk(0, 100),
            chunk(2, 5),
            chunk(3, 5),
        ];
        assert_eq!(segments(&middle, &hole), Some(vec![(0, 10), (210, 10)]));
        let ends = [chunk(0, 100), chunk(1, 7), chunk(0, 100)];
        assert_eq!(segments(&ends, &hole), Some(vec![(100, 7), (207, 0)]));
        let all = [chunk(0, 100)];
        assert_eq!(segments(&all, &hole), Some(vec![(100, 0)]));
        assert_eq!(data_chunks(&ends, &hole), vec![chunk(1, 7)]);
    }

    #[test]
    fn zero_blocks_inside_data_become_holes() {
        // 10 KiB of data at 0: 4 KiB of bytes, 4 KiB of zeros, 2 KiB of zeros; a hole; then
        // 8 KiB at 100 KiB whose second block is zeros; the file is 120 KiB.
        let k = 1024u64;
        let mut data = vec![0u8; 18 * 1024];
        data[..4096].fill(1);
        data[10 * 1024..14 * 1024].fill(2);
        let coarse = [(0, 10 * k), (100 * k, 8 * k)];
        let pieces = refine(&coarse, &data, 120 * k);
        assert_eq!(
            pieces,
            vec![(0, 4 * k, 0), (100 * k, 4 * k, 10 * 1024), (120 * k, 0, 0)]
        );
        // A file whose data reaches its end needs no terminator.
        let whole = refine(&[(0, 4 * k)], &data[..4096], 4 * k);
        assert_eq!(whole, vec![(0, 4 * k, 0)]);
    }

    #[test]
    fn the_map_is_decimal_lines_in_whole_blocks() {
        let m = map(&[(0, 10), (210, 10)]);
        assert_eq!(m.len(), 512);
        assert!(m.starts_with(b"2\n0\n10\n210\n10\n\0"));
        let long: Vec<(u64, u64)> = (0..100).map(|i| (i * 1_000_000_000, 999)).collect();
        assert_eq!(map(&long).len() % 512, 0);
        assert!(map(&long).len() > 512);
    }

    #[test]
    fn stand_in_names() {
        assert_eq!(
            stand_in_name(b"a/b/disk.img"),
            b"a/b/GNUSparseFile.0/disk.img"
        );
        assert_eq!(stand_in_name(b"disk.img"), b"./GNUSparseFile.0/disk.img");
    }
}
