//! Sealed generations kept beside the store, one file each (`<state-dir>/sealed/gen-<G>.sealed`),
//! so that a restart loads a generation's index arrays and cold records instead of rebuilding
//! them from its stored entries. The files are a cache: the entries stay in sled, which remains
//! the only source of truth, and a file is used only while it is known to hold exactly what sled
//! holds for its generation.
//!
//! A file is written only for a generation just rebuilt from sled, and records the key of the
//! generation's last stored chunk at that moment. Every commit to a generation adds a chunk
//! whose key sorts last (chunk keys grow), and uncommitted chunks sort after the committed ones,
//! so the file is used while that key is still the generation's last, and the index settings it
//! was written under (`Index::sealed_digest`) are still this run's. Anything else (another key,
//! other settings, a generation below the window, a damaged or short file) and the file is
//! removed and the generation rebuilt from sled. Clearing the store's entries removes them all.
//!
//! Layout: a fixed header (`HEADER_BYTES`), the index arrays (`index::snapshot`), then the cold
//! records. The header is written last, once the rest is in the file and synced, and the file
//! is renamed into place after: a file cut short by a crash is never read.

use std::fs::{File, OpenOptions};
use std::io::{self, BufWriter, Write};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use crate::index::cold::ColdCopy;
use crate::index::Written;

/// Bytes of a file's header.
pub const HEADER_BYTES: u64 = 128;

const MAGIC: &[u8; 8] = b"SDSEALD1";

/// Longest chunk key a header holds (a piece key is 20 bytes).
const MAX_KEY: usize = 32;

/// What a file's header says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Header {
    /// The index settings' digest it was written under.
    pub digest: u64,
    /// Its generation.
    pub gen: i64,
    /// The generation's last stored chunk key when it was written.
    pub last_key: Vec<u8>,
    /// The arrays written (`index::snapshot`).
    pub arrays: Written,
}

impl Header {
    fn encode(&self) -> [u8; HEADER_BYTES as usize] {
        let mut b = [0u8; HEADER_BYTES as usize];
        let mut at = 0;
        let mut put = |x: &[u8]| {
            b[at..at + x.len()].copy_from_slice(x);
            at += x.len();
        };
        put(MAGIC);
        put(&self.digest.to_le_bytes());
        put(&self.gen.to_le_bytes());
        put(&(self.last_key.len() as u32).to_le_bytes());
        let mut key = [0u8; MAX_KEY];
        key[..self.last_key.len()].copy_from_slice(&self.last_key);
        put(&key);
        for x in [
            self.arrays.bytes,
            self.arrays.hash,
            self.arrays.entries,
            self.arrays.cold_bytes,
        ] {
            put(&x.to_le_bytes());
        }
        b
    }

    fn decode(b: &[u8; HEADER_BYTES as usize]) -> Option<Header> {
        let u64_at = |at: usize| u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or_default());
        if &b[..8] != MAGIC {
            return None;
        }
        let key_len = u32::from_le_bytes(b[24..28].try_into().ok()?) as usize;
        if key_len > MAX_KEY {
            return None;
        }
        Some(Header {
            digest: u64_at(8),
            gen: u64_at(16) as i64,
            last_key: b[28..28 + key_len].to_vec(),
            arrays: Written {
                bytes: u64_at(60),
                hash: u64_at(68),
                entries: u64_at(76),
                cold_bytes: u64_at(84),
            },
        })
    }

    /// Where the cold records start in the file.
    pub fn cold_offset(&self) -> u64 {
        HEADER_BYTES + self.arrays.bytes
    }
}

/// A file found usable: its header and the file, open for reading.
pub struct Usable {
    /// Its header.
    pub header: Header,
    /// The file.
    pub file: File,
    /// Its path (to remove it if reading it fails after all).
    pub path: PathBuf,
}

/// The directory of a state dir's sealed generation files.
#[derive(Clone, Debug)]
pub struct SealedDir {
    path: PathBuf,
}

impl SealedDir {
    /// The sealed generations of the state dir `state_dir`.
    pub fn of(state_dir: &Path) -> SealedDir {
        SealedDir {
            path: state_dir.join("sealed"),
        }
    }

