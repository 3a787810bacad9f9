//! Cold records on disk: each generation appends its entries' ids, texts and token hashes to an
//! unlinked temporary file in a spill directory and reads a record back (`pread`) only when a
//! candidate passes verification's cheap gates. The process then holds a few dozen bytes per
//! live entry; the kernel's page cache keeps the hot part of the files in memory as space
//! allows. The files are scratch: the durable state stays in sled, a crash leaves nothing
//! behind (the files are unlinked at creation), and a restart rebuilds them from sled.
//!
//! Each generation also keeps its newest `TAIL` bytes of records in memory after writing them,
//! and reads those without a system call. Reads lean to the newest records: a cluster that keeps
//! receiving duplicates is copied into the newest generation, and reposts come in bursts.
//!
//! A write error (a full disk) keeps the records in memory from then on and is reported once;
//! nothing is lost.
//!
//! A generation read back whole (`ColdFactory::load`) reads its records from the file they were
//! written to (`state::sealed`), and appends any later ones to a spill file as above.

use std::collections::VecDeque;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use crate::index::cold::{ColdCopy, ColdFactory, ColdStore};

/// Records buffered in memory before one write.
const BUFFER: usize = 256 * 1024;

/// Bytes of a generation's newest written records kept in memory besides the file. In the
/// scale benchmark at 10M live entries, half of the records read lay within a generation's last
/// 16 MiB (a fifth within its last 4 MiB); each such read saves a `pread`.
const TAIL: usize = 16 << 20;

/// Makes one spill file per generation in a directory (created when the generation's records
/// outgrow its first `BUFFER` bytes: small generations never touch the disk).
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

/// Where a run with state dir `state_dir` keeps its cold records: spill files in its `spill`
/// folder when `spill_texts` is set (`state.spill_texts`), memory otherwise. The error names the
/// folder.
pub fn factory_for(
    state_dir: Option<&Path>,
    spill_texts: bool,
) -> Result<Arc<dyn ColdFactory>, String> {
    match state_dir {
        Some(dir) if spill_texts => {
            let spill = dir.join("spill");
            FileColdFactory::new(&spill)
                .map(|f| f as Arc<dyn ColdFactory>)
                .map_err(|e| format!("cannot use {} for spill files: {e}", spill.display()))
        }
        _ => Ok(crate::index::cold::in_memory()),
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
        Box::new(FileCold::new(self.inner.clone(), gen, None))
    }

    fn load(
        &self,
        gen: i64,
        file: File,
        offset: u64,
        len: u64,
    ) -> std::io::Result<Box<dyn ColdStore>> {
        let size = file.metadata()?.len();
        if offset.checked_add(len).is_none_or(|end| end > size) {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                "the records run past the end of their file",
            ));
        }
        let base = Base { file, offset, len };
        Ok(Box::new(FileCold::new(self.inner.clone(), gen, Some(base))))
    }
}

/// Records a generation holds from when it was read back whole: `len` bytes at `offset` in
/// `file`, read back as they are, before any appended since.
struct Base {
    file: File,
    offset: u64,
    len: u64,
}

/// One generation's spill file: records below `written` are in the file, the rest in `pending`.
/// Offsets here are past the base's records, if it has some (`base_len`).
struct FileCold {
    dir: Arc<Dir>,
    gen: i64,
    base: Option<Base>,
    file: Option<File>,
    /// Set after a failed create or write: everything stays in `pending` from then on.
    failed: bool,
    written: u64,
    pending: Vec<u8>,
    /// The newest written buffers, oldest first, each with its offset: every record lies whole
    /// in one (a buffer is written before a record that would overflow it, never through one).
    kept: VecDeque<(u64, Vec<u8>)>,
    /// Their lengths' sum, at most about `TAIL` once a write is done.
    kept_bytes: usize,
}

impl FileCold {
    fn new(dir: Arc<Dir>, gen: i64, base: Option<Base>) -> FileCold {
        FileCold {
            dir,
            gen,
            base,
            file: None,
            failed: false,
            written: 0,
            pending: Vec::new(),
            kept: VecDeque::new(),
            kept_bytes: 0,
        }
    }

