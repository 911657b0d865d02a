//! The writer thread: group commit.
//!
//! It takes every append waiting (up to [`GROUP_BYTES`], handed over through the
//! [`super::inbox`]); with `on_ack`, while admitted requests are still on their way, it
//! waits up to about one commit for them (see [`super::pace`]). It writes them with one
//! `pwritev` (direct: aligned writes of up to 2 MiB, see [`super::direct`]) and, with
//! `sync: on_ack`, one `fdatasync`, then answers them all: an fsync costs once per
//! group, however many requests share it. With `interval` it answers after the write (the data is in the
//! page cache: a crash of weir loses nothing, a power loss up to one interval) and syncs
//! on a timer; with `none` it never syncs but at shutdown and segment ends.
//!
//! A failed write or sync answers the whole group with [`AppendError::Io`] and cuts the
//! file back to where the group began (so no half record stays); after a failed sync,
//! or a failed cut, the segment is sealed where the group began and the next group
//! starts a new file. Nothing is acknowledged that was not written, and the thread never
//! exits on an error: once space returns, the next group succeeds.

use super::direct::{self, DirectFile};
use super::inbox::{First, Inbox, GROUP_BYTES};
use super::pace::Pace;
use super::spare::Spares;
use super::{segment, Append, AppendError, Seg, Shared};
use crate::config::SyncMode;
use crate::telemetry::names;
use std::fs::File;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The writer's file operations: the real ones, or (tests) ones that fail on demand,
/// since a failed fsync or EIO cannot be produced on a real disk at will.
pub(crate) trait SegmentFiles: Send + Sync {
    /// Opens the segment file at `path` for writing: created, or emptied when `truncate`,
    /// else (a spare file written over) as it is.
    fn create(&self, path: &Path, truncate: bool) -> std::io::Result<Box<dyn SegmentFile>>;
    /// fsyncs the queue directory.
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()>;
    /// Segments opened from now on are written through the page cache.
    fn no_direct(&self) {}
}

/// One open segment file.
pub(crate) trait SegmentFile: Send {
    /// Writes all of `parts`, in order, at `offset`; returns where the file's written
    /// bytes now end (past the parts when a direct write padded its last block).
    fn write_parts_at(&mut self, parts: Vec<&[u8]>, offset: u64) -> std::io::Result<u64>;
    /// fdatasync.
    fn sync_data(&self) -> std::io::Result<()>;
    /// Truncates to `len`.
    fn set_len(&mut self, len: u64) -> std::io::Result<()>;
    /// Whether writes skip the page cache.
    fn direct(&self) -> bool {
        false
    }
}

/// The real file system: with `direct`, segments are written with `O_DIRECT` where the
/// file system takes it (see [`super::direct`]), else through the page cache.
pub(crate) struct RealFiles {
    direct: AtomicBool,
}

impl RealFiles {
    pub(crate) fn new(direct: bool) -> Self {
        RealFiles { direct: AtomicBool::new(direct) }
    }
}

impl SegmentFiles for RealFiles {
    fn create(&self, path: &Path, truncate: bool) -> std::io::Result<Box<dyn SegmentFile>> {
        if self.direct.load(Ordering::Relaxed) {
            if let Some(f) = direct::open(path, truncate)? {
                return Ok(Box::new(DirectFile::new(f)));
            }
            self.direct.store(false, Ordering::Relaxed);
            tracing::info!(segment = %path.display(), "the queue's file system takes no direct I/O; segments are written through the page cache");
        }
        Ok(Box::new(std::fs::OpenOptions::new().create(true).truncate(truncate).write(true).open(path)?))
    }
    fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
        segment::sync_dir(dir)
    }
    fn no_direct(&self) {
        if self.direct.swap(false, Ordering::Relaxed) {
            tracing::warn!("the queue's file system refused a direct write; segments are written through the page cache from the next one");
        }
    }
}

impl SegmentFile for File {
    fn write_parts_at(&mut self, parts: Vec<&[u8]>, offset: u64) -> std::io::Result<u64> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        write_parts_at(self, parts, offset)?;
        Ok(offset + len)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        File::sync_data(self)
    }
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        File::set_len(self, len)
    }
}

impl SegmentFile for DirectFile {
    fn write_parts_at(&mut self, parts: Vec<&[u8]>, offset: u64) -> std::io::Result<u64> {
        DirectFile::write_parts_at(self, &parts, offset)
    }
    fn sync_data(&self) -> std::io::Result<()> {
        DirectFile::sync_data(self)
    }
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        DirectFile::set_len(self, len)
    }
    fn direct(&self) -> bool {
        true
    }
}

