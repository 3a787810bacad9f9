//! The process's allocator: the system's, with transparent huge pages asked for on large
//! blocks (`madvise(MADV_HUGEPAGE)`, Linux).
//!
//! The index reads its arrays (records, exact-text and block tables, gram dictionaries, posting
//! lists) at random places, gigabytes of them at firehose scale. With 4 KiB pages nearly every
//! such read also misses the TLB and walks the page tables; with 2 MiB pages the TLB covers
//! gigabytes. Most systems leave transparent huge pages to programs that ask for them
//! (`/sys/kernel/mm/transparent_hugepage/enabled` = `madvise`), so this allocator asks, for
//! blocks of at least `MIN_ADVISED` bytes only: those are few (the index's arrays, grown by
//! doubling) and glibc maps each on its own, so the advice touches nothing else. Where huge
//! pages are off (`never`), the advice is a no-op. Measured in the README (*Scale*).
//!
//! The smaller blocks (hash maps, posting lists, spill buffers) live in glibc's heaps, out of
//! this allocator's reach. glibc advises those itself under `GLIBC_TUNABLES=glibc.malloc.hugetlb=1`
//! (2.35 and later), a tunable read only when a process starts, so `with_malloc_huge_pages`
//! starts the binary again, once, with it set.

use std::alloc::{GlobalAlloc, Layout, System};

/// Blocks at least this large are advised.
pub const MIN_ADVISED: usize = 4 << 20;

/// A transparent huge page.
const HUGE_PAGE: usize = 2 << 20;

/// `System`, advising huge pages on blocks of at least `MIN_ADVISED` bytes.
pub struct HugePages;

// SAFETY: every call is passed to `System` unchanged; `advise` only gives the kernel advice on
// whole huge pages inside a block `System` just returned.
unsafe impl GlobalAlloc for HugePages {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc_zeroed(layout) };
        advise(p, layout.size());
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) }
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = unsafe { System.realloc(p, layout, new_size) };
        advise(q, new_size);
        q
    }
}

/// The glibc tunable under which malloc advises huge pages on its heaps and every block it maps.
const GLIBC_HUGETLB: &str = "glibc.malloc.hugetlb";

/// Replaces the process with itself (same binary path, arguments, pid and name), with
/// `glibc.malloc.hugetlb=1` added to `GLIBC_TUNABLES`, when it runs on glibc, the kernel has
/// transparent huge pages, and `GLIBC_TUNABLES` does not name that tunable already (so it
/// happens once; setting `GLIBC_TUNABLES=glibc.malloc.hugetlb=0` keeps a process as started).
/// Call it first thing in `main`, before any thread starts. Returns when it does not replace
/// the process, or cannot.
pub fn with_malloc_huge_pages() {
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    {
        use std::os::unix::process::CommandExt;
        let current = std::env::var_os("GLIBC_TUNABLES");
        let Some(value) = tunables_with_hugetlb(current.as_deref().map(|v| v.to_str())) else {
            return;
        };
        let thp = std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled");
        if !thp.is_ok_and(|t| !t.contains("[never]")) {
            return;
        }
        // The binary's own path (not /proc/self/exe), so that the process keeps its name.
        let Ok(exe) = std::env::current_exe() else {
            return;
        };
        let mut args = std::env::args_os();
        let mut cmd = std::process::Command::new(exe);
        if let Some(arg0) = args.next() {
            cmd.arg0(arg0);
        }
        // Returns only if the process could not be replaced: it goes on as it is.
        let _ = cmd.args(args).env("GLIBC_TUNABLES", value).exec();
    }
}

/// `GLIBC_TUNABLES` with `glibc.malloc.hugetlb=1` added, or `None` when `current` names that
/// tunable already or is not UTF-8 (`Some(None)`).
fn tunables_with_hugetlb(current: Option<Option<&str>>) -> Option<String> {
    let named = |v: &str| {
        v.split(':')
            .any(|t| t.split('=').next() == Some(GLIBC_HUGETLB))
    };
    match current {
        None | Some(Some("")) => Some(format!("{GLIBC_HUGETLB}=1")),
        Some(Some(v)) if named(v) => None,
        Some(Some(v)) => Some(format!("{v}:{GLIBC_HUGETLB}=1")),
        Some(None) => None,
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
    fn the_hugetlb_tunable_is_added_once_and_an_explicit_setting_kept() {
        let on = "glibc.malloc.hugetlb=1";
        assert_eq!(tunables_with_hugetlb(None).as_deref(), Some(on));
        assert_eq!(tunables_with_hugetlb(Some(Some(""))).as_deref(), Some(on));
        assert_eq!(
            tunables_with_hugetlb(Some(Some("glibc.malloc.arena_max=2"))).as_deref(),
            Some("glibc.malloc.arena_max=2:glibc.malloc.hugetlb=1")
        );
        assert_eq!(tunables_with_hugetlb(Some(Some(on))), None);
        assert_eq!(
            tunables_with_hugetlb(Some(Some(
                "glibc.malloc.hugetlb=0:glibc.malloc.arena_max=2"
            ))),
            None
        );
        assert_eq!(tunables_with_hugetlb(Some(None)), None);
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
