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
///
/// gzip and zstd bodies that state their size (gzip's ISIZE trailer, zstd's frame
/// content size) are inflated in one call into a buffer of exactly that size: libdeflate
/// for gzip, a per-thread zstd context for zstd. A stated size over the limit is refused
/// before anything is inflated. Anything the one-shot path does not finish cleanly (more
/// than one gzip member or zstd frame, a trailer that is not the whole size, corrupt
/// data) goes the streaming way, which is bounded by the limit and names the problem.
pub fn decompress(encoding: Encoding, input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
    let stated = stated_size(encoding, input);
    if stated.is_some_and(|n| n > limit as u64) {
        return Err(DecompressError::TooLarge { limit });
    }
    let inflated = match (encoding, stated) {
        (Encoding::Gzip, Some(n)) => one_shot::gzip(input, n as usize),
        (Encoding::Zstd, Some(n)) => one_shot::zstd(input, n as usize),
        _ => None,
    };
    inflated.map_or_else(|| decompress_streaming(encoding, input, limit), Ok)
}

/// What `input` says it inflates to, if it says: gzip's ISIZE (the last four bytes, the
/// last member's size modulo 2^32: for the usual body of one member under 4 GiB the whole
/// size, and never more than the whole), zstd's frame content size (of the first frame).
/// Above the limit, a body is refused without inflating a byte.
pub fn stated_size(encoding: Encoding, input: &[u8]) -> Option<u64> {
    match encoding {
        Encoding::Gzip if input.len() >= 18 && input[..2] == [0x1f, 0x8b] => {
            let tail = &input[input.len() - 4..];
            Some(u64::from(u32::from_le_bytes([tail[0], tail[1], tail[2], tail[3]])))
        }
        Encoding::Zstd => zstd::zstd_safe::get_frame_content_size(input).ok().flatten(),
        _ => None,
    }
}

