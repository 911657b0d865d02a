//! The durable queue (`pipeline.queue.disk`): every admitted request is appended to a
//! segment file as one record before it is acknowledged, and each exporter reads the
//! segments with a cursor of its own.
//!
//! - **Write path** ([`writer`]): one thread appends. Requests that arrive while it writes
//!   or syncs make the next group: one `write` and (with `sync: on_ack`) one `fdatasync`
//!   for the whole group, then every waiting request is answered.
//! - **Read path** ([`reader`]): one thread per exporter reads records in id order,
//!   batches them as the in-memory pipeline does, within the in-memory byte budget, and
//!   hands the batches to that exporter's workers. A batch is acknowledged when its
//!   export ends; the cursor (the id up to which every record is acknowledged) is written
//!   to `cursors/<exporter>` (temp file, fsync, rename, directory fsync) at most every
//!   100 ms. A segment is deleted only when every exporter's *written* cursor has passed
//!   it, so a crash at any point finds each record either on disk or acknowledged.
//! - **Start** ([`DiskQueue::open`]): the last segment is scanned and its torn tail cut;
//!   a new segment is started; readers begin after their cursors (a missing or damaged
//!   cursor starts at the oldest segment: sent again, never lost).
//!
//! Ids are dense, so lag in records is `last id - cursor`.

pub mod ack;
mod direct;
mod inbox;
mod pace;
pub mod reader;
pub mod record;
pub mod segment;
mod spare;
mod tail;
mod writer;

use crate::config::{DiskConfig, SyncMode};
use crate::signal::Payload;
use crate::telemetry::names;
use bytes::Bytes;
use record::Prepared;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// Why a request was not appended.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
pub enum AppendError {
    /// The queue holds `pipeline.queue.disk.max_bytes` (or all but the critical reserve).
    #[error("disk queue is full ({used} of {max} bytes); retry later")]
    Full {
        /// Bytes on disk.
        used: u64,
        /// The bound.
        max: u64,
    },
    /// Writing or syncing failed; nothing of the request counts as stored.
    #[error("disk queue write failed: {0}; retry later")]
    Io(String),
    /// The queue is closed (shutting down).
    #[error("weir is shutting down")]
    Closed,
}

/// A segment file.
#[derive(Debug, Clone)]
pub(crate) struct Seg {
    first_id: u64,
    path: PathBuf,
    /// Bytes readers may read: all of a sealed segment, what is published of the active
    /// (last) one.
    len: u64,
    /// The highest record id a reader found in it (noted when a reader leaves it).
    max_id: u64,
}

/// The segment list; the last one is the active one.
#[derive(Debug)]
pub(crate) struct Segments {
    list: VecDeque<Seg>,
    /// The id the next record gets.
    next_id: u64,
}

/// One exporter's cursor.
#[derive(Debug)]
pub(crate) struct CursorState {
    name: String,
    path: PathBuf,
    /// Written to its file: every record up to this id is acknowledged.
    persisted: AtomicU64,
    /// The first id of the segment its reader is in.
    reading: AtomicU64,
    /// Its reader's acknowledgement window.
    window: Arc<ack::AckWindow>,
    /// The last id its reader has taken (from the disk or from memory).
    taken: AtomicU64,
    /// `weir_queue_exporter_lag_records` and `weir_queue_oldest_record_age_seconds` for
    /// it, registered once (the writer sets them after every group).
    lag: metrics::Gauge,
    age: metrics::Gauge,
}

impl CursorState {
    /// Publishes this exporter's lag (records after its acknowledged id, up to `last_id`)
    /// and the age of its oldest record in export.
    fn gauges(&self, last_id: u64) {
        let acked = self.window.acked().max(self.persisted.load(Ordering::Relaxed));
        self.lag.set(last_id.saturating_sub(acked) as f64);
        self.age.set(self.window.oldest_ts_ms().map_or(0.0, |ts| now_ms().saturating_sub(ts) as f64 / 1000.0));
    }
}

/// What the writer, the readers and the receivers share.
pub(crate) struct Shared {
    dir: PathBuf,
    config: DiskConfig,
    segs: Mutex<Segments>,
    /// Bytes on disk (all segments).
    bytes: AtomicU64,
    /// Bumped when records are published (readers wait on it).
    published: watch::Sender<u64>,
    /// fsyncs done by the writer (group commit shares them).
    syncs: AtomicU64,
    cursors: Vec<Arc<CursorState>>,
    /// Records with smaller ids were written by an earlier run.
    first_new_id: u64,
    non_critical_limit: u64,
    /// The newest records, for readers that are caught up.
    tail: tail::Tail,
    /// Exported segment files kept to be written over.
    spares: spare::Spares,
    /// How long the writer last waited for a group to grow, microseconds.
    group_wait_us: AtomicU64,
    /// The active segment is written with direct I/O.
    direct: std::sync::atomic::AtomicBool,
    /// Appends handed to the writer and not yet answered.
    pending: AtomicU64,
    /// Admitted requests in flight in the whole process (set by the app; none: 0).
    admitted: std::sync::OnceLock<fn() -> usize>,
}

impl Shared {
    /// Admitted requests that have not reached the writer yet: what a group may still
    /// wait for.
    fn on_the_way(&self) -> u64 {
        let admitted = self.admitted.get().map_or(0, |f| f()) as u64;
        admitted.saturating_sub(self.pending.load(Ordering::Relaxed))
    }
}

