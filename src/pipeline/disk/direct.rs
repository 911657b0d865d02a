//! Segment writes that skip the page cache (`O_DIRECT`), for `sync: on_ack`.
//!
//! A buffered append copies every byte into the page cache, and its fsync then walks
//! those pages to write them back; with direct I/O the group is copied once into an
//! aligned buffer and written from there, and the fsync only flushes the disk's cache.
//! Direct I/O writes whole blocks at block offsets, so each write starts at the block
//! that holds the previous group's end (its bytes are kept from that write, or read
//! back after a cut) and ends padded with zeros to a block. The padding is past the
//! segment's length: readers stop at the length the writer publishes, the start-up scan
//! reads zeros as the end of the records, and a sealed segment is cut to its length.
//! See docs/durable-queue.md#direct-writes.

use std::fs::File;
use std::os::unix::fs::FileExt;

/// Offsets, lengths and the buffer are aligned to this (the largest logical block size
/// in common use; a multiple of 512).
pub(super) const ALIGN: usize = 4096;

/// The staging buffer: a group larger than this is written a chunk at a time, so the
/// buffer stays this size whatever the groups are. One huge page: see [`Staging`].
const CHUNK: usize = 2 << 20;

/// [`CHUNK`] bytes aligned to [`CHUNK`], asked to be backed by one transparent huge page.
/// Every direct write pins the buffer's pages for the device and unpins them when it
/// completes: one 2 MiB page instead of 512 small ones makes that (and the TLB misses
/// of the copy in) cheaper. Where huge pages are off it is ordinary memory.
struct Staging(std::ptr::NonNull<u8>);

// SAFETY: `Staging` owns its allocation alone, like a `Box<[u8]>`.
unsafe impl Send for Staging {}

impl Staging {
    const LAYOUT: std::alloc::Layout = match std::alloc::Layout::from_size_align(CHUNK, CHUNK) {
        Ok(l) => l,
        Err(_) => panic!("CHUNK is a power of two"),
    };

    fn new() -> Self {
        // SAFETY: LAYOUT has a non-zero size.
        let p = unsafe { std::alloc::alloc_zeroed(Self::LAYOUT) };
        let Some(p) = std::ptr::NonNull::new(p) else { std::alloc::handle_alloc_error(Self::LAYOUT) };
        // SAFETY: the range is this allocation; a refusal (huge pages off) changes nothing.
        unsafe { libc::madvise(p.as_ptr().cast(), CHUNK, libc::MADV_HUGEPAGE) };
        Staging(p)
    }
}

impl Drop for Staging {
    fn drop(&mut self) {
        // SAFETY: allocated in `new` with LAYOUT.
        unsafe { std::alloc::dealloc(self.0.as_ptr(), Self::LAYOUT) }
    }
}

impl std::ops::Deref for Staging {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        // SAFETY: CHUNK initialised bytes, owned by self.
        unsafe { std::slice::from_raw_parts(self.0.as_ptr(), CHUNK) }
    }
}

impl std::ops::DerefMut for Staging {
    fn deref_mut(&mut self) -> &mut [u8] {
        // SAFETY: as above, and borrowed mutably through self.
        unsafe { std::slice::from_raw_parts_mut(self.0.as_ptr(), CHUNK) }
    }
}

/// A segment file opened with `O_DIRECT`.
pub(super) struct DirectFile {
    file: File,
    /// Staging memory, aligned to [`ALIGN`] (and more).
    buf: Staging,
    /// The file's bytes from `tail_at` (a block offset) for `tail_len` bytes are at
    /// `buf[..]`: the last, partial block of the previous write.
    tail_at: u64,
    tail_len: usize,
}

impl DirectFile {
    pub(super) fn new(file: File) -> Self {
        DirectFile { file, buf: Staging::new(), tail_at: u64::MAX, tail_len: 0 }
    }

    /// Writes `parts` at `offset`; returns the end of what the file now holds (the last
    /// block's padding included).
    pub(super) fn write_parts_at(&mut self, parts: &[&[u8]], offset: u64) -> std::io::Result<u64> {
        let block = offset - offset % ALIGN as u64;
        let pre = (offset - block) as usize;
        if pre > 0 && !(self.tail_at == block && self.tail_len >= pre) {
            self.read_block(block)?;
        }
        // Until this write is whole, the kept block may not match the file.
        self.tail_len = 0;
        let (mut fill, mut at) = (pre, block);
        for part in parts {
            let mut p = *part;
            while !p.is_empty() {
                let n = (CHUNK - fill).min(p.len());
                self.buf[fill..fill + n].copy_from_slice(&p[..n]);
                (fill, p) = (fill + n, &p[n..]);
                if fill == CHUNK {
                    self.file.write_all_at(&self.buf[..CHUNK], at)?;
                    (fill, at) = (0, at + CHUNK as u64);
                }
            }
        }
        let padded = fill.div_ceil(ALIGN) * ALIGN;
        if padded > 0 {
            self.buf[fill..padded].fill(0);
            self.file.write_all_at(&self.buf[..padded], at)?;
        }
        // Keep the last partial block for the next write, which starts in it.
        let last = fill % ALIGN;
        self.buf.copy_within(fill - last..fill, 0);
        (self.tail_at, self.tail_len) = (at + (fill - last) as u64, last);
        Ok(at + padded as u64)
    }

