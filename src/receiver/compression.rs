//! Request body decompression, bounded while it runs: a zip bomb never allocates past
//! the limit, because output is read through `take(limit + 1)`.

use std::io::Read;

/// A Content-Encoding weir understands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// No compression.
    Identity,
    /// gzip (RFC 1952), multi-member allowed.
    Gzip,
    /// `deflate`, which HTTP defines as zlib (RFC 1950).
    Deflate,
    /// Zstandard.
    Zstd,
    /// Snappy block format (as Prometheus remote write and the Collector use it).
    Snappy,
    /// Snappy framing format (`x-snappy-framed`).
    SnappyFramed,
}

/// Why a body could not be decompressed.
#[derive(Debug, thiserror::Error, PartialEq)]
pub enum DecompressError {
    /// The decompressed body is over the limit.
    #[error("decompressed body exceeds the limit of {limit} bytes")]
    TooLarge {
        /// The limit.
        limit: usize,
    },
    /// The data is not valid for its encoding.
    #[error("invalid {encoding} data: {message}")]
    Corrupt {
        /// The encoding.
        encoding: &'static str,
        /// The decoder's complaint.
        message: String,
    },
}

impl Encoding {
    /// Parses a Content-Encoding header value; `None` for unknown encodings.
    pub fn parse(value: &str) -> Option<Encoding> {
        match value.trim().to_ascii_lowercase().as_str() {
            "" | "identity" | "none" => Some(Encoding::Identity),
            "gzip" | "x-gzip" => Some(Encoding::Gzip),
            "deflate" | "zlib" => Some(Encoding::Deflate),
            "zstd" => Some(Encoding::Zstd),
            "snappy" => Some(Encoding::Snappy),
            "x-snappy-framed" => Some(Encoding::SnappyFramed),
            _ => None,
        }
    }

    /// Name for messages.
    pub fn as_str(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
            Encoding::Zstd => "zstd",
            Encoding::Snappy => "snappy",
            Encoding::SnappyFramed => "x-snappy-framed",
        }
    }
}

/// Decompresses `input`, failing as soon as the output would pass `limit` bytes.
pub fn decompress(encoding: Encoding, input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let corrupt = |message: String| DecompressError::Corrupt { encoding: encoding.as_str(), message };
    match encoding {
        Encoding::Identity => {
            if input.len() > limit {
                return Err(DecompressError::TooLarge { limit });
            }
            Ok(input.to_vec())
        }
        // `bufread` decoders read the slice in place (the `read` ones copy it through a
        // buffer first).
        Encoding::Gzip => read_bounded(flate2::bufread::MultiGzDecoder::new(input), gzip_size_hint(input), limit, encoding),
        Encoding::Deflate => read_bounded(flate2::bufread::ZlibDecoder::new(input), size_guess(input), limit, encoding),
        Encoding::Zstd => {
            let decoder = zstd::stream::read::Decoder::new(input).map_err(|e| corrupt(e.to_string()))?;
            read_bounded(decoder, size_guess(input), limit, encoding)
        }
        Encoding::Snappy => {
            // The block format declares its length up front: refuse before allocating.
            let len = snap::raw::decompress_len(input).map_err(|e| corrupt(e.to_string()))?;
            if len > limit {
                return Err(DecompressError::TooLarge { limit });
            }
            snap::raw::Decoder::new().decompress_vec(input).map_err(|e| corrupt(e.to_string()))
        }
        Encoding::SnappyFramed => read_bounded(snap::read::FrameDecoder::new(input), size_guess(input), limit, encoding),
    }
}

/// The size a gzip body says it inflates to (ISIZE, the last four bytes: exact for one
/// member under 4 GiB), else [`size_guess`]. Only a capacity hint: the limit still rules.
fn gzip_size_hint(input: &[u8]) -> usize {
    match input.len().checked_sub(4).map(|at| &input[at..]) {
        Some(tail) if input.len() >= 18 => u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]]) as usize,
        _ => size_guess(input),
    }
}

/// Compressed OTLP is typically 4-10x smaller than what it inflates to.
fn size_guess(input: &[u8]) -> usize {
    input.len().saturating_mul(4)
}

fn read_bounded(reader: impl Read, size_hint: usize, limit: usize, encoding: Encoding) -> Result<Vec<u8>, DecompressError> {
    // Start from the hint, capped by the limit;
    // one spare byte so reading to the end needs no regrowth to see the end.
    let mut out = Vec::with_capacity(size_hint.saturating_add(1).min(limit.saturating_add(1)).min(16 << 20));
    let mut limited = reader.take(limit as u64 + 1);
    limited.read_to_end(&mut out).map_err(|e| DecompressError::Corrupt { encoding: encoding.as_str(), message: e.to_string() })?;
    if out.len() > limit {
        return Err(DecompressError::TooLarge { limit });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn gzip(data: &[u8]) -> Vec<u8> {
        let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::best());
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    #[test]
    fn round_trips_every_encoding() {
        let data = b"hello otlp ".repeat(100);
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(&data).unwrap();
        let cases = [
            (Encoding::Gzip, gzip(&data)),
            (Encoding::Deflate, z.finish().unwrap()),
            (Encoding::Zstd, zstd::encode_all(&data[..], 3).unwrap()),
            (Encoding::Snappy, snap::raw::Encoder::new().compress_vec(&data).unwrap()),
            (Encoding::Identity, data.clone()),
        ];
        for (enc, wire) in cases {
            assert_eq!(decompress(enc, &wire, 1 << 20).unwrap(), data, "{enc:?}");
        }
    }

    #[test]
    fn bombs_stop_at_the_limit() {
        let bomb = gzip(&vec![0u8; 50 << 20]);
        assert!(bomb.len() < 100 << 10);
        assert_eq!(decompress(Encoding::Gzip, &bomb, 1 << 20), Err(DecompressError::TooLarge { limit: 1 << 20 }));
        let zbomb = zstd::encode_all(&vec![0u8; 50 << 20][..], 3).unwrap();
        assert_eq!(decompress(Encoding::Zstd, &zbomb, 1 << 20), Err(DecompressError::TooLarge { limit: 1 << 20 }));
        let sbomb = snap::raw::Encoder::new().compress_vec(&vec![0u8; 4 << 20]).unwrap();
        assert_eq!(decompress(Encoding::Snappy, &sbomb, 1 << 20), Err(DecompressError::TooLarge { limit: 1 << 20 }));
    }

    #[test]
    fn corrupt_data_names_the_encoding() {
        let err = decompress(Encoding::Gzip, b"not gzip at all", 1024).unwrap_err();
        assert!(err.to_string().contains("gzip"), "{err}");
        assert_eq!(Encoding::parse("br"), None);
        assert_eq!(Encoding::parse(" GZIP "), Some(Encoding::Gzip));
    }
}