impl Shared {
    /// The readable length of segment `first_id` and whether it is sealed (not the last);
    /// `None` when it is gone.
    fn seg_state(&self, first_id: u64) -> Option<(u64, bool)> {
        let segs = self.segs.lock().unwrap_or_else(|e| e.into_inner());
        let i = segs.list.iter().position(|s| s.first_id == first_id)?;
        Some((segs.list[i].len, i + 1 < segs.list.len()))
    }

    /// The segment after `first_id`.
    fn seg_after(&self, first_id: u64) -> Option<Seg> {
        let segs = self.segs.lock().unwrap_or_else(|e| e.into_inner());
        segs.list.iter().find(|s| s.first_id > first_id).cloned()
    }

    /// The segment that may hold the record after `cursor`.
    fn seg_for(&self, cursor: u64) -> Option<Seg> {
        let segs = self.segs.lock().unwrap_or_else(|e| e.into_inner());
        segs.list.iter().rev().find(|s| s.first_id <= cursor.saturating_add(1)).or(segs.list.front()).cloned()
    }

    /// Publishes the records on disk (ids are dense: from the oldest segment's first id
    /// to the newest record).
    fn records_gauge(&self) {
        let segs = self.segs.lock().unwrap_or_else(|e| e.into_inner());
        let first = segs.list.front().map_or(segs.next_id, |s| s.first_id);
        metrics::gauge!(names::DISK_RECORDS).set(segs.next_id.saturating_sub(first) as f64);
    }

    /// The id of the newest record (0: none yet).
    fn last_id(&self) -> u64 {
        self.segs.lock().unwrap_or_else(|e| e.into_inner()).next_id - 1
    }

    /// A reader leaves segment `first_id`, whose highest record id was `max_id`, for
    /// segment `next`.
    fn leave(&self, cursor: &CursorState, first_id: u64, max_id: u64, next: u64) {
        {
            let mut segs = self.segs.lock().unwrap_or_else(|e| e.into_inner());
            if let Some(s) = segs.list.iter_mut().find(|s| s.first_id == first_id) {
                s.max_id = s.max_id.max(max_id);
            }
        }
        cursor.reading.store(next, Ordering::Release);
    }

    /// Deletes the segments every exporter's written cursor has passed, oldest first: a
    /// segment goes when every reader has left it and every written cursor covers both
    /// the highest id read from it and the id before the next segment's first.
    fn gc(&self) {
        let Some(min) = self.cursors.iter().map(|c| c.persisted.load(Ordering::Acquire)).min() else { return };
        let Some(left) = self.cursors.iter().map(|c| c.reading.load(Ordering::Acquire)).min() else { return };
        let mut segs = self.segs.lock().unwrap_or_else(|e| e.into_inner());
        let mut removed = false;
        while segs.list.len() >= 2 && left > segs.list[0].first_id && segs.list[1].first_id - 1 <= min && segs.list[0].max_id <= min {
            let Some(s) = segs.list.pop_front() else { break };
            match self.spares.retire(&s.path) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(segment = %s.path.display(), error = %e, "cannot delete an exported segment"),
            }
            self.bytes.fetch_sub(s.len.min(self.bytes.load(Ordering::Relaxed)), Ordering::AcqRel);
            removed = true;
        }
        let n = segs.list.len();
        drop(segs);
        if removed {
            self.records_gauge();
            let _ = segment::sync_dir(&self.dir);
            metrics::gauge!(names::DISK_SEGMENTS).set(n as f64);
            metrics::gauge!(names::DISK_BYTES).set(self.bytes.load(Ordering::Relaxed) as f64);
        }
    }
}

/// A message to the writer thread.
pub(crate) struct Append {
    prepared: Prepared,
    done: oneshot::Sender<Result<(), AppendError>>,
}

/// The durable queue's handle.
pub struct DiskQueue {
    shared: Arc<Shared>,
    inbox: Arc<inbox::Inbox>,
    writer: Mutex<Option<std::thread::JoinHandle<()>>>,
    stop: watch::Sender<bool>,
    readers: Mutex<Vec<std::thread::JoinHandle<()>>>,
    /// Held open for the lock on `<dir>/lock`.
    _lock: std::fs::File,
}

/// A problem opening the queue directory.
#[derive(Debug, thiserror::Error)]
#[error("disk queue at {path}: {message}")]
pub struct OpenError {
    /// The directory.
    pub path: String,
    /// What went wrong.
    pub message: String,
}

fn now_ms() -> u64 {
    std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// A file name for an exporter's cursor: its name with anything but `[A-Za-z0-9._-]`
/// replaced.
fn cursor_file(name: &str) -> String {
    name.chars().map(|c| if c.is_ascii_alphanumeric() || "._-".contains(c) { c } else { '_' }).collect()
}

impl std::fmt::Debug for DiskQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DiskQueue").field("path", &self.shared.dir).field("bytes", &self.bytes()).finish_non_exhaustive()
    }
}

/// One append counted in [`Shared::pending`] until it is answered (or its caller gone).
struct Pending<'a>(&'a AtomicU64);

