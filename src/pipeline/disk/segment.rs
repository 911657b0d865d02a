//! Segment files (`<first id>.wq`), cursor files, and reading records out of a segment.

use super::record::{self, Record, HEAD};
use bytes::Bytes;
use std::fs::File;
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::{Path, PathBuf};

/// The file name of the segment whose first record id is `first_id`.
pub fn file_name(first_id: u64) -> String {
    format!("{first_id:020}.wq")
}

/// The segments in `dir`, by first id.
pub fn list(dir: &Path) -> std::io::Result<Vec<(u64, PathBuf)>> {
    let mut v = Vec::new();
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let Some(stem) = name.strip_suffix(".wq") else { continue };
        match stem.parse::<u64>() {
            Ok(id) => v.push((id, e.path())),
            Err(_) => tracing::warn!(file = %e.path().display(), "not a segment name; ignored"),
        }
    }
    v.sort_by_key(|(id, _)| *id);
    Ok(v)
}

/// fsyncs a directory, so a created, renamed or removed entry survives a power loss.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// One step of reading a segment.
#[derive(Debug)]
pub enum Step {
    /// A whole, checked record and the offset after it.
    Record(Record, u64),
    /// No whole record before `end`.
    End,
    /// Damaged bytes at this offset (`why`); the next readable record starts at `resume`
    /// (or `end`: nothing readable follows).
    Corrupt {
        /// What was wrong.
        why: &'static str,
        /// Where reading goes on.
        resume: u64,
    },
}

/// Reads records of one segment file up to a moving `end`.
pub struct SegmentReader {
    file: File,
    /// Read-ahead: `buf` holds the file's bytes from `buf_at`.
    buf: Bytes,
    buf_at: u64,
}

/// How much a reader reads at once.
const CHUNK: usize = 1 << 20;

impl SegmentReader {
    /// Opens `path`.
    pub fn open(path: &Path) -> std::io::Result<Self> {
        Ok(SegmentReader { file: File::open(path)?, buf: Bytes::new(), buf_at: 0 })
    }

    /// `len` bytes at `at` (short only at the end of the file), reading ahead no further
    /// than `end`: bytes past the published end may still change (a failed group is cut
    /// off and its offsets written again), so they are never cached.
    fn bytes_at(&mut self, at: u64, len: usize, end: u64) -> std::io::Result<Bytes> {
        let have = at >= self.buf_at && at + len as u64 <= self.buf_at + self.buf.len() as u64;
        if !have {
            let want = len.max(CHUNK.min(end.saturating_sub(at) as usize));
            let mut v = Vec::with_capacity(want);
            self.file.seek(SeekFrom::Start(at))?;
            (&mut self.file).take(want as u64).read_to_end(&mut v)?;
            self.buf = Bytes::from(v);
            self.buf_at = at;
        }
        let from = (at - self.buf_at) as usize;
        let to = (from + len).min(self.buf.len());
        Ok(self.buf.slice(from.min(to)..to))
    }

    /// The record at `at`, reading no further than `end`.
    pub fn step(&mut self, at: u64, end: u64) -> std::io::Result<Step> {
        if at + HEAD as u64 > end {
            return Ok(Step::End);
        }
        let h = self.bytes_at(at, HEAD, end)?;
        let Ok(h) = <&[u8; HEAD]>::try_from(&h[..]) else { return Ok(Step::End) };
        let (len, crc) = match record::head(h) {
            record::Head::Ok { len, crc } => (len, crc),
            record::Head::Bad(why) => return self.corrupt(why, at, end),
        };
        let after = at + HEAD as u64 + len as u64;
        if after > end {
            // Within the readable end a record is whole; one that runs past it is damaged
            // (a sealed segment) or, at the very tail of the active one, impossible.
            return self.corrupt("record runs past the end", at, end);
        }
        let body = self.bytes_at(at + HEAD as u64, len as usize, end)?;
        if body.len() < len as usize {
            return self.corrupt("file shorter than its records", at, end);
        }
        match record::body(crc, body) {
            Ok(r) => Ok(Step::Record(r, after)),
            Err(why) => self.corrupt(why, at, end),
        }
    }

    fn corrupt(&mut self, why: &'static str, at: u64, end: u64) -> std::io::Result<Step> {
        Ok(Step::Corrupt { why, resume: self.resync(at + 1, end)? })
    }

    /// The first offset in `[from, end)` where a whole, checked record starts, or `end`.
    fn resync(&mut self, from: u64, end: u64) -> std::io::Result<u64> {
        let magic = record::MAGIC.to_le_bytes();
        let mut at = from;
        while at + HEAD as u64 <= end {
            let window = self.bytes_at(at, CHUNK.min((end - at) as usize), end)?;
            if window.len() < HEAD {
                break;
            }
            match window.windows(4).position(|w| w == magic) {
                None => at += (window.len() - 3) as u64,
                Some(i) => {
                    let pos = at + i as u64;
                    if let Step::Record(..) = self.step_plain(pos, end)? {
                        return Ok(pos);
                    }
                    at = pos + 1;
                }
            }
        }
        Ok(end)
    }

