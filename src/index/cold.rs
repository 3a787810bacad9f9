//! Where a generation keeps the cold part of its entries (order key, time, id, text, token
//! hashes): the bytes verification reads only for candidates that pass the cheap gates. The
//! index appends records and reads them back by offset; whether they stay in memory
//! (`InMemory`, the default) or go to a file read back on demand (`io::cold`) is the caller's
//! choice, so the index itself does no I/O (a generation read back whole, `ColdFactory::load`,
//! is read by the factory).

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// One generation's append-only record store.
pub trait ColdStore: Send {
    /// Appends `record`; returns its offset.
    fn append(&mut self, record: &[u8]);

    /// Bytes appended so far (the next record's offset).
    fn len(&self) -> u64;

    /// True when nothing was appended.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The `len` bytes at `offset`: borrowed when in memory, else read into `buf`.
    fn read<'a>(&'a self, offset: u64, len: u32, buf: &'a mut Vec<u8>)
        -> std::io::Result<&'a [u8]>;

    /// Bytes held in process memory.
    fn memory_bytes(&self) -> usize;

    /// The records appended so far, to be copied out later, on another thread, while this
    /// store goes on taking more (`ColdCopy`).
    fn detach(&self) -> std::io::Result<Box<dyn ColdCopy>>;
}

/// The records a store held when it was detached (`ColdStore::detach`).
pub trait ColdCopy: Send {
    /// Copies them, in order, to `w`; their length.
    fn copy_to(&mut self, w: &mut dyn Write) -> std::io::Result<u64>;
}

/// Records copied out of memory.
struct Bytes(Vec<u8>);

impl ColdCopy for Bytes {
    fn copy_to(&mut self, w: &mut dyn Write) -> std::io::Result<u64> {
        w.write_all(&self.0)?;
        Ok(self.0.len() as u64)
    }
}

/// Bytes held in memory, as a `ColdCopy`.
pub fn bytes_copy(b: Vec<u8>) -> Box<dyn ColdCopy> {
    Box::new(Bytes(b))
}

/// Makes the store of each new generation.
pub trait ColdFactory: Send + Sync {
    /// A new, empty store for generation `gen`.
    fn create(&self, gen: i64) -> Box<dyn ColdStore>;

    /// A store for generation `gen` holding the `len` bytes of records at `offset` in `file`
    /// (a generation written out whole, `ColdStore::detach`), to which more can be appended.
    /// The file must not change while the store lives.
    fn load(
        &self,
        gen: i64,
        file: File,
        offset: u64,
        len: u64,
    ) -> std::io::Result<Box<dyn ColdStore>>;
}

/// Records kept in one growing buffer.
#[derive(Default)]
pub struct InMemory(Vec<u8>);

impl ColdStore for InMemory {
    fn append(&mut self, record: &[u8]) {
        self.0.extend_from_slice(record);
    }

    fn len(&self) -> u64 {
        self.0.len() as u64
    }

    fn read<'a>(
        &'a self,
        offset: u64,
        len: u32,
        _buf: &'a mut Vec<u8>,
    ) -> std::io::Result<&'a [u8]> {
        let start = offset as usize;
        self.0
            .get(start..start + len as usize)
            .ok_or_else(|| std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "no record"))
    }

    fn memory_bytes(&self) -> usize {
        self.0.capacity()
    }

    fn detach(&self) -> std::io::Result<Box<dyn ColdCopy>> {
        Ok(bytes_copy(self.0.clone()))
    }
}

/// Makes `InMemory` stores.
#[derive(Default)]
pub struct InMemoryFactory;

impl ColdFactory for InMemoryFactory {
    fn create(&self, _gen: i64) -> Box<dyn ColdStore> {
        Box::<InMemory>::default()
    }

    fn load(
        &self,
        _gen: i64,
        file: File,
        offset: u64,
        len: u64,
    ) -> std::io::Result<Box<dyn ColdStore>> {
        let mut bytes = vec![0u8; usize::try_from(len).map_err(std::io::Error::other)?];
        file.read_exact_at(&mut bytes, offset)?;
        Ok(Box::new(InMemory(bytes)))
    }
}

/// The default factory.
pub fn in_memory() -> Arc<dyn ColdFactory> {
    Arc::new(InMemoryFactory)
}