    fn flush(&mut self) -> std::io::Result<()> {
        if self.file.is_none() {
            self.file = Some(self.dir.open(self.gen)?);
        }
        if let Some(file) = &self.file {
            file.write_all_at(&self.pending, self.written)?;
        }
        // The written buffer joins the kept ones; the oldest kept past `TAIL` become the next
        // buffer, so steady writing allocates nothing.
        let mut next = Vec::new();
        while self.kept_bytes + self.pending.len() > TAIL {
            let Some((_, old)) = self.kept.pop_front() else {
                break;
            };
            self.kept_bytes -= old.len();
            next = old;
        }
        next.clear();
        let full = std::mem::replace(&mut self.pending, next);
        let at = self.written;
        self.written += full.len() as u64;
        self.kept_bytes += full.len();
        self.kept.push_back((at, full));
        Ok(())
    }

    /// Bytes of the base's records.
    fn base_len(&self) -> u64 {
        self.base.as_ref().map_or(0, |b| b.len)
    }

    /// The kept buffer holding `offset`, if one does.
    fn kept_at(&self, offset: u64) -> Option<&(u64, Vec<u8>)> {
        let i = self.kept.partition_point(|(start, _)| *start <= offset);
        i.checked_sub(1).and_then(|i| self.kept.get(i))
    }
}

impl ColdStore for FileCold {
    fn append(&mut self, record: &[u8]) {
        // Written before it would overflow, so a buffer never grows past `BUFFER` (unless one
        // record does) and the kept ones hold no slack.
        let full = self.pending.len() + record.len() > BUFFER;
        if full && !self.pending.is_empty() && !self.failed {
            if let Err(e) = self.flush() {
                tracing::warn!(dir = %self.dir.path.display(), error = %e, "cannot write a spill file: this generation stays in memory");
                self.failed = true;
            }
        }
        if self.pending.capacity() == 0 {
            self.pending.reserve_exact(BUFFER.max(record.len()));
        }
        self.pending.extend_from_slice(record);
    }

    fn len(&self) -> u64 {
        self.base_len() + self.written + self.pending.len() as u64
    }

    fn read<'a>(
        &'a self,
        offset: u64,
        len: u32,
        buf: &'a mut Vec<u8>,
    ) -> std::io::Result<&'a [u8]> {
        let len = len as usize;
        if let Some(base) = self.base.as_ref().filter(|b| offset < b.len) {
            if offset + len as u64 > base.len {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::UnexpectedEof,
                    "record past the end",
                ));
            }
            buf.resize(len, 0);
            base.file.read_exact_at(buf, base.offset + offset)?;
            return Ok(buf);
        }
        let offset = offset - self.base_len();
        if offset >= self.written {
            let start = (offset - self.written) as usize;
            return self.pending.get(start..start + len).ok_or_else(|| {
                std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "record past the end")
            });
        }
        if let Some((start, bytes)) = self.kept_at(offset) {
            let start = (offset - start) as usize;
            if let Some(record) = bytes.get(start..start + len) {
                return Ok(record);
            }
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
        self.pending.capacity() + self.kept.iter().map(|k| k.1.capacity()).sum::<usize>()
    }

    fn detach(&self) -> std::io::Result<Box<dyn ColdCopy>> {
        let own = match (&self.file, self.written) {
            (_, 0) => None,
            (Some(f), n) => Some((f.try_clone()?, n)),
            (None, _) => return Err(std::io::Error::other("spill file lost")),
        };
        let base = match &self.base {
            Some(b) => Some((b.file.try_clone()?, b.offset, b.len)),
            None => None,
        };
        Ok(Box::new(Detached {
            base,
            own,
            pending: self.pending.clone(),
        }))
    }
}

/// A generation's records as they were when detached: those of its base, those written to its
/// spill file (which only grows), and a copy of those still buffered.
struct Detached {
    base: Option<(File, u64, u64)>,
    own: Option<(File, u64)>,
    pending: Vec<u8>,
}

impl ColdCopy for Detached {
    fn copy_to(&mut self, w: &mut dyn Write) -> std::io::Result<u64> {
        let mut buf = vec![0u8; COPY_BYTES];
        let mut copy = |file: &File, mut at: u64, mut left: u64| -> std::io::Result<()> {
            while left > 0 {
                let n = left.min(COPY_BYTES as u64) as usize;
                file.read_exact_at(&mut buf[..n], at)?;
                w.write_all(&buf[..n])?;
                (at, left) = (at + n as u64, left - n as u64);
            }
            Ok(())
        };
        let mut total = 0;
        if let Some((file, offset, len)) = &self.base {
            copy(file, *offset, *len)?;
            total += len;
        }
        if let Some((file, len)) = &self.own {
            copy(file, 0, *len)?;
            total += len;
        }
        w.write_all(&self.pending)?;
        Ok(total + self.pending.len() as u64)
    }
}