/// Decompresses `input` with the streaming decoders only (flate2 on zlib-rs, zstd's
/// streaming API, snap): the fallback of [`decompress`], and the reference its one-shot
/// paths are tested and benchmarked against.
pub fn decompress_streaming(encoding: Encoding, input: &[u8], limit: usize) -> Result<Vec<u8>, DecompressError> {
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
        // A fresh context: a streamed frame makes zstd allocate its window, which a
        // per-thread context would keep for good.
        Encoding::Zstd => {
            let decoder = zstd::stream::read::Decoder::with_buffer(input).map_err(|e| corrupt(e.to_string()))?;
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

/// The size a gzip body says it inflates to, else [`size_guess`]. Only a capacity hint:
/// the limit still rules.
fn gzip_size_hint(input: &[u8]) -> usize {
    stated_size(Encoding::Gzip, input).map_or_else(|| size_guess(input), |n| n as usize)
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

/// Compresses an export body the way the `otlphttp` exporter sends it: gzip with
/// libdeflate at level 1 (faster than zlib's level 1 and smaller), zstd at level 1 with
/// a per-thread context. The exporters compress on the export workers, so the fastest
/// level keeps them off the receivers' CPU; the backend still gets 3-5x smaller bodies.
/// `Identity` and the other encodings return the bytes as they are.
pub fn compress(encoding: Encoding, data: &[u8]) -> std::io::Result<Vec<u8>> {
    match encoding {
        Encoding::Gzip => one_shot::gzip_compress(data),
        Encoding::Zstd => one_shot::zstd_compress(data),
        _ => Ok(data.to_vec()),
    }
}

/// Whole-buffer inflaters for bodies that state their size. Each returns `None` for
/// anything it does not finish cleanly; the caller then streams, which is bounded and
/// explains the failure. gzip goes through libdeflate because it inflates faster than
/// flate2 on zlib-rs, streaming or one-shot (`docs/benchmarks.md#compressed-bodies`).
mod one_shot {
    use libdeflate_sys as ld;
    use std::cell::RefCell;
    use std::ptr::NonNull;

    /// A libdeflate decompressor (about 11 KiB of tables), one per thread.
    struct Inflater(NonNull<ld::libdeflate_decompressor>);

    impl Drop for Inflater {
        fn drop(&mut self) {
            // SAFETY: the pointer came from libdeflate_alloc_decompressor and is freed once.
            unsafe { ld::libdeflate_free_decompressor(self.0.as_ptr()) }
        }
    }

    /// A libdeflate level-1 compressor, one per thread.
    struct Deflater(NonNull<ld::libdeflate_compressor>);

    impl Drop for Deflater {
        fn drop(&mut self) {
            // SAFETY: the pointer came from libdeflate_alloc_compressor and is freed once.
            unsafe { ld::libdeflate_free_compressor(self.0.as_ptr()) }
        }
    }

    thread_local! {
        static INFLATER: RefCell<Option<Inflater>> = const { RefCell::new(None) };
        static DEFLATER: RefCell<Option<Deflater>> = const { RefCell::new(None) };
        static ZSTD: RefCell<Option<zstd::zstd_safe::DCtx<'static>>> = const { RefCell::new(None) };
        static ZSTD_OUT: RefCell<Option<zstd::zstd_safe::CCtx<'static>>> = const { RefCell::new(None) };
    }

    /// gzip at level 1. Only an allocation failure of libdeflate's (null) sends it to
    /// flate2.
    pub(super) fn gzip_compress(data: &[u8]) -> std::io::Result<Vec<u8>> {
        let done = DEFLATER.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                // SAFETY: a plain allocation; null is handled below.
                *slot = NonNull::new(unsafe { ld::libdeflate_alloc_compressor(1) }).map(Deflater);
            }
            let deflater = slot.as_ref()?;
            // SAFETY: the bound is computed by libdeflate for this compressor; it writes
            // at most that many bytes into the spare capacity and returns how many (0 only
            // when they did not fit, which the bound rules out).
            unsafe {
                let bound = ld::libdeflate_gzip_compress_bound(deflater.0.as_ptr(), data.len());
                let mut out = Vec::<u8>::with_capacity(bound);
                let n = ld::libdeflate_gzip_compress(deflater.0.as_ptr(), data.as_ptr().cast(), data.len(), out.as_mut_ptr().cast(), bound);
                (n > 0).then(|| {
                    out.set_len(n);
                    out
                })
            }
        });
        match done {
            Some(out) => Ok(out),
            None => {
                use std::io::Write;
                let mut e = flate2::write::GzEncoder::new(Vec::with_capacity(data.len() / 4), flate2::Compression::fast());
                e.write_all(data)?;
                e.finish()
            }
        }
    }

    /// zstd at level 1, with the content size in the frame (so weir's own receiver, and
    /// any other one-shot decoder, can size its buffer).
    pub(super) fn zstd_compress(data: &[u8]) -> std::io::Result<Vec<u8>> {
        let mut out = Vec::with_capacity(zstd::zstd_safe::compress_bound(data.len()));
        ZSTD_OUT.with(|cell| {
            let mut slot = cell.borrow_mut();
            let ctx = slot.get_or_insert_with(zstd::zstd_safe::CCtx::create);
            ctx.compress(&mut out, data, 1).map_err(|code| std::io::Error::other(zstd::zstd_safe::get_error_name(code)))
        })?;
        Ok(out)
    }

    /// Inflates a gzip body of one member whose trailer says `size`, into a buffer of
    /// exactly that size. libdeflate checks the CRC-32 and that ISIZE matches.
    pub(super) fn gzip(input: &[u8], size: usize) -> Option<Vec<u8>> {
        INFLATER.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                // SAFETY: a plain allocation; null (out of memory) is handled below.
                *slot = NonNull::new(unsafe { ld::libdeflate_alloc_decompressor() }).map(Inflater);
            }
            let inflater = slot.as_ref()?;
            let mut out = Vec::<u8>::with_capacity(size);
            let (mut used, mut written) = (0usize, 0usize);
            // SAFETY: libdeflate reads `input.len()` bytes of `input` and writes at most
            // `size` bytes into the vector's spare capacity, which holds `size` bytes;
            // `written` is how many it wrote.
            let rc = unsafe {
                ld::libdeflate_gzip_decompress_ex(
                    inflater.0.as_ptr(),
                    input.as_ptr().cast(),
                    input.len(),
                    out.as_mut_ptr().cast(),
                    size,
                    &mut used,
                    &mut written,
                )
            };
            // A body that goes on after the first member (more members, or garbage) is
            // the streaming decoder's to judge.
            if rc != ld::libdeflate_result_LIBDEFLATE_SUCCESS || used != input.len() || written > size {
                return None;
            }
            // SAFETY: libdeflate initialised the first `written` bytes.
            unsafe { out.set_len(written) };
            Some(out)
        })
    }

    /// Inflates a zstd body whose first frame states `size`, in one call with this
    /// thread's context (made on first use; a one-shot call decodes straight into the
    /// output and allocates no window, so the context stays small). More frames than
    /// the first make it run out of room: `None`.
    pub(super) fn zstd(input: &[u8], size: usize) -> Option<Vec<u8>> {
        let mut out = Vec::with_capacity(size);
        ZSTD.with(|cell| cell.borrow_mut().get_or_insert_with(zstd::zstd_safe::DCtx::create).decompress(&mut out, input)).ok()?;
        Some(out)
    }
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

    fn zstd_streamed(data: &[u8]) -> Vec<u8> {
        // The streaming encoder without a pledged size writes no content size.
        let mut e = zstd::stream::Encoder::new(Vec::new(), 3).unwrap();
        e.write_all(data).unwrap();
        e.finish().unwrap()
    }

    fn body(n: usize) -> Vec<u8> {
        // Compressible but not trivially: OTLP-like repeated keys with varying values.
        (0..n).map(|i| if i % 7 == 0 { (i / 7 % 251) as u8 } else { b"service.name=checkout"[i % 21] }).collect()
    }

    #[test]
    fn one_shot_and_streaming_agree() {
        for n in [0, 1, 100, 4096, 70_000, 300_924] {
            let data = body(n);
            for level in [1, 6, 9] {
                let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(level));
                e.write_all(&data).unwrap();
                let gz = e.finish().unwrap();
                assert_eq!(stated_size(Encoding::Gzip, &gz), Some(n as u64));
                assert_eq!(one_shot::gzip(&gz, n).as_deref(), Some(&data[..]), "libdeflate, {n} bytes, level {level}");
                assert_eq!(decompress(Encoding::Gzip, &gz, 1 << 20).unwrap(), data);
                assert_eq!(decompress_streaming(Encoding::Gzip, &gz, 1 << 20).unwrap(), data);
            }
            let zs = zstd::bulk::compress(&data, 3).unwrap();
            assert_eq!(stated_size(Encoding::Zstd, &zs), Some(n as u64));
            assert_eq!(one_shot::zstd(&zs, n).as_deref(), Some(&data[..]), "zstd one shot, {n} bytes");
            assert_eq!(decompress(Encoding::Zstd, &zs, 1 << 20).unwrap(), data);
            let streamed = zstd_streamed(&data);
            if n > 0 {
                assert_eq!(stated_size(Encoding::Zstd, &streamed), None, "{n} bytes streamed");
            }
            assert_eq!(decompress(Encoding::Zstd, &streamed, 1 << 20).unwrap(), data);
        }
    }

    #[test]
    fn compressed_exports_round_trip() {
        for n in [0, 10, 300_924] {
            let data = body(n);
            let gz = compress(Encoding::Gzip, &data).unwrap();
            assert_eq!(&gz[..2], [0x1f, 0x8b]);
            assert_eq!(decompress_streaming(Encoding::Gzip, &gz, 1 << 20).unwrap(), data, "gzip {n}");
            let zs = compress(Encoding::Zstd, &data).unwrap();
            assert_eq!(stated_size(Encoding::Zstd, &zs), Some(n as u64), "the frame states its size");
            assert_eq!(decompress_streaming(Encoding::Zstd, &zs, 1 << 20).unwrap(), data, "zstd {n}");
            assert_eq!(compress(Encoding::Identity, &data).unwrap(), data);
        }
    }

    #[test]
    fn malformed_gzip_on_every_path() {
        let data = body(50_000);
        let gz = gzip(&data);
        let n = gz.len();
        let limit = 1 << 20;
        let err = |body: &[u8]| decompress(Encoding::Gzip, body, limit).unwrap_err();
        // Concatenated members: the one-shot path stops after the first, the body goes
        // on, the streaming decoder reads both.
        let two = [gz.clone(), gzip(b"second member")].concat();
        assert_eq!(one_shot::gzip(&two, 13), None);
        assert_eq!(decompress(Encoding::Gzip, &two, limit).unwrap(), [&data[..], b"second member"].concat());
        // A bad CRC-32 (the four bytes before ISIZE).
        let mut bad_crc = gz.clone();
        bad_crc[n - 8] ^= 0x55;
        assert!(matches!(err(&bad_crc), DecompressError::Corrupt { encoding: "gzip", .. }), "{:?}", err(&bad_crc));
        // ISIZE smaller than the truth: no room in one shot; streaming finds the lie.
        let mut small = gz.clone();
        small[n - 4..].copy_from_slice(&(data.len() as u32 - 1).to_le_bytes());
        assert!(matches!(err(&small), DecompressError::Corrupt { .. }), "{:?}", err(&small));
        // ISIZE larger than the truth but under the limit: libdeflate checks it.
        let mut large = gz.clone();
        large[n - 4..].copy_from_slice(&(data.len() as u32 + 1).to_le_bytes());
        assert_eq!(one_shot::gzip(&large, data.len() + 1), None);
        assert!(matches!(err(&large), DecompressError::Corrupt { .. }), "{:?}", err(&large));
        // ISIZE over the limit: refused without inflating.
        let mut over = gz.clone();
        over[n - 4..].copy_from_slice(&(limit as u32 + 1).to_le_bytes());
        assert_eq!(err(&over), DecompressError::TooLarge { limit });
        // Garbage after the member.
        let trailing = [gz.clone(), b"not another member".to_vec()].concat();
        assert!(decompress(Encoding::Gzip, &trailing, limit).is_err());
        // Truncated anywhere: an error, never a panic and never a short body.
        for cut in [1, 2, 4, 7, 8, 9, 100, n / 2, n - 18, n - 10] {
            assert!(decompress(Encoding::Gzip, &gz[..n - cut], limit).is_err(), "cut {cut}");
        }
    }

    #[test]
    fn malformed_zstd_on_every_path() {
        let data = body(200);
        let limit = 1 << 20;
        // One frame with a one-byte content size right after the header byte (a single
        // segment frame of under 256 bytes): make it lie.
        let zs = zstd::bulk::compress(&data, 3).unwrap();
        assert_eq!(zs[4] & 0x20, 0x20, "single segment");
        let mut lying = zs.clone();
        lying[5] = 100;
        assert_eq!(stated_size(Encoding::Zstd, &lying), Some(100));
        assert_eq!(one_shot::zstd(&lying, 100), None);
        assert!(matches!(decompress(Encoding::Zstd, &lying, limit), Err(DecompressError::Corrupt { encoding: "zstd", .. })));
        // Two frames: the first states its size only; one shot runs out of room.
        let two = [zs.clone(), zstd::bulk::compress(b"second frame", 3).unwrap()].concat();
        assert_eq!(one_shot::zstd(&two, 200), None);
        assert_eq!(decompress(Encoding::Zstd, &two, limit).unwrap(), [&data[..], b"second frame"].concat());
        // A bad checksum.
        let mut c = zstd::bulk::Compressor::new(3).unwrap();
        c.include_checksum(true).unwrap();
        let mut summed = c.compress(&data).unwrap();
        let last = summed.len() - 1;
        summed[last] ^= 0x55;
        assert!(matches!(decompress(Encoding::Zstd, &summed, limit), Err(DecompressError::Corrupt { .. })));
        // Truncated, with and without a content size.
        for body in [zs.clone(), zstd_streamed(&body(50_000))] {
            for cut in [1, 3, body.len() / 2] {
                assert!(decompress(Encoding::Zstd, &body[..body.len() - cut], limit).is_err(), "cut {cut}");
            }
        }
    }

    #[test]
    fn bombs_without_a_stated_size_stop_at_the_limit() {
        // Streamed zstd states no size; a multi-member gzip's trailer states the last
        // member only: both go the streaming way and stop at the limit.
        let zbomb = zstd_streamed(&vec![0u8; 30 << 20]);
        assert_eq!(stated_size(Encoding::Zstd, &zbomb), None);
        assert_eq!(decompress(Encoding::Zstd, &zbomb, 1 << 20), Err(DecompressError::TooLarge { limit: 1 << 20 }));
        let gbomb = [gzip(&vec![0u8; 30 << 20]), gzip(b"x")].concat();
        assert_eq!(stated_size(Encoding::Gzip, &gbomb), Some(1));
        assert_eq!(decompress(Encoding::Gzip, &gbomb, 1 << 20), Err(DecompressError::TooLarge { limit: 1 << 20 }));
    }
}
