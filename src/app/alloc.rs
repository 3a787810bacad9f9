//! The process's allocator: mimalloc, with transparent huge pages asked for on large blocks
//! (`madvise(MADV_HUGEPAGE)`, Linux).
//!
//! mimalloc is built to replace `malloc` for the whole process (its `override` build), so the C
//! libraries linked in (librdkafka above all) use it too. glibc's allocator took about a sixth of
//! `run --role all`'s CPU in a profile (its arenas' locks and free-list consolidation, and blocks
//! freed on another thread than the one that allocated them: librdkafka's messages, the
//! envelopes, the outputs); with mimalloc `run --role all` used about a sixth less CPU per
//! record (README, *Kafka throughput against a pass-through*). It is built without putting its
//! own heap on huge pages (`no_thp`): every fresh 2 MiB of it was then zeroed whole on first
//! touch, a fifth of a short run's CPU on a virtual machine.
//!
//! The index reads its arrays (records, exact-text and block tables, gram dictionaries, posting
//! lists) at random places, gigabytes of them at firehose scale. With 4 KiB pages nearly every
//! such read also misses the TLB and walks the page tables; with 2 MiB pages the TLB covers
//! gigabytes. Most systems leave transparent huge pages to programs that ask for them
//! (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`), so this allocator asks, for
//! blocks of at least `MIN_ADVISED` bytes only: those are few (the index's arrays, grown by
//! doubling) and mimalloc gives each its own pages, so the advice touches nothing else. Where huge
//! pages are off (`never`), the advice is a no-op. Measured in the README (*Scale*).

use std::alloc::{GlobalAlloc, Layout};

use mimalloc::MiMalloc;

/// Blocks at least this large are advised.
pub const MIN_ADVISED: usize = 4 << 20;

/// A transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// mimalloc, advising huge pages on blocks of at least `MIN_ADVISED` bytes.
pub struct HugePages;

// SAFETY: every call is passed to `MiMalloc` unchanged; `advise` only gives the kernel advice on
// whole huge pages inside a block `MiMalloc` just returned.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { MiMalloc.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { MiMalloc.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { MiMalloc.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { MiMalloc.realloc(p, layout, new_size) };
        advise(q, new_size);
        q
    }
}

/// Advises huge pages for the whole huge pages within `len` bytes at `p`, if `len` is at least
/// `MIN_ADVISED`. Returns whether the kernel took the advice.
pub fn advise(p: *mut u8, len: usize) -> bool {
    if p.is_null() || len < MIN_ADVISED {
        return false;
    }
    let start = (p as usize).next_multiple_of(HUGE_PAGE);
    let end = (p as usize + len) / HUGE_PAGE * HUGE_PAGE;
    if end <= start {
        return false;
    }
    #[cfg(target_os = "linux")]
    {
        // SAFETY: the range lies inside a block the caller owns; the advice changes no content.
        unsafe { libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_HUGEPAGE) == 0 }
    }
    #[cfg(not(target_os = "linux"))]
    {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `VmFlags` line of the mapping of `/proc/self/smaps` that holds `addr`.
    #[cfg(target_os = "linux")]
    fn vm_flags(addr: usize) -> Option<String> {
        let smaps = std::fs::read_to_string("/proc/self/smaps").ok()?;
        let mut inside = false;
        for line in smaps.lines() {
            let range = line
                .split_whitespace()
                .next()
                .and_then(|r| r.split_once('-'));
            if let Some((a, b)) = range {
                if let (Ok(a), Ok(b)) = (usize::from_str_radix(a, 16), usize::from_str_radix(b, 16))
                {
                    inside = a <= addr && addr < b;
                    continue;
                }
            }
            if inside {
                if let Some(flags) = line.strip_prefix("VmFlags:") {
                    return Some(flags.to_string());
                }
            }
        }
        None
    }

    #[test]
    fn the_c_libraries_allocate_from_mimalloc_too() {
        // SAFETY: a block from malloc, asked about and freed.
        unsafe {
            let p = libc::malloc(100);
            assert!(!p.is_null());
            assert!(libmimalloc_sys::mi_is_in_heap_region(p.cast()));
            libc::free(p);
        }
    }

    #[test]
    fn large_blocks_are_advised_and_small_ones_left_alone() {
        let big = Layout::from_size_align(3 * MIN_ADVISED, 8).unwrap();
        let small = Layout::from_size_align(MIN_ADVISED - 1, 8).unwrap();
        // SAFETY: the blocks are written within their sizes and freed with their layouts.
        unsafe {
            let p = HugePages.alloc(big);
            assert!(!p.is_null());
            p.write_bytes(7, big.size());
            let q = HugePages.realloc(p, big, 2 * big.size());
            assert_eq!(*q.add(big.size() - 1), 7);
            let s = HugePages.alloc_zeroed(small);
            assert_eq!(*s.add(small.size() - 1), 0);
            assert!(!advise(s, small.size()));
            #[cfg(target_os = "linux")]
            {
                // Where the kernel has transparent huge pages at all, the grown block's mapping
                // carries the advice's `hg` flag.
                if std::path::Path::new("/sys/kernel/mm/transparent_hugepage/enabled").exists() {
                    let inside = (q as usize).next_multiple_of(HUGE_PAGE);
                    let flags = vm_flags(inside).expect("the block's mapping");
                    assert!(flags.split_whitespace().any(|f| f == "hg"), "{flags}");
                }
            }
            HugePages.dealloc(q, Layout::from_size_align(2 * big.size(), 8).unwrap());
            HugePages.dealloc(s, small);
        }
    }
}