/// Bytes read at a time when records are copied out (`ColdCopy::copy_to`).
const COPY_BYTES: usize = 1 << 20;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_read_back_from_file_tail_and_buffer_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let f = FileColdFactory::new(dir.path()).unwrap();
        let mut s = f.create(3);
        let record = |i: usize| format!("record {i} {}", "x".repeat(i % 50));
        let mut offsets = Vec::new();
        // Past the kept tail: the oldest records are read from the file, the newest from memory.
        while (s.len() as usize) < TAIL + 4 * BUFFER {
            let i = offsets.len();
            offsets.push(s.len());
            s.append(record(i).as_bytes());
        }
        let held = s.memory_bytes();
        let expected = TAIL - BUFFER..=TAIL + 4 * BUFFER;
        assert!(expected.contains(&held), "{held} bytes held");
        let mut buf = Vec::new();
        for (i, &o) in offsets.iter().enumerate() {
            let want = record(i);
            let got = s.read(o, want.len() as u32, &mut buf).unwrap();
            assert_eq!(got, want.as_bytes(), "record {i}");
        }
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        assert!(s.read(s.len(), 1, &mut buf).is_err());
        // Bytes across the end of a kept buffer (none holds more than `BUFFER`) come from the
        // file, whole.
        let k = offsets.partition_point(|&o| o < s.len() - TAIL as u64 / 2);
        let mut want = Vec::new();
        for i in k.. {
            want.extend_from_slice(record(i).as_bytes());
            if want.len() > BUFFER {
                break;
            }
        }
        let got = s.read(offsets[k], want.len() as u32, &mut buf).unwrap();
        assert_eq!(got, &want[..]);
    }

    // Records copied out and loaded from their file read back the same, before and after
    // records appended since, and copy out again whole; in memory as on file.
    #[test]
    fn loaded_records_read_back_and_take_more() {
        let dir = tempfile::tempdir().unwrap();
        let spill = FileColdFactory::new(&dir.path().join("spill")).unwrap();
        let record = |i: usize| format!("record {i} {}", "y".repeat(i % 70));
        let mut s = spill.create(1);
        let mut offsets = Vec::new();
        while (s.len() as usize) < 3 * BUFFER {
            offsets.push(s.len());
            s.append(record(offsets.len() - 1).as_bytes());
        }
        // Copied behind 7 bytes of something else, as a sealed generation file has its arrays.
        let path = dir.path().join("gen-1.sealed");
        let mut out = std::fs::File::create(&path).unwrap();
        out.write_all(b"arrays!").unwrap();
        assert_eq!(s.detach().unwrap().copy_to(&mut out).unwrap(), s.len());
        drop(out);
        let factories: [Arc<dyn ColdFactory>; 2] = [spill, crate::index::cold::in_memory()];
        for f in factories {
            let file = File::open(&path).unwrap();
            let mut l = f.load(1, file, 7, s.len()).unwrap();
            assert_eq!(l.len(), s.len());
            for i in 0..2000 {
                offsets.push(l.len());
                l.append(record(offsets.len() - 1).as_bytes());
                if i == 0 {
                    assert_eq!(offsets.last(), Some(&s.len()));
                }
            }
            let mut buf = Vec::new();
            for (i, &o) in offsets.iter().enumerate() {
                let want = record(i);
                let got = l.read(o, want.len() as u32, &mut buf).unwrap();
                assert_eq!(got, want.as_bytes(), "record {i}");
            }
            // Detached, then appended to: the copy holds what it held when detached.
            let mut detached = l.detach().unwrap();
            l.append(b"after");
            let mut again = Vec::new();
            assert_eq!(detached.copy_to(&mut again).unwrap(), l.len() - 5);
            let all: String = (0..offsets.len()).map(record).collect();
            assert_eq!(again, all.as_bytes());
            offsets.truncate(offsets.len() - 2000);
            // Records past the file's end are refused when loading.
            let file = File::open(&path).unwrap();
            assert!(f.load(1, file, 8, s.len()).is_err());
        }
    }
}