pub(super) struct Writer {
    shared: Arc<Shared>,
    file: Box<dyn SegmentFile>,
    files: Arc<dyn SegmentFiles>,
    /// Bytes written to the active segment.
    offset: u64,
    /// The active file's length: past `offset` when it is a spare file written over.
    file_len: u64,
    next_id: u64,
    last_sync: Instant,
    unsynced: bool,
    /// The active segment must not take more records (a sync or a cut failed).
    broken: bool,
    pace: Pace,
}

fn kind(e: &std::io::Error) -> &'static str {
    match e.raw_os_error() {
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => "no_space",
        _ => "io",
    }
}

impl Writer {
    pub(super) fn new(
        shared: Arc<Shared>,
        files: Arc<dyn SegmentFiles>,
        (file, file_len): (Box<dyn SegmentFile>, u64),
        next_id: u64,
    ) -> Self {
        shared.direct.store(file.direct(), Ordering::Relaxed);
        Writer {
            shared,
            file,
            files,
            offset: 0,
            file_len,
            next_id,
            last_sync: Instant::now(),
            unsynced: false,
            broken: false,
            pace: Pace::default(),
        }
    }

    pub(super) fn run(mut self, inbox: &Inbox) {
        let mode = self.shared.config.sync;
        let interval = self.shared.config.sync_interval;
        loop {
            let wait = match mode {
                SyncMode::Interval if self.unsynced => interval.saturating_sub(self.last_sync.elapsed()),
                _ => Duration::from_secs(3600),
            };
            match inbox.wait_first(wait) {
                First::Got => {}
                First::TimedOut => {
                    if self.unsynced {
                        let _ = self.sync();
                    }
                    continue;
                }
                First::Closed => break,
            }
            let group = self.gather(inbox, mode);
            self.commit(group);
        }
        let cut = self.cut_to_length();
        if self.unsynced || mode == SyncMode::None || cut {
            let _ = self.sync();
        }
        tracing::debug!("disk queue writer stopped");
    }

    /// The next group: every append waiting (up to [`GROUP_BYTES`]), and with `on_ack`
    /// those that come while admitted requests are still on their way, within the pace's
    /// window.
    fn gather(&self, inbox: &Inbox, mode: SyncMode) -> Vec<Append> {
        let mut group = Vec::new();
        let bytes = inbox.take(&mut group);
        if mode != SyncMode::OnAck {
            return group;
        }
        let mut waited = Duration::ZERO;
        if bytes < GROUP_BYTES && self.shared.on_the_way() > 0 {
            let t = Instant::now();
            inbox.gather_until(t + self.pace.window(), &mut group, bytes, || self.shared.on_the_way());
            waited = t.elapsed();
        }
        self.shared.group_wait_us.store(waited.as_micros() as u64, Ordering::Relaxed);
        metrics::gauge!(names::DISK_GROUP_WAIT).set(waited.as_secs_f64());
        group
    }

    fn fail(&self, group: Vec<Append>, e: &std::io::Error, what: &str) {
        let k = kind(e);
        if k == "no_space" {
            // Their room is worth more as room now.
            self.shared.spares.clear();
        }
        metrics::counter!(names::DISK_WRITE_ERRORS, "kind" => k).increment(1);
        tracing::error!(error = %e, kind = k, requests = group.len(), what, "disk queue write failed; requests refused with 503");
        let msg = format!("{what}: {e}");
        for a in group {
            let _ = a.done.send(Err(AppendError::Io(msg.clone())));
        }
    }

    fn sync(&mut self) -> std::io::Result<()> {
        let t = Instant::now();
        let r = self.file.sync_data();
        metrics::histogram!(names::DISK_FSYNC).record(t.elapsed().as_secs_f64());
        self.shared.syncs.fetch_add(1, Ordering::Relaxed);
        self.last_sync = Instant::now();
        if r.is_ok() {
            self.unsynced = false;
        }
        r
    }