    /// Reads the block at `block` into the front of the buffer (zeros past the file's end).
    fn read_block(&mut self, block: u64) -> std::io::Result<()> {
        let b = &mut self.buf[..ALIGN];
        // One read: a short one is the file's end (a read from where it stopped could be
        // unaligned).
        let got = loop {
            match self.file.read_at(b, block) {
                Ok(n) => break n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        b[got..].fill(0);
        (self.tail_at, self.tail_len) = (block, ALIGN);
        Ok(())
    }

    pub(super) fn sync_data(&self) -> std::io::Result<()> {
        self.file.sync_data()
    }

    pub(super) fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        // The kept block may now hold bytes past the cut.
        self.tail_len = 0;
        self.file.set_len(len)
    }
}

/// Opens `path` for direct writes, or `None` when its file system does not take them
/// (tmpfs, some network and overlay file systems answer `EINVAL`).
pub(super) fn open(path: &std::path::Path, truncate: bool) -> std::io::Result<Option<File>> {
    use std::os::unix::fs::OpenOptionsExt;
    let r = std::fs::OpenOptions::new().create(true).truncate(truncate).read(true).write(true).custom_flags(libc::O_DIRECT).open(path);
    match r {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.raw_os_error() == Some(libc::EINVAL) => Ok(None),
        Err(e) => Err(e),
    }
}

/// A directory on the disk the build uses (not /tmp, which may be a tmpfs): for tests
/// that need direct I/O.
#[cfg(test)]
pub(super) fn scratch() -> std::io::Result<tempfile::TempDir> {
    let d = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target");
    std::fs::create_dir_all(&d)?;
    tempfile::tempdir_in(d)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A direct file in a directory that takes direct I/O, or `None` (then the test
    /// says so and checks the buffered path elsewhere).
    fn direct_file(dir: &std::path::Path, name: &str, truncate: bool) -> Option<DirectFile> {
        open(&dir.join(name), truncate).unwrap().map(DirectFile::new)
    }

    #[test]
    fn unaligned_appends_read_back_as_written_and_the_padding_is_zeros() {
        let dir = scratch().unwrap();
        let Some(mut f) = direct_file(dir.path(), "a.wq", true) else {
            panic!("the target directory's file system takes no O_DIRECT; this test needs one that does");
        };
        let mut want = Vec::new();
        let mut at = 0u64;
        for (i, n) in [5usize, 4091, 1, 12_000, 4096, 3, 70_000, 2_600_000, 2 * CHUNK].into_iter().enumerate() {
            let a = vec![i as u8 + 1; n / 2];
            let b = vec![i as u8 + 101; n - n / 2];
            let end = f.write_parts_at(&[&a, &b], at).unwrap();
            want.extend_from_slice(&a);
            want.extend_from_slice(&b);
            at += n as u64;
            assert_eq!(end, at.div_ceil(ALIGN as u64) * ALIGN as u64, "write {i}");
        }
        f.sync_data().unwrap();
        let got = std::fs::read(dir.path().join("a.wq")).unwrap();
        assert_eq!(&got[..want.len()], &want[..]);
        assert!(got[want.len()..].iter().all(|&b| b == 0), "padding");
        assert_eq!(got.len() % ALIGN, 0);
    }

    #[test]
    fn after_a_cut_the_next_write_reads_its_block_back() {
        let dir = scratch().unwrap();
        let Some(mut f) = direct_file(dir.path(), "b.wq", true) else {
            panic!("the target directory's file system takes no O_DIRECT; this test needs one that does");
        };
        f.write_parts_at(&[&[1u8; 6000]], 0).unwrap();
        f.write_parts_at(&[&[2u8; 3000]], 6000).unwrap();
        // The second write failed, say: cut back to where it began, then write again.
        f.set_len(6000).unwrap();
        f.write_parts_at(&[&[3u8; 100]], 6000).unwrap();
        f.set_len(6100).unwrap();
        let got = std::fs::read(dir.path().join("b.wq")).unwrap();
        assert_eq!(got.len(), 6100);
        assert!(got[..6000].iter().all(|&b| b == 1) && got[6000..].iter().all(|&b| b == 3));

        // A file written before (a spare, reopened): its first block comes from disk.
        drop(f);
        let mut g = direct_file(dir.path(), "b.wq", false).unwrap();
        g.write_parts_at(&[&[4u8; 10]], 50).unwrap();
        let got = std::fs::read(dir.path().join("b.wq")).unwrap();
        assert!(got[..50].iter().all(|&b| b == 1) && got[50..60].iter().all(|&b| b == 4) && got[60..ALIGN].iter().all(|&b| b == 0));
        assert!(got[ALIGN..6000].iter().all(|&b| b == 1), "the blocks after are untouched");
    }
}
