//! Where a generation keeps the cold part of its entries (order key, time, id, text, token
//! hashes): the bytes verification reads only for candidates that pass the cheap gates. The
//! index appends records and reads them back by offset; whether they stay in memory
//! (`InMemory`, the default) or go to a file read back on demand (`io::cold`) is the caller's
//! choice, so the index itself does no I/O.

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
}

/// Makes the store of each new generation.
pub trait ColdFactory: Send + Sync {
    /// A new, empty store for generation `gen`.
    fn create(&self, gen: i64) -> Box<dyn ColdStore>;
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
}

/// Makes `InMemory` stores.
#[derive(Default)]
pub struct InMemoryFactory;

impl ColdFactory for InMemoryFactory {
    fn create(&self, _gen: i64) -> Box<dyn ColdStore> {
        Box::<InMemory>::default()
    }
}

/// The default factory.
pub fn in_memory() -> Arc<dyn ColdFactory> {
    Arc::new(InMemoryFactory)
}
