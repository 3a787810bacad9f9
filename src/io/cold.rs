//! Cold records on disk: each generation appends its entries' ids, texts and token hashes to an
//! unlinked temporary file in a spill directory and reads a record back (`pread`) only when a
//! candidate passes verification's cheap gates. The process then holds a few dozen bytes per
//! live entry; the kernel's page cache keeps the hot part of the files in memory as space
//! allows. The files are scratch: the durable state stays in sled, a crash leaves nothing
//! behind (the files are unlinked at creation), and a restart rebuilds them from sled.
//!
//! A write error (a full disk) keeps the records in memory from then on and is reported once;
//! nothing is lost.

use std::fs::{File, OpenOptions};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::index::cold::{ColdFactory, ColdStore};

/// Records buffered in memory before one write.
const BUFFER: usize = 256 * 1024;

/// Makes one spill file per generation in a directory (created when the generation's first
/// `BUFFER` bytes are full: small generations never touch the disk).
pub struct FileColdFactory {
    inner: Arc<Dir>,
}

struct Dir {
    path: PathBuf,
    next: AtomicU64,
}

impl FileColdFactory {
    /// Spill files go to `dir` (created if missing). Fails if it cannot hold a file.
    pub fn new(dir: &Path) -> std::io::Result<Arc<FileColdFactory>> {
        std::fs::create_dir_all(dir)?;
        let inner = Arc::new(Dir {
            path: dir.to_path_buf(),
            next: AtomicU64::new(0),
        });
        // Fail now, with the path, rather than at the first full generation.
        drop(inner.open(-1)?);
        Ok(Arc::new(FileColdFactory { inner }))
    }
}

impl Dir {
    fn open(&self, gen: i64) -> std::io::Result<File> {
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let path = self
            .path
            .join(format!("gen-{gen}-{}-{n}.cold", std::process::id()));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(&path)?;
        std::fs::remove_file(&path)?;
        Ok(file)
    }
}

impl ColdFactory for FileColdFactory {
    fn create(&self, gen: i64) -> Box<dyn ColdStore> {
        Box::new(FileCold {
            dir: self.inner.clone(),
            gen,
            file: None,
            failed: false,
            written: 0,
            pending: Vec::new(),
        })
    }
}

/// One generation's spill file: records below `written` are in the file, the rest in `pending`.
struct FileCold {
    dir: Arc<Dir>,
    gen: i64,
    file: Option<File>,
    /// Set after a failed create or write: everything stays in `pending` from then on.
    failed: bool,
    written: u64,
    pending: Vec<u8>,
}

impl FileCold {
    fn flush(&mut self) -> std::io::Result<()> {
        if self.file.is_none() {
            self.file = Some(self.dir.open(self.gen)?);
        }
        if let Some(file) = &self.file {
            file.write_all_at(&self.pending, self.written)?;
        }
        self.written += self.pending.len() as u64;
        self.pending.clear();
        Ok(())
    }
}

impl ColdStore for FileCold {
    fn append(&mut self, record: &[u8]) {
        self.pending.extend_from_slice(record);
        if self.pending.len() < BUFFER || self.failed {
            return;
        }
        if let Err(e) = self.flush() {
            tracing::warn!(dir = %self.dir.path.display(), error = %e, "cannot write a spill file: this generation stays in memory");
            self.failed = true;
        }
    }

    fn len(&self) -> u64 {
        self.written + self.pending.len() as u64
    }

    fn read<'a>(
        &'a self,
        offset: u64,
        len: u32,
        buf: &'a mut Vec<u8>,
    ) -> std::io::Result<&'a [u8]> {
        let len = len as usize;
        if offset >= self.written {
            let start = (offset - self.written) as usize;
            return self.pending.get(start..start + len).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "record past the end")
            });
        }
        let file = self
            .file
            .as_ref()
            .ok_or_else(|| std::io::Error::other("spill file lost"))?;
        buf.resize(len, 0);
        file.read_exact_at(buf, offset)?;
        Ok(buf)
    }

    fn memory_bytes(&self) -> usize {
        self.pending.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_from_file_and_buffer_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = FileColdFactory::new(dir.path()).unwrap();
        let mut s = f.create(3);
        let mut offsets = Vec::new();
        for i in 0..20_000u32 {
            offsets.push(s.len());
            s.append(format!("record {i} {}", "x".repeat((i % 50) as usize)).as_bytes());
        }
        assert!(s.memory_bytes() < 2 * BUFFER);
        let mut buf = Vec::new();
        for (i, &o) in offsets.iter().enumerate() {
            let want = format!("record {i} {}", "x".repeat(i % 50));
            let got = s.read(o, want.len() as u32, &mut buf).unwrap();
            assert_eq!(got, want.as_bytes());
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(s.read(s.len(), 1, &mut buf).is_err());
    }
}