    /// `step` without resynchronising (used while resynchronising).
    fn step_plain(&mut self, at: u64, end: u64) -> std::io::Result<Step> {
        if at + HEAD as u64 > end {
            return Ok(Step::End);
        }
        let h = self.bytes_at(at, HEAD, end)?;
        let Ok(h) = <&[u8; HEAD]>::try_from(&h[..]) else { return Ok(Step::End) };
        let record::Head::Ok { len, crc } = record::head(h) else { return Ok(Step::End) };
        let after = at + HEAD as u64 + len as u64;
        if after > end {
            return Ok(Step::End);
        }
        let body = self.bytes_at(at + HEAD as u64, len as usize, end)?;
        Ok(match record::body(crc, body) {
            Ok(r) => Step::Record(r, after),
            Err(_) => Step::End,
        })
    }
}

/// What the start-up scan of the last segment found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Scan {
    /// The id of the last whole record, if any.
    pub last_id: Option<u64>,
    /// Where the whole records end (the torn tail, if any, starts here).
    pub valid_end: u64,
    /// Damaged records skipped before `valid_end`.
    pub corrupt: u64,
    /// Whole records.
    pub records: u64,
    /// Records of the file's earlier life as another segment follow `valid_end` (a
    /// spare file written over): not damage, just the end.
    pub stale: bool,
}

/// Whether a record with id `id` found after `last` (the id before it in the segment)
/// belongs to segment `first_id`: ids in a segment only grow, and every id of an
/// earlier segment is below its first.
pub fn belongs(id: u64, first_id: u64, last: Option<u64>) -> bool {
    id >= first_id && last.is_none_or(|l| id > l)
}

/// Scans a whole segment whose first id is `first_id`: every record checked, damage in
/// the middle skipped, the torn tail found, and the records of a spare file's earlier
/// life (ids from an older segment) left out.
pub fn scan(path: &Path, first_id: u64) -> std::io::Result<Scan> {
    let len = std::fs::metadata(path)?.len();
    let mut r = SegmentReader::open(path)?;
    let mut s = Scan::default();
    let mut at = 0;
    loop {
        match r.step(at, len)? {
            Step::Record(rec, _) if !belongs(rec.meta.id, first_id, s.last_id) => {
                s.stale = true;
                break;
            }
            Step::Record(rec, next) => {
                s.last_id = Some(rec.meta.id);
                s.records += 1;
                at = next;
                s.valid_end = next;
            }
            Step::End => break,
            Step::Corrupt { why, resume } => {
                // A torn write over a spare file is followed by its old records.
                let old = match r.step_plain(resume, len)? {
                    Step::Record(rec, _) => !belongs(rec.meta.id, first_id, s.last_id),
                    _ => false,
                };
                if resume >= len || old {
                    s.stale |= old;
                    tracing::warn!(segment = %path.display(), offset = at, bytes = len - at, why, "torn tail cut off");
                    break;
                }
                tracing::warn!(segment = %path.display(), offset = at, why, "damaged record skipped");
                s.corrupt += 1;
                at = resume;
            }
        }
    }
    Ok(s)
}

/// A cursor file: the id up to which an exporter acknowledged every record.
pub fn read_cursor(path: &Path) -> Result<Option<u64>, String> {
    let b = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e.to_string()),
    };
    if b.len() != 12 {
        return Err(format!("{} bytes, expected 12", b.len()));
    }
    let id = u64::from_le_bytes(b[0..8].try_into().map_err(|_| "short")?);
    let crc = u32::from_le_bytes(b[8..12].try_into().map_err(|_| "short")?);
    if crc32fast::hash(&b[0..8]) != crc {
        return Err("checksum mismatch".into());
    }
    Ok(Some(id))
}