    fn commit(&mut self, group: Vec<Append>) {
        if self.broken || self.offset >= self.shared.config.segment_bytes {
            if let Err(e) = self.roll() {
                return self.fail(group, &e, "cannot start a new segment");
            }
        }
        let start = self.offset;
        let first_id = self.next_id;
        let began = Instant::now();
        // One pwritev for the group, straight from the requests' buffers: no copy into
        // a group buffer, so a large request is not copied once more.
        let heads: Vec<[u8; 20]> = group.iter().enumerate().map(|(i, a)| a.prepared.head(first_id + i as u64)).collect();
        let mut parts: Vec<&[u8]> = Vec::with_capacity(group.len() * 4);
        for (a, h) in group.iter().zip(&heads) {
            let p = &a.prepared;
            parts.extend([&h[..], &p.rest_head[..], &p.tenant[..], &p.payload[..]].into_iter().filter(|s| !s.is_empty()));
        }
        let len: u64 = group.iter().map(|a| a.prepared.size()).sum();
        match self.file.write_parts_at(parts, start) {
            Ok(end) => self.file_len = self.file_len.max(end),
            Err(e) => {
                // A partial write may have reached as far as the group's last block: if
                // the cut fails, sealing cuts again.
                self.file_len = self.file_len.max((start + len).next_multiple_of(direct::ALIGN as u64));
                self.cut(start);
                if self.file.direct() && e.raw_os_error() == Some(libc::EINVAL) {
                    // Direct I/O taken at open and refused now (a larger alignment than
                    // 4 KiB): this segment ends, and the next is written through the cache.
                    self.files.no_direct();
                    self.broken = true;
                }
                return self.fail(group, &e, "write");
            }
        }
        self.unsynced = true;
        let must_sync = match self.shared.config.sync {
            SyncMode::OnAck => true,
            SyncMode::Interval => self.last_sync.elapsed() >= self.shared.config.sync_interval,
            SyncMode::None => false,
        };
        if must_sync {
            if let Err(e) = self.sync() {
                // After a failed fsync the page cache's state is unknown: this group is
                // refused, and the segment ends where it began.
                self.cut(start);
                self.broken = true;
                return self.fail(group, &e, "fsync");
            }
            self.pace.committed(began.elapsed());
        }
        // Counted here, before readers can export them, and not by the waiting handler: a
        // client may hang up (dropping its handler) now, and its items will still be exported.
        for a in &group {
            let m = &a.prepared.meta;
            metrics::counter!(names::ITEMS_ACCEPTED, "signal" => m.signal.as_str()).increment(u64::from(m.items));
        }
        let n = group.len() as u64;
        self.offset += len;
        self.file_len = self.file_len.max(self.offset);
        self.next_id += n;
        self.shared.bytes.fetch_add(len, Ordering::AcqRel);
        {
            let mut segs = self.shared.segs.lock().unwrap_or_else(|e| e.into_inner());
            // In memory before readers can see the new length, so a caught-up reader never
            // misses them and reads them back.
            if let (Some(seg), true) = (segs.list.back(), self.shared.tail.enabled()) {
                self.keep_in_memory(&group, seg.first_id, start, first_id);
            }
            segs.next_id = self.next_id;
            if let Some(s) = segs.list.back_mut() {
                s.len = self.offset;
            }
        }
        self.shared.published.send_modify(|v| *v = self.next_id);
        metrics::counter!(names::DISK_APPENDED_BYTES).increment(len);
        metrics::histogram!(names::DISK_GROUP).record(n as f64);
        metrics::gauge!(names::DISK_BYTES).set(self.shared.bytes.load(Ordering::Relaxed) as f64);
        for c in &self.shared.cursors {
            c.gauges(self.next_id - 1);
        }
        self.shared.records_gauge();
        for a in group {
            let _ = a.done.send(Ok(()));
        }
    }

    /// Hands the group's records to the readers' in-memory tail, where they were written:
    /// segment `seg` from offset `start`, ids from `first_id`.
    fn keep_in_memory(&self, group: &[Append], seg: u64, start: u64, first_id: u64) {
        let taken = self.shared.cursors.iter().map(|c| c.taken.load(Ordering::Acquire)).min().unwrap_or(u64::MAX);
        let mut at = start;
        let records = group.iter().enumerate().map(|(i, a)| {
            let next = at + a.prepared.size();
            let entry = (seg, at, next, a.prepared.record(first_id + i as u64));
            at = next;
            entry
        });
        self.shared.tail.push(records, taken);
    }

    /// Cuts the active file back to `start` after a failed group; a failed cut seals it.
    fn cut(&mut self, start: u64) {
        match self.file.set_len(start) {
            Ok(()) => self.file_len = start,
            Err(e) => {
                tracing::error!(error = %e, "cannot cut a failed write off the segment; sealing it");
                self.broken = true;
            }
        }
    }

