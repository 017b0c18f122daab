//! Compression of blob payloads: lz4 (block format), or raw when lz4 does not shrink the data.
//! The choice is recorded in the blob header as one byte.

use crate::error::{Error, Result};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Compression {
    Raw = 0,
    Lz4 = 1,
}

impl Compression {
    pub fn from_byte(b: u8) -> Option<Self> {
        match b {
            0 => Some(Compression::Raw),
            1 => Some(Compression::Lz4),
            _ => None,
        }
    }
}

/// Room `compress_into` needs for an input of `len` bytes.
pub fn max_compressed_len(len: usize) -> usize {
    lz4_flex::block::get_maximum_output_size(len)
}

/// Compresses `input` into `out` (at least [`max_compressed_len`] long); returns the method
/// and the number of bytes written. Falls back to a raw copy when lz4 does not shrink.
pub fn compress_into(input: &[u8], out: &mut [u8]) -> (Compression, usize) {
    match lz4_flex::block::compress_into(input, out) {
        Ok(n) if n < input.len() => (Compression::Lz4, n),
        _ => {
            out[..input.len()].copy_from_slice(input);
            (Compression::Raw, input.len())
        }
    }
}

/// Decompresses into exactly `plain_len` bytes; anything else is an error about `what`.
pub fn decompress(
    method: Compression,
    input: &[u8],
    plain_len: usize,
    what: &str,
) -> Result<Vec<u8>> {
    match method {
        Compression::Raw => {
            if input.len() != plain_len {
                return Err(Error::corrupt(what, "raw payload has the wrong length"));
            }
            Ok(input.to_vec())
        }
        Compression::Lz4 => {
            let mut out = vec![0u8; plain_len];
            match lz4_flex::block::decompress_into(input, &mut out) {
                Ok(n) if n == plain_len => Ok(out),
                Ok(n) => Err(Error::corrupt(
                    what,
                    format!("decompressed to {n} bytes, expected {plain_len}"),
                )),
                Err(e) => Err(Error::corrupt(what, format!("lz4: {e}"))),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    proptest! {
        #[test]
        fn round_trip(data in proptest::collection::vec(any::<u8>(), 0..5000), zeros in 0usize..5000) {
            let mut input = data;
            input.extend(std::iter::repeat_n(0u8, zeros));
            let mut out = vec![0u8; max_compressed_len(input.len())];
            let (m, n) = compress_into(&input, &mut out);
            prop_assert!(n <= input.len());
            prop_assert_eq!(decompress(m, &out[..n], input.len(), "t").unwrap(), input);
        }
    }

    #[test]
    fn incompressible_is_stored_raw() {
        let input: Vec<u8> = (0..4096u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let mut out = vec![0u8; max_compressed_len(input.len())];
        let (m, n) = compress_into(&input, &mut out);
        if m == Compression::Raw {
            assert_eq!(n, input.len());
        }
        let zeros = vec![0u8; 4096];
        let (m, n) = compress_into(&zeros, &mut out);
        assert_eq!(m, Compression::Lz4);
        assert!(n < 100);
    }
}
