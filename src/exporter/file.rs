//! Writes OTLP/JSON, one export request per line, one file per signal
//! (`<path>/<signal>.jsonl`), rotated by size (`<signal>.jsonl.1` is the newest old file).

use super::{BoxFuture, ExportError, Exporter};
use crate::config::FileExporterConfig;
use crate::signal::{Payload, Signal};
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// The `file` exporter.
pub struct FileExporter {
    name: String,
    files: Arc<[Mutex<RotatingFile>; 4]>,
}

struct RotatingFile {
    path: PathBuf,
    file: Option<File>,
    size: u64,
    max_bytes: u64,
    max_files: usize,
}

impl FileExporter {
    /// Creates the directory; files are opened on first write.
    pub fn new(name: String, config: &FileExporterConfig) -> std::io::Result<Self> {
        std::fs::create_dir_all(&config.path)?;
        let files = Signal::ALL.map(|s| {
            Mutex::new(RotatingFile {
                path: config.path.join(format!("{}.jsonl", s.as_str())),
                file: None,
                size: 0,
                max_bytes: config.max_file_bytes,
                max_files: config.max_files,
            })
        });
        Ok(FileExporter { name, files: Arc::new(files) })
    }

    /// Path of the live file for `signal` under `dir`.
    pub fn file_path(dir: &Path, signal: Signal) -> PathBuf {
        dir.join(format!("{}.jsonl", signal.as_str()))
    }
}

impl RotatingFile {
    fn write_line(&mut self, line: &[u8]) -> std::io::Result<()> {
        if self.file.is_some() && self.size > 0 && self.size + line.len() as u64 > self.max_bytes {
            self.rotate()?;
        }
        if self.file.is_none() {
            // The directory may have been removed under us; recreate it rather than drop.
            if let Some(dir) = self.path.parent() {
                std::fs::create_dir_all(dir)?;
            }
            let f = OpenOptions::new().create(true).append(true).open(&self.path)?;
            self.size = f.metadata()?.len();
            self.file = Some(f);
        }
        if let Some(f) = self.file.as_mut() {
            f.write_all(line)?;
            self.size += line.len() as u64;
        }
        Ok(())
    }

    fn rotate(&mut self) -> std::io::Result<()> {
        if let Some(f) = self.file.take() {
            f.sync_all()?;
        }
        let numbered = |n: usize| PathBuf::from(format!("{}.{n}", self.path.display()));
        if self.max_files == 0 {
            std::fs::remove_file(&self.path)?;
        } else {
            let _ = std::fs::remove_file(numbered(self.max_files));
            for n in (1..self.max_files).rev() {
                let from = numbered(n);
                if from.exists() {
                    std::fs::rename(&from, numbered(n + 1))?;
                }
            }
            std::fs::rename(&self.path, numbered(1))?;
        }
        self.size = 0;
        Ok(())
    }
}

impl Exporter for FileExporter {
    fn name(&self) -> &str {
        &self.name
    }

    fn export<'a>(&'a self, payload: &'a Payload, _tenant: Option<&'a str>) -> BoxFuture<'a, Result<(), ExportError>> {
        let files = Arc::clone(&self.files);
        let idx = payload.signal().index();
        Box::pin(async move {
            let mut line = crate::otlp::json::encode(&*payload.decoded()?).into_bytes();
            line.push(b'\n');
            tokio::task::spawn_blocking(move || {
                let mut f = files[idx].lock().unwrap_or_else(|e| e.into_inner());
                f.write_line(&line)
            })
            .await
            .map_err(|e| ExportError::Io(std::io::Error::other(e)))??;
            Ok(())
        })
    }

    fn shutdown(&self) -> BoxFuture<'_, ()> {
        let files = Arc::clone(&self.files);
        Box::pin(async move {
            let _ = tokio::task::spawn_blocking(move || {
                for f in files.iter() {
                    let f = f.lock().unwrap_or_else(|e| e.into_inner());
                    if let Some(file) = f.file.as_ref() {
                        if let Err(e) = file.sync_all() {
                            tracing::warn!(path = %f.path.display(), error = %e, "file exporter: sync failed");
                        }
                    }
                }
            })
            .await;
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_by_size_and_keeps_max_files() {
        let dir = tempfile::tempdir().unwrap();
        let mut f = RotatingFile { path: dir.path().join("traces.jsonl"), file: None, size: 0, max_bytes: 10, max_files: 2 };
        for i in 0..5 {
            f.write_line(format!("line-{i}-xx\n").as_bytes()).unwrap();
        }
        let read = |p: &str| std::fs::read_to_string(dir.path().join(p)).unwrap();
        assert_eq!(read("traces.jsonl"), "line-4-xx\n");
        assert_eq!(read("traces.jsonl.1"), "line-3-xx\n");
        assert_eq!(read("traces.jsonl.2"), "line-2-xx\n");
        assert!(!dir.path().join("traces.jsonl.3").exists());
    }
}