    /// Cuts a spare file written over to what this segment wrote, so its old records do
    /// not follow a sealed segment; true if it cut. A failed cut is only logged: readers
    /// and the start-up scan know old records by their ids.
    fn cut_to_length(&mut self) -> bool {
        if self.file_len <= self.offset {
            return false;
        }
        match self.file.set_len(self.offset) {
            Ok(()) => self.file_len = self.offset,
            Err(e) => tracing::warn!(error = %e, "cannot cut a reused segment file to its length"),
        }
        true
    }

    /// Seals the active segment and starts a new one at `next_id`. An empty active
    /// segment is replaced (it has the same name: no record was written since it began).
    fn roll(&mut self) -> std::io::Result<()> {
        let cut = self.cut_to_length();
        if !self.broken || cut {
            if let Err(e) = self.sync() {
                self.broken = true;
                return Err(e);
            }
        }
        let path = self.shared.dir.join(segment::file_name(self.next_id));
        let (file, file_len) = start_segment(&*self.files, &self.shared.spares, &path)?;
        if self.shared.config.sync != SyncMode::None {
            self.files.sync_dir(&self.shared.dir)?;
        }
        let mut segs = self.shared.segs.lock().unwrap_or_else(|e| e.into_inner());
        if self.offset == 0 {
            segs.list.pop_back();
        } else if let Some(s) = segs.list.back_mut() {
            s.len = self.offset;
        }
        segs.list.push_back(Seg { first_id: self.next_id, path, len: 0, max_id: 0 });
        let n = segs.list.len();
        drop(segs);
        metrics::gauge!(names::DISK_SEGMENTS).set(n as f64);
        self.shared.direct.store(file.direct(), Ordering::Relaxed);
        self.file = file;
        self.file_len = file_len;
        self.offset = 0;
        self.broken = false;
        Ok(())
    }
}

/// Opens a new segment at `path`, over a spare file when there is one; returns it and
/// its length (that of the spare's old content).
pub(super) fn start_segment(files: &dyn SegmentFiles, spares: &Spares, path: &Path) -> std::io::Result<(Box<dyn SegmentFile>, u64)> {
    if let Some(spare) = spares.take() {
        let reused = std::fs::rename(&spare, path).and_then(|()| Ok((files.create(path, false)?, std::fs::metadata(path)?.len())));
        match reused {
            Ok(v) => {
                metrics::counter!(names::DISK_REUSED).increment(1);
                return Ok(v);
            }
            Err(e) => {
                tracing::warn!(spare = %spare.display(), error = %e, "cannot reuse a spare segment file; creating one");
                let _ = std::fs::remove_file(&spare);
            }
        }
    }
    Ok((files.create(path, true)?, 0))
}

/// Writes all of `parts`, in order, at `offset` (pwritev, short writes continued).
fn write_parts_at(file: &File, mut parts: Vec<&[u8]>, mut offset: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    const IOV_MAX: usize = 1024;
    let mut first = 0;
    while first < parts.len() {
        let iov: Vec<libc::iovec> = parts[first..]
            .iter()
            .take(IOV_MAX)
            .map(|p| libc::iovec { iov_base: p.as_ptr() as *mut libc::c_void, iov_len: p.len() })
            .collect();
        // SAFETY: every iovec points into a live slice of `parts` for the whole call.
        let n = unsafe { libc::pwritev(file.as_raw_fd(), iov.as_ptr(), iov.len() as libc::c_int, offset as libc::off_t) };
        if n < 0 {
            let e = std::io::Error::last_os_error();
            if e.kind() == std::io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::WriteZero, "pwritev wrote nothing"));
        }
        let mut n = n as usize;
        offset += n as u64;
        while n > 0 && first < parts.len() {
            let len = parts[first].len();
            if n >= len {
                n -= len;
                first += 1;
            } else {
                parts[first] = &parts[first][n..];
                n = 0;
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_are_written_whole_and_in_order() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = std::fs::OpenOptions::new().create(true).truncate(true).write(true).open(&path).unwrap();
        let a = vec![1u8; 3000];
        let b = vec![2u8; 5];
        let many: Vec<Vec<u8>> = (0..3000).map(|i| vec![(i % 251) as u8; 7]).collect();
        let mut parts: Vec<&[u8]> = vec![&a, &b];
        parts.extend(many.iter().map(|v| &v[..]));
        write_parts_at(&file, parts.clone(), 10).unwrap();
        let got = std::fs::read(&path).unwrap();
        let want: Vec<u8> = std::iter::repeat_n(0u8, 10).chain(parts.concat()).collect();
        assert_eq!(got, want, "more parts than IOV_MAX, at an offset");
    }
}