    /// Its path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    fn file_of(&self, gen: i64) -> PathBuf {
        self.path.join(format!("gen-{gen}.sealed"))
    }

    /// The files a restart can load, by generation: written under `digest`, of a generation
    /// not below `min_gen`, whose chunks up to the key the file was written at are still
    /// stored as they were, as `covered(gen, key)` says (`Store::covers`; chunks stored after
    /// it are the caller's to add). Every other file there (leftovers of an interrupted write
    /// included) is removed.
    pub fn usable(
        &self,
        digest: u64,
        min_gen: Option<i64>,
        mut covered: impl FnMut(i64, &[u8]) -> io::Result<bool>,
    ) -> io::Result<Vec<Usable>> {
        let dir = match std::fs::read_dir(&self.path) {
            Ok(d) => d,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut found = Vec::new();
        for item in dir {
            let path = item?.path();
            match self.check(&path, digest, min_gen, &mut covered)? {
                Some(u) => found.push(u),
                None => remove(&path),
            }
        }
        found.sort_by_key(|u| u.header.gen);
        Ok(found)
    }

    fn check(
        &self,
        path: &Path,
        digest: u64,
        min_gen: Option<i64>,
        covered: &mut impl FnMut(i64, &[u8]) -> io::Result<bool>,
    ) -> io::Result<Option<Usable>> {
        let Ok(file) = File::open(path) else {
            return Ok(None);
        };
        let mut b = [0u8; HEADER_BYTES as usize];
        let Some(header) = file
            .read_exact_at(&mut b, 0)
            .ok()
            .and_then(|()| Header::decode(&b))
        else {
            return Ok(None);
        };
        let size = file.metadata()?.len();
        let fits = header.cold_offset().checked_add(header.arrays.cold_bytes) == Some(size);
        let named = path.file_name() == self.file_of(header.gen).file_name();
        let live = min_gen.is_none_or(|m| header.gen >= m);
        if !(fits && named && live && header.digest == digest) {
            return Ok(None);
        }
        if !covered(header.gen, &header.last_key)? {
            return Ok(None);
        }
        Ok(Some(Usable {
            header,
            file,
            path: path.to_path_buf(),
        }))
    }

    /// Starts generation `gen`'s file: `arrays` writes its index arrays (`None` if it cannot
    /// be written whole); `last_key` is its last stored chunk key now. `Pending::finish` adds
    /// its cold records and puts it in place (on another thread if need be): before that it is
    /// not usable. `None` if `arrays` declined.
    pub fn write(
        &self,
        gen: i64,
        digest: u64,
        last_key: Vec<u8>,
        arrays: impl FnOnce(&mut dyn Write) -> io::Result<Option<Written>>,
    ) -> io::Result<Option<Pending>> {
        if last_key.len() > MAX_KEY {
            return Ok(None);
        }
        std::fs::create_dir_all(&self.path)?;
        // A generation may be written again while its last write is finishing.
        static WRITES: AtomicU64 = AtomicU64::new(0);
        let n = WRITES.fetch_add(1, Ordering::Relaxed);
        let tmp = self
            .path
            .join(format!("gen-{gen}.sealed.{}-{n}.tmp", std::process::id()));
        let file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)?;
        let mut pending = Pending {
            tmp,
            path: self.file_of(gen),
            out: Some(BufWriter::with_capacity(1 << 20, file)),
            header: None,
            done: false,
        };
        let Some(w) = pending.out.as_mut() else {
            return Ok(None);
        };
        w.write_all(&[0u8; HEADER_BYTES as usize])?;
        let Some(written) = arrays(w)? else {
            return Ok(None);
        };
        pending.header = Some(Header {
            digest,
            gen,
            last_key,
            arrays: written,
        });
        Ok(Some(pending))
    }

    /// Removes generation `gen`'s file, if there is one (it expired).
    pub fn remove(&self, gen: i64) {
        remove(&self.file_of(gen));
    }

    /// Removes every file (the store's entries were cleared).
    pub fn clear(&self) -> io::Result<()> {
        match std::fs::remove_dir_all(&self.path) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }
}

/// A file started (`SealedDir::write`); dropped unfinished, it is removed.
pub struct Pending {
    tmp: PathBuf,
    path: PathBuf,
    out: Option<BufWriter<File>>,
    header: Option<Header>,
    /// Moved into place.
    done: bool,
}

impl Pending {
    /// Its generation.
    pub fn gen(&self) -> i64 {
        self.header.as_ref().map_or(0, |h| h.gen)
    }

    /// Adds the cold records (`cold`, as many bytes as the arrays were written with), makes the
    /// file durable, then writes its header and makes that durable, then moves it into place;
    /// returns its header.
    pub fn finish(mut self, cold: &mut dyn ColdCopy) -> io::Result<Header> {
        let (Some(mut w), Some(header)) = (self.out.take(), self.header.take()) else {
            return Err(io::Error::other("an unwritten sealed generation file"));
        };
        if cold.copy_to(&mut w)? != header.arrays.cold_bytes {
            return Err(io::Error::other("the cold records changed while written"));
        }
        let file = w.into_inner().map_err(io::IntoInnerError::into_error)?;
        file.sync_data()?;
        file.write_all_at(&header.encode(), 0)?;
        file.sync_data()?;
        std::fs::rename(&self.tmp, &self.path)?;
        self.done = true;
        Ok(header)
    }
}

