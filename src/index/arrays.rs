//! Flat little-endian arrays, each behind its length, written and read through a hash: the
//! codec of the sealed-generation files (`snapshot`), which each part of a generation uses to
//! write and read its own arrays. A leaf: it knows nothing of what the arrays hold.

use std::io::{self, Read, Write};

use bytemuck::Pod;
use xxhash_rust::xxh3::Xxh3;

/// A writer that hashes and counts what it writes.
pub(crate) struct Out<'a> {
    w: &'a mut dyn Write,
    hash: Xxh3,
    bytes: u64,
}

impl<'a> Out<'a> {
    pub(crate) fn new(w: &'a mut dyn Write) -> Out<'a> {
        Out {
            w,
            hash: Xxh3::new(),
            bytes: 0,
        }
    }

    /// Bytes written so far.
    pub(crate) fn bytes(&self) -> u64 {
        self.bytes
    }

    /// The hash of what was written so far.
    pub(crate) fn digest(&self) -> u64 {
        self.hash.digest()
    }

    fn raw(&mut self, b: &[u8]) -> io::Result<()> {
        self.hash.update(b);
        self.bytes += b.len() as u64;
        self.w.write_all(b)
    }

    pub(crate) fn u64(&mut self, x: u64) -> io::Result<()> {
        self.raw(&x.to_le_bytes())
    }

    /// `s`, behind its length.
    pub(crate) fn slice<T: Pod>(&mut self, s: &[T]) -> io::Result<()> {
        self.u64(s.len() as u64)?;
        self.raw(bytemuck::cast_slice(s))
    }
}

/// A reader of at most `left` bytes that hashes what it reads.
pub(crate) struct In<'a> {
    r: &'a mut dyn Read,
    hash: Xxh3,
    left: u64,
}

impl<'a> In<'a> {
    /// Reads at most `left` bytes of `r`.
    pub(crate) fn new(r: &'a mut dyn Read, left: u64) -> In<'a> {
        In {
            r,
            hash: Xxh3::new(),
            left,
        }
    }

    /// Bytes not read yet.
    pub(crate) fn left(&self) -> u64 {
        self.left
    }

    /// The hash of what was read so far.
    pub(crate) fn digest(&self) -> u64 {
        self.hash.digest()
    }

    fn raw(&mut self, b: &mut [u8]) -> io::Result<()> {
        if b.len() as u64 > self.left {
            return Err(invalid("an array runs past the end"));
        }
        self.r.read_exact(b)?;
        self.left -= b.len() as u64;
        self.hash.update(b);
        Ok(())
    }

    pub(crate) fn u64(&mut self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        self.raw(&mut b)?;
        Ok(u64::from_le_bytes(b))
    }

    /// A `u64` that must fit in a `u32`.
    pub(crate) fn u32(&mut self) -> io::Result<u32> {
        u32::try_from(self.u64()?).map_err(|_| invalid("a field is out of range"))
    }

    /// An array `slice` wrote.
    pub(crate) fn vec<T: Pod>(&mut self) -> io::Result<Vec<T>> {
        let n = self.u64()?;
        let size = std::mem::size_of::<T>() as u64;
        if n.checked_mul(size).is_none_or(|b| b > self.left) {
            return Err(invalid("an array runs past the end"));
        }
        let mut v: Vec<T> = bytemuck::allocation::zeroed_vec(n as usize);
        self.raw(bytemuck::cast_slice_mut(&mut v))?;
        Ok(v)
    }
}

/// An `InvalidData` error: the arrays are not what was written.
pub(crate) fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}