/// Writes a cursor durably: a temporary file, fsync, rename over the old one, fsync of
/// the directory. A crash at any point leaves the old cursor or the new one, whole.
pub fn write_cursor(path: &Path, id: u64) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut b = [0u8; 12];
    b[0..8].copy_from_slice(&id.to_le_bytes());
    let crc = crc32fast::hash(&b[0..8]);
    b[8..12].copy_from_slice(&crc.to_le_bytes());
    {
        let mut f = File::create(&tmp)?;
        f.write_all(&b)?;
        f.sync_all()?;
    }
    std::fs::rename(&tmp, path)?;
    sync_dir(path.parent().unwrap_or(Path::new(".")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pipeline::disk::record::Prepared;
    use crate::signal::Signal;

    /// Records `ids` (payload byte `fill`, or the id when `None`) as a segment's bytes, and
    /// where each starts.
    fn records(ids: std::ops::Range<u64>, fill: Option<u8>) -> (Vec<u8>, Vec<u64>) {
        let (mut v, mut offsets) = (Vec::new(), Vec::new());
        for id in ids {
            offsets.push(v.len() as u64);
            let payload = Bytes::from(vec![fill.unwrap_or(id as u8); 100 + id as usize]);
            Prepared::new(0, 1, Signal::Traces, 1, Bytes::new(), payload).write_to(id, &mut v);
        }
        (v, offsets)
    }

    fn write_records(path: &Path, ids: std::ops::Range<u64>) -> Vec<u64> {
        let (v, offsets) = records(ids, None);
        std::fs::write(path, &v).unwrap();
        offsets
    }

    fn ids(path: &Path) -> (Vec<u64>, u64) {
        let len = std::fs::metadata(path).unwrap().len();
        let mut r = SegmentReader::open(path).unwrap();
        let (mut at, mut out, mut bad) = (0, Vec::new(), 0);
        loop {
            match r.step(at, len).unwrap() {
                Step::Record(rec, next) => {
                    out.push(rec.meta.id);
                    at = next;
                }
                Step::End => break,
                Step::Corrupt { resume, .. } => {
                    bad += 1;
                    at = resume;
                }
            }
        }
        (out, bad)
    }

    #[test]
    fn a_flipped_byte_skips_one_record_and_the_rest_are_read() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(1));
        let offsets = write_records(&p, 1..11);
        let mut b = std::fs::read(&p).unwrap();
        b[offsets[4] as usize + 40] ^= 0xff;
        std::fs::write(&p, &b).unwrap();
        assert_eq!(ids(&p), (vec![1, 2, 3, 4, 6, 7, 8, 9, 10], 1));
        let s = scan(&p, 1).unwrap();
        assert_eq!((s.last_id, s.corrupt, s.records, s.valid_end), (Some(10), 1, 9, b.len() as u64));
    }

    #[test]
    fn a_damaged_length_is_resynchronised_by_the_magic() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(1));
        let offsets = write_records(&p, 1..6);
        let mut b = std::fs::read(&p).unwrap();
        b[offsets[1] as usize + 5] = 0x7f; // len now huge
        std::fs::write(&p, &b).unwrap();
        assert_eq!(ids(&p), (vec![1, 3, 4, 5], 1));
    }

    #[test]
    fn a_torn_tail_is_found() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(1));
        let offsets = write_records(&p, 1..6);
        let b = std::fs::read(&p).unwrap();
        std::fs::write(&p, &b[..offsets[4] as usize + 30]).unwrap();
        let s = scan(&p, 1).unwrap();
        assert_eq!((s.last_id, s.corrupt, s.valid_end), (Some(4), 0, offsets[4]));
    }

    #[test]
    fn a_spare_files_old_records_end_the_segment_and_a_torn_write_over_them_too() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(20));
        let old = write_records(&p, 1..11);
        let mut b = std::fs::read(&p).unwrap();
        let (new, _) = records(20..23, Some(9));
        b[..new.len()].copy_from_slice(&new);
        std::fs::write(&p, &b).unwrap();
        let s = scan(&p, 20).unwrap();
        assert_eq!((s.last_id, s.records, s.corrupt, s.valid_end, s.stale), (Some(22), 3, 0, new.len() as u64, true));
        // The third new record torn half-way: the next readable record is an old one.
        let torn = old.iter().find(|&&o| o > new.len() as u64).copied().unwrap();
        b[new.len() - 50..torn as usize].fill(0xEE);
        std::fs::write(&p, &b).unwrap();
        let s = scan(&p, 20).unwrap();
        assert_eq!((s.last_id, s.records, s.corrupt, s.stale), (Some(21), 2, 0, true), "a torn tail, not damage");
        assert!(belongs(20, 20, None) && belongs(21, 20, Some(20)));
        assert!(!belongs(19, 20, None) && !belongs(21, 20, Some(21)));
    }

    #[test]
    fn garbage_and_empty_files_read_as_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(file_name(1));
        std::fs::write(&p, b"").unwrap();
        assert_eq!(scan(&p, 1).unwrap(), Scan::default());
        std::fs::write(&p, vec![0x57u8; 5000]).unwrap();
        assert_eq!(scan(&p, 1).unwrap().last_id, None);
        let mut g = b"WEIR".to_vec();
        g.extend(vec![0xffu8; 3000]);
        std::fs::write(&p, g).unwrap();
        assert_eq!(scan(&p, 1).unwrap().last_id, None);
    }

    #[test]
    fn cursors_round_trip_and_damage_is_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("otlp");
        assert_eq!(read_cursor(&p), Ok(None));
        write_cursor(&p, 12345).unwrap();
        assert_eq!(read_cursor(&p), Ok(Some(12345)));
        let mut b = std::fs::read(&p).unwrap();
        b[3] ^= 1;
        std::fs::write(&p, &b).unwrap();
        assert!(read_cursor(&p).is_err());
        std::fs::write(&p, b"xx").unwrap();
        assert!(read_cursor(&p).is_err());
    }
}
