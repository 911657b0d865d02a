//! Spare segment files. An exported segment is renamed aside instead of deleted, and the
//! writer's next segment is written over it: its blocks are already allocated and its
//! pages often still cached, so an append is a copy into the page cache and a sync is a
//! write-back, without the file system allocating blocks for every group or freeing the
//! old file's pages. See docs/durable-queue.md#spare-segment-files.
//!
//! The old records past what the new segment has written are told apart by their ids,
//! which are all below the new segment's first id ([`super::segment::scan`]); a segment
//! is cut to its length when it is sealed. Spares do not outlive the run that made them.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// How many spare files are kept; in a steady state one is written over at each segment
/// start while the one before is being retired.
pub(crate) const KEEP: usize = 2;

const SUFFIX: &str = ".spare";

/// The spare files of one queue directory.
#[derive(Debug)]
pub(crate) struct Spares {
    dir: PathBuf,
    files: Mutex<Vec<PathBuf>>,
    next: AtomicU64,
    /// Spares handed to the writer.
    taken: AtomicU64,
}

impl Spares {
    /// The spares of `dir`. Those an earlier run left are removed: their records' ids
    /// are only known to be below the next segment's first id within one run (after a
    /// restart with lost cursors, ids may start again below them).
    pub(crate) fn open(dir: &Path) -> std::io::Result<Spares> {
        for e in std::fs::read_dir(dir)? {
            let path = e?.path();
            if path.file_name().and_then(|n| n.to_str()).is_some_and(|n| n.ends_with(SUFFIX)) {
                std::fs::remove_file(&path)?;
            }
        }
        Ok(Spares { dir: dir.to_path_buf(), files: Mutex::new(Vec::new()), next: AtomicU64::new(0), taken: AtomicU64::new(0) })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<PathBuf>> {
        self.files.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Retires an exported segment: renamed aside while fewer than [`KEEP`] are spare,
    /// else removed. The caller syncs the directory.
    pub(crate) fn retire(&self, segment: &Path) -> std::io::Result<()> {
        let mut files = self.lock();
        if files.len() >= KEEP {
            drop(files);
            return std::fs::remove_file(segment);
        }
        let spare = loop {
            let p = self.dir.join(format!("{}{SUFFIX}", self.next.fetch_add(1, Ordering::Relaxed)));
            if !p.exists() {
                break p;
            }
        };
        match std::fs::rename(segment, &spare) {
            Ok(()) => {
                files.push(spare);
                Ok(())
            }
            Err(_) => std::fs::remove_file(segment),
        }
    }

    /// A spare file to write the next segment over, if any.
    pub(crate) fn take(&self) -> Option<PathBuf> {
        let f = self.lock().pop()?;
        self.taken.fetch_add(1, Ordering::Relaxed);
        Some(f)
    }

    /// Spares handed out so far.
    #[cfg(test)]
    pub(crate) fn taken(&self) -> u64 {
        self.taken.load(Ordering::Relaxed)
    }

    /// Removes every spare file (the disk is full: their room is needed).
    pub(crate) fn clear(&self) {
        for f in std::mem::take(&mut *self.lock()) {
            let _ = std::fs::remove_file(f);
        }
    }

    /// How many there are.
    pub(crate) fn len(&self) -> usize {
        self.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_keep_are_kept_and_a_restart_removes_them() {
        let dir = tempfile::tempdir().unwrap();
        let s = Spares::open(dir.path()).unwrap();
        for i in 0..4 {
            let p = dir.path().join(format!("{i}.wq"));
            std::fs::write(&p, vec![i as u8; 100]).unwrap();
            s.retire(&p).unwrap();
            assert!(!p.exists());
        }
        assert_eq!(s.len(), KEEP);
        let names = |d: &Path| std::fs::read_dir(d).unwrap().count();
        assert_eq!(names(dir.path()), KEEP, "the rest were removed");
        let taken = s.take().unwrap();
        assert_eq!(std::fs::metadata(&taken).unwrap().len(), 100);
        s.clear();
        assert_eq!(names(dir.path()), 1, "cleared, but the one taken is the caller's");
        std::fs::rename(&taken, dir.path().join("7.spare")).unwrap();
        let again = Spares::open(dir.path()).unwrap();
        assert_eq!((again.len(), names(dir.path())), (0, 0), "an earlier run's spares are removed");
    }
}