impl Drop for Pending {
    fn drop(&mut self) {
        if !self.done {
            remove(&self.tmp);
        }
    }
}

/// Removes a file that is of no use, if it can; one left behind is tried again next time.
fn remove(path: &Path) {
    if let Err(e) = std::fs::remove_file(path) {
        if e.kind() != io::ErrorKind::NotFound {
            tracing::warn!(path = %path.display(), error = %e, "cannot remove a sealed generation file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::cold::bytes_copy;

    fn written(cold_bytes: u64) -> Written {
        Written {
            bytes: 5,
            hash: 77,
            entries: 3,
            cold_bytes,
        }
    }

    fn arrays(w: &mut dyn Write) -> io::Result<Option<Written>> {
        w.write_all(b"array").map(|()| Some(written(4)))
    }

    fn write(dir: &SealedDir, gen: i64, key: &[u8], digest: u64) -> Option<Header> {
        let pending = dir.write(gen, digest, key.to_vec(), arrays).unwrap()?;
        Some(pending.finish(&mut *bytes_copy(b"cold".to_vec())).unwrap())
    }

    #[test]
    fn a_file_is_usable_while_its_generation_and_settings_are_unchanged() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SealedDir::of(tmp.path());
        let h = write(&dir, 7, b"key-7", 42).unwrap();
        write(&dir, 8, b"key-8", 42).unwrap();
        let keys = |g: i64, k: &[u8]| Ok(k == format!("key-{g}").as_bytes());
        let found = dir.usable(42, Some(7), keys).unwrap();
        assert_eq!(found.len(), 2);
        assert_eq!(found[0].header, h);
        let mut cold = [0u8; 4];
        found[0]
            .file
            .read_exact_at(&mut cold, h.cold_offset())
            .unwrap();
        assert_eq!(&cold, b"cold");
        // Generation 8 no longer holds the chunks its file was written from: its file goes,
        // 7's stays.
        let moved = |g: i64, k: &[u8]| Ok(g != 8 && k == format!("key-{g}").as_bytes());
        let found = dir.usable(42, None, moved).unwrap();
        assert_eq!(found.iter().map(|u| u.header.gen).collect::<Vec<_>>(), [7]);
        assert!(!dir.file_of(8).exists());
        // Other settings, or a generation below the window: removed.
        assert!(dir.usable(43, None, keys).unwrap().is_empty());
        assert!(!dir.file_of(7).exists());
        write(&dir, 7, b"key-7", 42).unwrap();
        assert!(dir.usable(42, Some(8), keys).unwrap().is_empty());
        assert!(!dir.file_of(7).exists());
    }

    #[test]
    fn damaged_or_unfinished_files_are_removed() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SealedDir::of(tmp.path());
        write(&dir, 1, b"k", 1).unwrap();
        write(&dir, 2, b"k", 1).unwrap();
        write(&dir, 3, b"k", 1).unwrap();
        // Cut short, header zeroed, a leftover of a write that did not finish.
        let f = OpenOptions::new().write(true).open(dir.file_of(1)).unwrap();
        f.set_len(HEADER_BYTES + 3).unwrap();
        let f = OpenOptions::new().write(true).open(dir.file_of(2)).unwrap();
        f.write_all_at(&[0u8; 8], 0).unwrap();
        std::fs::write(dir.path().join("gen-4.sealed.1.tmp"), b"partial").unwrap();
        let found = dir.usable(1, None, |_, k| Ok(k == b"k")).unwrap();
        assert_eq!(found.iter().map(|u| u.header.gen).collect::<Vec<_>>(), [3]);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn a_declined_or_unfinished_write_leaves_no_file_and_clear_removes_all() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = SealedDir::of(tmp.path());
        let none = dir.write(5, 1, b"k".to_vec(), |_| Ok(None)).unwrap();
        assert!(none.is_none());
        let unfinished = dir.write(5, 1, b"k".to_vec(), arrays).unwrap();
        assert!(unfinished.is_some());
        // Not usable before it is finished, and gone once dropped unfinished.
        assert!(dir
            .usable(1, None, |_, k| Ok(k == b"k"))
            .unwrap()
            .is_empty());
        let unfinished = dir.write(5, 1, b"k".to_vec(), arrays).unwrap();
        drop(unfinished);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        // Cold records of another length than the arrays were written with: refused.
        let short = dir.write(5, 1, b"k".to_vec(), arrays).unwrap().unwrap();
        assert!(short.finish(&mut *bytes_copy(b"col".to_vec())).is_err());
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        write(&dir, 5, b"k", 1).unwrap();
        dir.clear().unwrap();
        assert!(!dir.path().exists());
        dir.clear().unwrap();
    }
}