impl<'a> Pending<'a> {
    fn new(n: &'a AtomicU64) -> Self {
        n.fetch_add(1, Ordering::Relaxed);
        Pending(n)
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl DiskQueue {
    /// Opens (or creates) the queue in `config.path` for these exporters, recovers what
    /// an earlier run left, and starts the writer thread. Non-critical requests may fill
    /// all but `critical_reserve` of `max_bytes`.
    pub fn open(config: &DiskConfig, exporters: &[String], critical_reserve: f64) -> Result<Arc<DiskQueue>, OpenError> {
        Self::open_with(
            config,
            exporters,
            critical_reserve,
            Arc::new(writer::RealFiles::new(config.direct_io && config.sync == SyncMode::OnAck)),
        )
    }

    /// [`DiskQueue::open`] with the writer's file operations given (tests inject
    /// failures this way).
    pub(crate) fn open_with(
        config: &DiskConfig,
        exporters: &[String],
        critical_reserve: f64,
        files: Arc<dyn writer::SegmentFiles>,
    ) -> Result<Arc<DiskQueue>, OpenError> {
        let dir = config.path.clone();
        let err = |m: String| OpenError { path: dir.display().to_string(), message: m };
        let cursor_dir = dir.join("cursors");
        std::fs::create_dir_all(&cursor_dir).map_err(|e| err(format!("cannot create the directory: {e}")))?;
        let lock = lock_dir(&dir).map_err(err)?;

        // Cursors first: a new segment must start after every id a cursor has passed.
        let mut cursors = Vec::new();
        let mut max_cursor = 0;
        for name in exporters {
            let path = cursor_dir.join(cursor_file(name));
            let at = match segment::read_cursor(&path) {
                Ok(Some(id)) => id,
                Ok(None) => 0,
                Err(why) => {
                    tracing::warn!(exporter = %name, file = %path.display(), why, "damaged cursor; this exporter reads from the oldest segment again");
                    metrics::counter!(names::DISK_CURSOR_RESETS, "exporter" => name.clone()).increment(1);
                    0
                }
            };
            max_cursor = max_cursor.max(at);
            cursors.push(Arc::new(CursorState {
                name: name.clone(),
                path,
                persisted: AtomicU64::new(at),
                reading: AtomicU64::new(0),
                window: Arc::new(ack::AckWindow::starting_at(at)),
                taken: AtomicU64::new(at),
                lag: metrics::gauge!(names::DISK_LAG_RECORDS, "exporter" => name.clone()),
                age: metrics::gauge!(names::DISK_OLDEST_AGE, "exporter" => name.clone()),
            }));
        }

        let (list, last_id, bytes) = recover(&dir, max_cursor).map_err(err)?;
        let mut list = list;
        let next_id = last_id + 1;
        let active = dir.join(segment::file_name(next_id));
        let spares = spare::Spares::open(&dir).map_err(|e| err(format!("cannot list spare segment files: {e}")))?;
        let file = writer::start_segment(&*files, &spares, &active)
            .map_err(|e| err(format!("cannot create segment {}: {e}", active.display())))?;
        files.sync_dir(&dir).map_err(|e| err(format!("cannot sync the directory: {e}")))?;
        list.push_back(Seg { first_id: next_id, path: active, len: 0, max_id: 0 });
        let backlog =
            next_id - 1 - cursors.iter().map(|c| c.persisted.load(Ordering::Relaxed)).min().unwrap_or(next_id - 1).min(next_id - 1);
        tracing::info!(dir = %dir.display(), segments = list.len(), bytes, next_id, backlog_records = backlog, sync = sync_word(config.sync), "disk queue opened");
        metrics::gauge!(names::DISK_SEGMENTS).set(list.len() as f64);
        metrics::gauge!(names::DISK_BYTES).set(bytes as f64);

        for c in &cursors {
            let at = c.persisted.load(Ordering::Relaxed).saturating_add(1);
            let first = list.iter().rev().find(|s| s.first_id <= at).or(list.front()).map_or(0, |s| s.first_id);
            c.reading.store(first, Ordering::Relaxed);
        }
        let (published, _) = watch::channel(0u64);
        let non_critical_limit = (config.max_bytes as f64 * (1.0 - critical_reserve)) as u64;
        let shared = Arc::new(Shared {
            dir: dir.clone(),
            config: config.clone(),
            segs: Mutex::new(Segments { list, next_id }),
            bytes: AtomicU64::new(bytes),
            published,
            syncs: AtomicU64::new(0),
            cursors,
            first_new_id: next_id,
            non_critical_limit,
            tail: tail::Tail::default(),
            spares,
            group_wait_us: AtomicU64::new(0),
            direct: std::sync::atomic::AtomicBool::new(false),
            pending: AtomicU64::new(0),
            admitted: std::sync::OnceLock::new(),
        });
        shared.gc();
        shared.records_gauge();
        let inbox = Arc::new(inbox::Inbox::default());
        let writer = writer::Writer::new(Arc::clone(&shared), files, file, next_id);
        let end = inbox::WriterEnd(Arc::clone(&inbox));
        let handle = std::thread::Builder::new()
            .name("weir-queue-writer".into())
            .spawn(move || {
                let end = end;
                writer.run(&end.0)
            })
            .map_err(|e| err(format!("cannot start the writer thread: {e}")))?;
        let (stop, _) = watch::channel(false);
        Ok(Arc::new(DiskQueue { shared, inbox, writer: Mutex::new(Some(handle)), stop, readers: Mutex::new(Vec::new()), _lock: lock }))
    }

    /// Keeps up to `bytes` of the newest records in memory for readers that are caught
    /// up (0: every record is read back from its segment). Set before the readers start.
    pub fn keep_tail(&self, bytes: usize) {
        self.shared.tail.set_limit(bytes);
    }

    /// Starts exporter `index`'s reader thread, feeding `tx`; batches hold at most
    /// `memory` bytes read ahead.
    pub fn start_reader(
        &self,
        index: usize,
        batch: &crate::config::BatchConfig,
        memory: usize,
        split_tenants: bool,
        tx: tokio::sync::mpsc::Sender<Arc<super::batch::Batch>>,
    ) -> std::io::Result<()> {
        let window = Arc::clone(&self.shared.cursors[index].window);
        let r = reader::Reader::new(Arc::clone(&self.shared), index, window, batch, memory, tx, self.stop.subscribe())
            .split_tenants(split_tenants);
        let handle = tokio::runtime::Handle::current();
        let name = format!("weir-queue-read-{index}");
        let t = std::thread::Builder::new().name(name).spawn(move || handle.block_on(r.run()))?;
        self.readers.lock().unwrap_or_else(|e| e.into_inner()).push(t);
        Ok(())
    }

    /// Whether `bytes` more would not fit now (`critical` may use the whole bound).
    pub fn would_refuse(&self, bytes: u64, critical: bool) -> bool {
        let limit = if critical { self.shared.config.max_bytes } else { self.limit() };
        self.shared.bytes.load(Ordering::Relaxed).saturating_add(bytes) > limit
    }

    fn limit(&self) -> u64 {
        self.shared.non_critical_limit
    }

    /// What `/debug/queue` shows: the segments, the next id, and each exporter's cursor,
    /// acknowledged id and lag.
    pub fn debug(&self) -> serde_json::Value {
        let (segments, next_id) = {
            let segs = self.shared.segs.lock().unwrap_or_else(|e| e.into_inner());
            let list: Vec<_> = segs.list.iter().map(|s| serde_json::json!({"first_id": s.first_id, "bytes": s.len})).collect();
            (list, segs.next_id)
        };
        let exporters: Vec<_> = self
            .shared
            .cursors
            .iter()
            .map(|c| {
                let window = Some(&c.window);
                let acked = window.map_or(0, |w| w.acked());
                serde_json::json!({
                    "exporter": c.name,
                    "cursor_written": c.persisted.load(Ordering::Relaxed),
                    "acknowledged": acked,
                    "lag_records": (next_id - 1).saturating_sub(acked.max(c.persisted.load(Ordering::Relaxed))),
                    "batches_in_export": window.map_or(0, |w| w.pending()),
                    "oldest_in_export_age_seconds": window.and_then(|w| w.oldest_ts_ms()).map(|t| now_ms().saturating_sub(t) as f64 / 1000.0),
                })
            })
            .collect();
        serde_json::json!({
            "path": self.shared.dir.display().to_string(),
            "sync": sync_word(self.shared.config.sync),
            "bytes": self.bytes(),
            "max_bytes": self.shared.config.max_bytes,
            "fill": self.fill(),
            "next_id": next_id,
            "segments": segments,
            "spare_files": self.shared.spares.len(),
            "group_wait_seconds": self.shared.group_wait_us.load(Ordering::Relaxed) as f64 / 1e6,
            "direct_io": self.shared.direct.load(Ordering::Relaxed),
            "exporters": exporters,
        })
    }

    /// fsyncs the writer has done.
    pub fn syncs(&self) -> u64 {
        self.shared.syncs.load(Ordering::Relaxed)
    }

    /// Bytes on disk.
    pub fn bytes(&self) -> u64 {
        self.shared.bytes.load(Ordering::Relaxed)
    }

    /// The fill ratio (bytes on disk / `max_bytes`).
    pub fn fill(&self) -> f64 {
        self.bytes() as f64 / self.shared.config.max_bytes as f64
    }

    /// Appends one request; resolves when it is stored as `sync` promises (on disk and
    /// fsynced with `on_ack`, written to the file otherwise).
    pub async fn append(&self, payload: &Payload, critical: bool, tenant: Option<&Arc<str>>) -> Result<(), AppendError> {
        let bytes = payload.to_bytes();
        // The tenant's name shared, not copied.
        let tenant = tenant.map_or_else(Bytes::new, |t| Bytes::from_owner(TenantBytes(Arc::clone(t))));
        let prepared = Prepared::new(now_ms(), payload.item_count() as u32, payload.signal(), if critical { 2 } else { 1 }, tenant, bytes);
        if self.would_refuse(prepared.size(), critical) {
            return Err(AppendError::Full { used: self.bytes(), max: if critical { self.shared.config.max_bytes } else { self.limit() } });
        }
        let (done, answer) = oneshot::channel();
        let _pending = Pending::new(&self.shared.pending);
        if self.inbox.send(Append { prepared, done }, || self.shared.on_the_way()).is_none() {
            return Err(AppendError::Closed);
        }
        answer.await.unwrap_or(Err(AppendError::Closed))
    }

    /// Where the writer learns how many admitted requests are in flight (see
    /// docs/durable-queue.md#group-commit); without it, groups never wait.
    pub fn count_admitted_with(&self, f: fn() -> usize) {
        let _ = self.shared.admitted.set(f);
    }

    /// Shutdown: stops appending (the writer writes and syncs what it has and exits),
    /// stops the readers, waits up to `grace` for exports in flight to end, and writes
    /// every cursor. What is not acknowledged stays on disk for the next start.
    pub async fn shutdown(&self, grace: Duration) {
        self.inbox.close();
        let writer = self.writer.lock().unwrap_or_else(|e| e.into_inner()).take();
        if let Some(w) = writer {
            let _ = tokio::task::spawn_blocking(move || w.join()).await;
        }
        let _ = self.stop.send(true);
        let readers: Vec<_> = std::mem::take(&mut *self.readers.lock().unwrap_or_else(|e| e.into_inner()));
        let deadline = tokio::time::Instant::now() + grace;
        while self.shared.cursors.iter().any(|c| c.window.pending() > 0) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for t in readers {
            let _ = tokio::task::spawn_blocking(move || t.join()).await;
        }
        for c in &self.shared.cursors {
            persist(c, c.window.acked());
        }
        tracing::info!(bytes = self.bytes(), "disk queue closed; what is not exported is sent after the next start");
    }
}

/// Finds the segments an earlier run left: the newest ones are scanned (every record
/// checked) back to the first that holds a readable record, whose torn tail, if any, is
/// cut off; newer files without a readable record (garbage, or created just before a
/// crash) are removed. Older segments are read as they are; their damage is found and
/// skipped by the readers. Returns the segments, the highest id seen (at least
/// `min_last`) and the bytes on disk.
fn recover(dir: &Path, min_last: u64) -> Result<(VecDeque<Seg>, u64, u64), String> {
    let mut found = segment::list(dir).map_err(|e| format!("cannot list segments: {e}"))?;
    let mut last_id = min_last;
    while let Some((first_id, path)) = found.last().cloned() {
        let len = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?.len();
        let s = segment::scan(&path, first_id).map_err(|e| format!("{}: {e}", path.display()))?;
        if s.corrupt > 0 {
            metrics::counter!(names::DISK_CORRUPT, "exporter" => "recovery").increment(s.corrupt);
        }
        last_id = last_id.max(first_id.saturating_sub(1));
        let Some(id) = s.last_id else {
            // Only a spare file's old records: a segment started just before the crash.
            if len > 0 && !s.stale {
                tracing::warn!(segment = %path.display(), bytes = len, "segment without a readable record removed");
                metrics::counter!(names::DISK_CORRUPT, "exporter" => "recovery").increment(1);
            }
            std::fs::remove_file(&path).map_err(|e| format!("cannot remove {}: {e}", path.display()))?;
            found.pop();
            continue;
        };
        if s.valid_end < len {
            let f = std::fs::OpenOptions::new().write(true).open(&path).map_err(|e| format!("{}: {e}", path.display()))?;
            f.set_len(s.valid_end)
                .and_then(|_| f.sync_all())
                .map_err(|e| format!("cannot cut the torn tail of {}: {e}", path.display()))?;
        }
        last_id = last_id.max(id);
        break;
    }
    let mut list = VecDeque::new();
    let mut bytes = 0;
    for (first_id, path) in found {
        let len = std::fs::metadata(&path).map_err(|e| format!("{}: {e}", path.display()))?.len();
        last_id = last_id.max(first_id.saturating_sub(1));
        if len == 0 {
            let _ = std::fs::remove_file(&path);
            continue;
        }
        bytes += len;
        list.push_back(Seg { first_id, path, len, max_id: 0 });
    }
    Ok((list, last_id, bytes))
}

/// A tenant name as the bytes of a record.
struct TenantBytes(Arc<str>);

impl AsRef<[u8]> for TenantBytes {
    fn as_ref(&self) -> &[u8] {
        self.0.as_bytes()
    }
}

/// Writes `c`'s cursor if `acked` is newer than what is written.
pub(crate) fn persist(c: &CursorState, acked: u64) -> bool {
    if acked <= c.persisted.load(Ordering::Acquire) {
        return false;
    }
    match segment::write_cursor(&c.path, acked) {
        Ok(()) => {
            c.persisted.store(acked, Ordering::Release);
            true
        }
        Err(e) => {
            tracing::warn!(exporter = %c.name, error = %e, "cannot write the cursor; records after the last written one are sent again after a restart");
            false
        }
    }
}

/// Takes an exclusive lock on `<dir>/lock`: two weirs on one queue directory would
/// interleave their records.
fn lock_dir(dir: &Path) -> Result<std::fs::File, String> {
    use std::os::fd::AsRawFd;
    let f = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join("lock"))
        .map_err(|e| format!("cannot open the lock file: {e}"))?;
    // SAFETY: flock on a descriptor this function owns.
    let r = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
    if r != 0 {
        return Err("another process holds this queue directory (lock file); each weir needs its own".into());
    }
    Ok(f)
}

/// The sync mode's word, for logs.
pub fn sync_word(m: SyncMode) -> &'static str {
    match m {
        SyncMode::OnAck => "on_ack",
        SyncMode::Interval => "interval",
        SyncMode::None => "none",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::signal::{Encoded, Signal};

    fn config(dir: &Path, sync: SyncMode) -> DiskConfig {
        DiskConfig { path: dir.to_path_buf(), segment_bytes: 1 << 20, sync, ..DiskConfig::default() }
    }

    fn payload(n: u8) -> Payload {
        Payload::Encoded(Encoded::single(Signal::Logs, bytes::Bytes::from(vec![n; 1000]), 1))
    }

    /// `n` appends sent at once, each answered Ok.
    async fn append_together(q: &Arc<DiskQueue>, n: u8) {
        let tasks: Vec<_> = (0..n)
            .map(|i| {
                let q = Arc::clone(q);
                tokio::spawn(async move { q.append(&payload(i), false, None).await })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await.unwrap(), Ok(()));
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_appends_share_fsyncs() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(&config(dir.path(), SyncMode::OnAck), &[], 0.0).unwrap();
        append_together(&q, 200).await;
        let syncs = q.syncs();
        assert!((1..100).contains(&syncs), "200 concurrent on_ack appends took {syncs} fsyncs");
        assert_eq!(q.shared.last_id(), 200);
        q.shutdown(Duration::ZERO).await;
    }

    static ADMITTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

    /// A group waits for admitted requests still on their way, and only for them.
    #[tokio::test]
    async fn a_group_waits_only_while_admitted_requests_are_on_their_way() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(&config(dir.path(), SyncMode::OnAck), &[], 0.0).unwrap();
        q.count_admitted_with(|| ADMITTED.load(Ordering::Relaxed));
        let waited = |q: &DiskQueue| q.debug()["group_wait_seconds"].as_f64().unwrap();
        // Alone (this append is the only admitted request): answered without a wait.
        ADMITTED.store(1, Ordering::Relaxed);
        for i in 0..20 {
            q.append(&payload(i), false, None).await.unwrap();
            assert_eq!(waited(&q), 0.0, "append {i} waited");
        }
        // Nine more admitted and not here yet: the group waits for them, up to its
        // window (twice the recent commit, at most 2 ms), then commits what it has.
        ADMITTED.store(10, Ordering::Relaxed);
        let window = q.append(&payload(0), false, None).await.map(|()| waited(&q)).unwrap();
        // The window is at most 2 ms; a loaded test machine may wake the writer late.
        assert!(window > 0.0 && window < 0.05, "waited {window} s");
        // Nine admitted that arrive together share one group (two at most).
        ADMITTED.store(9, Ordering::Relaxed);
        let syncs = q.syncs();
        append_together(&q, 9).await;
        assert!(q.syncs() - syncs <= 2, "{} fsyncs for nine appends sent together", q.syncs() - syncs);
        ADMITTED.store(0, Ordering::Relaxed);
        q.shutdown(Duration::ZERO).await;
    }

    #[tokio::test]
    async fn records_survive_a_reopen_with_ids_that_go_on() {
        let dir = tempfile::tempdir().unwrap();
        let q = DiskQueue::open(&config(dir.path(), SyncMode::None), &["out".into()], 0.0).unwrap();
        for i in 0..10 {
            q.append(&payload(i), false, Some(&Arc::from("team-a"))).await.unwrap();
        }
        q.shutdown(Duration::ZERO).await;
        drop(q);
        let q = DiskQueue::open(&config(dir.path(), SyncMode::None), &["out".into()], 0.0).unwrap();
        assert_eq!(q.shared.last_id(), 10, "the next id follows the records on disk");
        assert!(q.bytes() > 10_000);
        // Nothing acknowledged: the cursor is still 0 and the backlog is all 10.
        assert_eq!(q.shared.cursors[0].persisted.load(Ordering::Relaxed), 0);
        q.shutdown(Duration::ZERO).await;
        drop(q);
        // A second weir on the same directory is refused while the first holds it.
        let a = DiskQueue::open(&config(dir.path(), SyncMode::None), &[], 0.0).unwrap();
        let e = DiskQueue::open(&config(dir.path(), SyncMode::None), &[], 0.0).unwrap_err();
        assert!(e.message.contains("another process"), "{e}");
        drop(a);
    }

    /// Starts the reader of exporter 0 and takes `n` items from it, acknowledging each batch.
    async fn read_items(q: &Arc<DiskQueue>, n: usize) -> usize {
        let (tx, mut rx) = tokio::sync::mpsc::channel(4);
        let batch = crate::config::BatchConfig { timeout: Duration::from_millis(5), ..Default::default() };
        q.start_reader(0, &batch, 64 << 20, false, tx).unwrap();
        let mut items = 0;
        while items < n {
            let b = tokio::time::timeout(Duration::from_secs(10), rx.recv()).await.expect("a batch").expect("the reader runs");
            items += b.payload.item_count();
            b.finish();
        }
        items
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_caught_up_reader_takes_records_from_memory_and_one_behind_from_disk() {
        let dir = tempfile::tempdir().unwrap();
        // Caught up: the reader runs while records are appended.
        let q = DiskQueue::open(&config(dir.path(), SyncMode::OnAck), &["out".into()], 0.0).unwrap();
        q.keep_tail(8 << 20);
        let reader = tokio::spawn({
            let q = Arc::clone(&q);
            async move { read_items(&q, 300).await }
        });
        tokio::time::sleep(Duration::from_millis(50)).await;
        for i in 0..300u16 {
            q.append(&payload(i as u8), false, None).await.unwrap();
        }
        assert_eq!(reader.await.unwrap(), 300);
        assert_eq!(q.shared.tail.hits(), 300, "every record came from memory");
        assert!(q.shared.tail.bytes() < 8 << 20);
        q.shutdown(Duration::ZERO).await;
        drop(q);
        // Behind: 300 more appended before any reader runs, and the memory kept holds only
        // the newest few, so the reader reads the disk and then catches up.
        let q = DiskQueue::open(&config(dir.path(), SyncMode::OnAck), &["out".into()], 0.0).unwrap();
        q.keep_tail(20_000);
        for i in 0..300u16 {
            q.append(&payload(i as u8), false, None).await.unwrap();
        }
        assert_eq!(read_items(&q, 300).await, 300, "nothing lost to the memory bound");
        let hits = q.shared.tail.hits();
        assert!(hits < 300, "{hits} of 300 from memory: the older ones were read back from disk");
        q.shutdown(Duration::ZERO).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn exported_segments_are_written_over_and_their_old_records_never_read_again() {
        written_over(tempfile::tempdir().unwrap(), SyncMode::None).await;
    }

    /// The same through direct writes (`on_ack`), in a directory on the build's disk
    /// (a tmpfs takes no O_DIRECT): every record read back from what they wrote.
    #[tokio::test]
    async fn direct_writes_over_spare_files_read_back_whole() {
        written_over(direct::scratch().unwrap(), SyncMode::OnAck).await;
    }

    /// What a crash leaves of a segment being written directly (its last block padded
    /// with zeros, not yet cut) scans as its records and nothing more.
    #[tokio::test]
    async fn a_crash_image_of_a_direct_segment_scans_as_its_records() {
        let dir = direct::scratch().unwrap();
        let q = DiskQueue::open(&config(&dir.path().join("q"), SyncMode::OnAck), &["out".into()], 0.0).unwrap();
        assert_eq!(q.debug()["direct_io"], true);
        for i in 0..3 {
            q.append(&payload(i), false, None).await.unwrap();
        }
        let (_, path) = segment::list(&dir.path().join("q")).unwrap().pop().unwrap();
        let image = dir.path().join("image.wq");
        std::fs::copy(&path, &image).unwrap();
        let logical = q.shared.segs.lock().unwrap().list.back().unwrap().len;
        let on_disk = std::fs::metadata(&image).unwrap().len();
        assert!(on_disk > logical && on_disk % direct::ALIGN as u64 == 0, "padded: {on_disk} bytes for {logical}");
        let s = segment::scan(&image, 1).unwrap();
        assert_eq!((s.records, s.corrupt, s.stale, s.valid_end, s.last_id), (3, 0, false, logical, Some(3)));
        q.shutdown(Duration::ZERO).await;
    }

    async fn written_over(dir: tempfile::TempDir, sync: SyncMode) {
        let open = || {
            let q = DiskQueue::open(&config(dir.path(), sync), &["out".into()], 0.0).unwrap();
            q.keep_tail(0); // every record read back from its segment, old bytes behind it
            q
        };
        let q = open();
        assert_eq!(q.debug()["direct_io"], sync == SyncMode::OnAck, "{}", q.debug());
        let reader = tokio::spawn({
            let q = Arc::clone(&q);
            async move { read_items(&q, 6000).await }
        });
        for i in 0..6000u16 {
            q.append(&payload(i as u8), false, None).await.unwrap();
            if i % 500 == 0 {
                tokio::time::sleep(Duration::from_millis(120)).await; // the cursor is written, segments retired
            }
        }
        assert_eq!(reader.await.unwrap(), 6000, "each record once, none of a spare's old ones");
        let reused = q.shared.spares.taken();
        assert!(reused >= 2, "6 MB through 1 MiB segments reused {reused} spare files");
        assert!(q.shared.spares.len() <= spare::KEEP);
        q.shutdown(Duration::ZERO).await;
        drop(q);
        // The active segment was a spare file: cut to its length, so a restart reads on
        // from the cursor and finds no old record.
        for (_, path) in segment::list(dir.path()).unwrap() {
            let first: u64 = path.file_stem().unwrap().to_str().unwrap().parse().unwrap();
            let s = segment::scan(&path, first).unwrap();
            assert!(!s.stale && s.corrupt == 0, "{}: {s:?}", path.display());
        }
        let q = open();
        assert_eq!(q.shared.last_id(), 6000);
        for i in 0..10 {
            q.append(&payload(i), false, None).await.unwrap();
        }
        assert_eq!(read_items(&q, 10).await, 10);
        q.shutdown(Duration::ZERO).await;
        let delivered_again = q.shared.cursors[0].persisted.load(Ordering::Relaxed);
        assert_eq!(delivered_again, 6010, "the cursor follows every record once");
    }

    #[tokio::test]
    async fn the_bound_refuses_and_critical_may_use_the_reserve() {
        let dir = tempfile::tempdir().unwrap();
        let c = DiskConfig { max_bytes: 2 << 20, ..config(dir.path(), SyncMode::None) };
        let q = DiskQueue::open(&c, &[], 0.5).unwrap();
        let big = Payload::Encoded(Encoded::single(Signal::Logs, bytes::Bytes::from(vec![7u8; 400_000]), 1));
        q.append(&big, false, None).await.unwrap();
        q.append(&big, false, None).await.unwrap();
        let e = q.append(&big, false, None).await.unwrap_err();
        assert!(matches!(e, AppendError::Full { .. }), "{e:?}");
        q.append(&big, true, None).await.expect("critical may use the reserve");
        q.shutdown(Duration::ZERO).await;
    }

    /// Real files whose next write or fsync fails on demand; with `direct`, they say
    /// they are direct, and `einval` fails the next write as a refused direct write.
    #[derive(Default)]
    struct Faulty {
        fail_write: Arc<std::sync::atomic::AtomicBool>,
        fail_sync: Arc<std::sync::atomic::AtomicBool>,
        direct: Arc<std::sync::atomic::AtomicBool>,
        einval: Arc<std::sync::atomic::AtomicBool>,
    }

    struct FaultyFile {
        file: std::fs::File,
        fail_write: Arc<std::sync::atomic::AtomicBool>,
        fail_sync: Arc<std::sync::atomic::AtomicBool>,
        direct: bool,
        einval: Arc<std::sync::atomic::AtomicBool>,
    }

    impl writer::SegmentFiles for Faulty {
        fn create(&self, path: &Path, truncate: bool) -> std::io::Result<Box<dyn writer::SegmentFile>> {
            let file = std::fs::OpenOptions::new().create(true).truncate(truncate).write(true).open(path)?;
            Ok(Box::new(FaultyFile {
                file,
                fail_write: Arc::clone(&self.fail_write),
                fail_sync: Arc::clone(&self.fail_sync),
                direct: self.direct.load(Ordering::SeqCst),
                einval: Arc::clone(&self.einval),
            }))
        }
        fn sync_dir(&self, dir: &Path) -> std::io::Result<()> {
            segment::sync_dir(dir)
        }
        fn no_direct(&self) {
            self.direct.store(false, Ordering::SeqCst);
        }
    }

    impl writer::SegmentFile for FaultyFile {
        fn direct(&self) -> bool {
            self.direct
        }
        fn write_parts_at(&mut self, parts: Vec<&[u8]>, offset: u64) -> std::io::Result<u64> {
            if self.einval.swap(false, Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(libc::EINVAL));
            }
            if self.fail_write.swap(false, Ordering::SeqCst) {
                // Half of it reaches the file first, as a real short write before ENOSPC.
                let all = parts.concat();
                writer::SegmentFile::write_parts_at(&mut self.file, vec![&all[..all.len() / 2]], offset)?;
                return Err(std::io::Error::from_raw_os_error(libc::ENOSPC));
            }
            writer::SegmentFile::write_parts_at(&mut self.file, parts, offset)
        }
        fn sync_data(&self) -> std::io::Result<()> {
            if self.fail_sync.swap(false, Ordering::SeqCst) {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            self.file.sync_data()
        }
        fn set_len(&mut self, len: u64) -> std::io::Result<()> {
            self.file.set_len(len)
        }
    }

    /// Every record on disk, in id order: (id, first payload byte).
    fn on_disk(dir: &Path) -> Vec<(u64, u8)> {
        let mut out = Vec::new();
        for (_, path) in segment::list(dir).unwrap() {
            let len = std::fs::metadata(&path).unwrap().len();
            let mut r = segment::SegmentReader::open(&path).unwrap();
            let mut at = 0;
            while let segment::Step::Record(rec, next) = r.step(at, len).unwrap() {
                out.push((rec.meta.id, rec.payload[0]));
                at = next;
            }
        }
        out
    }

    #[tokio::test]
    async fn a_failed_write_or_fsync_refuses_its_group_and_the_next_one_is_stored() {
        let dir = tempfile::tempdir().unwrap();
        let faulty = Faulty::default();
        let (fail_write, fail_sync) = (Arc::clone(&faulty.fail_write), Arc::clone(&faulty.fail_sync));
        let q = DiskQueue::open_with(&config(dir.path(), SyncMode::OnAck), &[], 0.0, Arc::new(faulty)).unwrap();
        q.append(&payload(1), false, None).await.unwrap();
        fail_write.store(true, Ordering::SeqCst);
        let e = q.append(&payload(2), false, None).await.unwrap_err();
        assert!(matches!(&e, AppendError::Io(m) if m.contains("write")), "{e:?}");
        q.append(&payload(3), false, None).await.expect("space is back: stored");
        fail_sync.store(true, Ordering::SeqCst);
        let e = q.append(&payload(4), false, None).await.unwrap_err();
        assert!(matches!(&e, AppendError::Io(m) if m.contains("fsync")), "{e:?}");
        q.append(&payload(5), false, None).await.expect("after a failed fsync a new segment takes the next group");
        q.shutdown(Duration::ZERO).await;
        // Only what was acknowledged is on disk, whole, in order; the failed fsync sealed
        // its segment and the next record went to a new one.
        assert_eq!(on_disk(dir.path()), vec![(1, 1), (2, 3), (3, 5)]);
        assert_eq!(segment::list(dir.path()).unwrap().len(), 2);
    }

    /// A direct write the file system refuses after all (EINVAL: a larger alignment than
    /// the one weir uses) ends the segment, and the next ones are written buffered.
    #[tokio::test]
    async fn a_refused_direct_write_falls_back_to_the_page_cache() {
        let dir = tempfile::tempdir().unwrap();
        let faulty = Faulty::default();
        faulty.direct.store(true, Ordering::SeqCst);
        let (direct, einval) = (Arc::clone(&faulty.direct), Arc::clone(&faulty.einval));
        let q = DiskQueue::open_with(&config(dir.path(), SyncMode::OnAck), &[], 0.0, Arc::new(faulty)).unwrap();
        q.append(&payload(1), false, None).await.unwrap();
        assert_eq!(q.debug()["direct_io"], true);
        einval.store(true, Ordering::SeqCst);
        let e = q.append(&payload(2), false, None).await.unwrap_err();
        assert!(matches!(&e, AppendError::Io(m) if m.contains("write")), "{e:?}");
        assert!(!direct.load(Ordering::SeqCst), "direct writes turned off");
        q.append(&payload(3), false, None).await.expect("the next group is stored, buffered");
        assert_eq!(q.debug()["direct_io"], false);
        q.shutdown(Duration::ZERO).await;
        assert_eq!(on_disk(dir.path()), vec![(1, 1), (2, 3)]);
        assert_eq!(segment::list(dir.path()).unwrap().len(), 2, "the refused segment was sealed");
    }
}
