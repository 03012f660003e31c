//! Memory domains (the Optane kdb+ study, kdb+ 4.0 `-m`): where a column chunk's bytes
//! live. `dram` is the heap; `fsmem` is a file-backed `mmap` under a directory
//! given at start (a DAX/PMEM mount in production). Every allocation is
//! counted per domain, for the whole store and per table, so the server can
//! report memory by domain and by table.
//!
//! Allocating a region must be cheap, because a table allocates its next
//! chunk's regions while updates are being applied: large DRAM regions are
//! anonymous mappings the kernel zeroes page by page on first touch (no
//! memset of the whole chunk up front), and fsmem files get their blocks
//! with `fallocate` when they are created, so a later page fault never has
//! to allocate a block (and a full file system is an error here, not a
//! SIGBUS on some later write). `Region::prefault` touches pages ahead of
//! the writer, so a table can take page faults after it has published its
//! rows rather than while the rows wait to become visible.

use crate::error::{CoreError, Result};
use memmap2::MmapMut;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Domain {
    Dram,
    Fsmem,
}

impl Domain {
    pub fn parse(s: &str) -> Option<Domain> {
        match s.to_ascii_lowercase().as_str() {
            "dram" | "heap" => Some(Domain::Dram),
            "fsmem" | "pmem" | "optane" => Some(Domain::Fsmem),
            _ => None,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Domain::Dram => "dram",
            Domain::Fsmem => "fsmem",
        }
    }
}

/// Alignment of every region: Arrow wants 8-byte aligned buffers and 64 keeps
/// SIMD kernels on their fast path.
pub const REGION_ALIGN_BYTES: usize = 64;
/// DRAM regions of at least this many bytes are anonymous mappings of their
/// own rather than heap allocations. The heap's zeroed allocation at a
/// 64-byte alignment is an allocation plus a memset that touches every page
/// at once: for a 65,536-row quote chunk (3 MiB) that took 1-1.5 ms, on the
/// apply path, every few seconds. A fresh mapping costs one system call and
/// its pages are zeroed by the kernel as they are first written.
pub const DRAM_MAP_BYTES_MIN: usize = 64 * 1024;
/// The page size `Region::prefault` steps by: the smallest page Linux uses
/// (on a system with larger pages it touches some pages more than once,
/// which is harmless).
pub const PAGE_BYTES: usize = 4096;

/// Byte counters of everything a store allocates, shared by every region a
/// `Domains` hands out and every `Tracked` structure. Each counter is
/// adjusted where the memory is allocated and freed (a region's `Drop`, a
/// `Tracked` guard's `set` and `Drop`), so reading them costs nothing and
/// needs no walk over the data.
#[derive(Debug, Default)]
pub struct DomainStats {
    /// Column chunk regions in DRAM.
    pub dram_bytes: AtomicU64,
    /// Column chunk regions in fsmem.
    pub fsmem_bytes: AtomicU64,
    pub fsmem_files: AtomicU64,
    /// Symbol tables (DRAM): the interned names' regions and the hash
    /// tables that map a name to its id.
    pub symbols_bytes: AtomicU64,
    /// Per-chunk symbol row indexes in DRAM (an index in fsmem, where its
    /// symbol column is, counts in `fsmem_bytes`).
    pub indexes_bytes: AtomicU64,
    /// Keyed tables' cached latest-row snapshots, the rows they copied (DRAM).
    pub cache_bytes: AtomicU64,
}

/// What a region or a tracked structure is counted as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemUse {
    /// Column chunk data in a domain.
    Column(Domain),
    Symbols,
    /// A chunk's symbol index, in its symbol column's domain.
    Index(Domain),
    Cache,
}

impl DomainStats {
    fn counter(&self, d: Domain) -> &AtomicU64 {
        match d {
            Domain::Dram => &self.dram_bytes,
            Domain::Fsmem => &self.fsmem_bytes,
        }
    }

    fn use_counter(&self, u: MemUse) -> &AtomicU64 {
        match u {
            MemUse::Column(d) | MemUse::Index(d @ Domain::Fsmem) => self.counter(d),
            MemUse::Index(Domain::Dram) => &self.indexes_bytes,
            MemUse::Symbols => &self.symbols_bytes,
            MemUse::Cache => &self.cache_bytes,
        }
    }

    /// Bytes of column chunks in domain `d`.
    pub fn bytes(&self, d: Domain) -> u64 {
        self.counter(d).load(Ordering::Relaxed)
    }

    /// Bytes counted as `u`.
    pub fn use_bytes(&self, u: MemUse) -> u64 {
        self.use_counter(u).load(Ordering::Relaxed)
    }
}

/// The counters one allocation is added to: the store's, and its table's
/// when the allocation belongs to a table (`Domains::for_table`).
#[derive(Debug, Clone)]
struct Counters {
    store: Arc<DomainStats>,
    table: Option<Arc<DomainStats>>,
}

impl Counters {
    fn add(&self, what: MemUse, bytes: u64) {
        self.store
            .use_counter(what)
            .fetch_add(bytes, Ordering::Relaxed);
        if let Some(t) = &self.table {
            t.use_counter(what).fetch_add(bytes, Ordering::Relaxed);
        }
    }

    fn sub(&self, what: MemUse, bytes: u64) {
        self.store
            .use_counter(what)
            .fetch_sub(bytes, Ordering::Relaxed);
        if let Some(t) = &self.table {
            t.use_counter(what).fetch_sub(bytes, Ordering::Relaxed);
        }
    }
}

/// Counts the heap bytes of a structure that is not a region (a hash table,
/// an index's vectors) for as long as it lives: the owner calls `set` when
/// the structure's allocation changes, and the count goes back on drop.
#[derive(Debug)]
pub struct Tracked {
    counters: Counters,
    what: MemUse,
    bytes: u64,
}

impl Tracked {
    /// Counted in `domains`' counters (the store's, and the table's when
    /// `domains` is a table's).
    pub fn new(domains: &Domains, what: MemUse, bytes: u64) -> Tracked {
        let counters = domains.counters();
        counters.add(what, bytes);
        Tracked {
            counters,
            what,
            bytes,
        }
    }

    /// The structure now holds `bytes`.
    pub fn set(&mut self, bytes: u64) {
        if bytes >= self.bytes {
            self.counters.add(self.what, bytes - self.bytes);
        } else {
            self.counters.sub(self.what, self.bytes - bytes);
        }
        self.bytes = bytes;
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.counters.sub(self.what, self.bytes);
    }
}

/// The allocator for column memory. Cloning shares the counters.
#[derive(Clone)]
pub struct Domains {
    fsmem_dir: Option<PathBuf>,
    stats: Arc<DomainStats>,
    /// A table's own counters (`for_table`), kept besides the store's.
    table: Option<Arc<DomainStats>>,
    next_file: Arc<AtomicU64>,
}

impl Domains {
    /// `fsmem_dir`: where file-backed regions go. Leftover region files from a
    /// previous run are removed: fsmem is volatile memory, not persistence.
    pub fn new(fsmem_dir: Option<&Path>) -> Result<Domains> {
        if let Some(dir) = fsmem_dir {
            std::fs::create_dir_all(dir).map_err(|e| CoreError::DomainIo {
                path: dir.to_path_buf(),
                source: e,
            })?;
            let entries = std::fs::read_dir(dir).map_err(|e| CoreError::DomainIo {
                path: dir.to_path_buf(),
                source: e,
            })?;
            for entry in entries.flatten() {
                let name = entry.file_name();
                if name.to_string_lossy().ends_with(".fsmem") {
                    let _ = std::fs::remove_file(entry.path());
                }
            }
        }
        Ok(Domains {
            fsmem_dir: fsmem_dir.map(|p| p.to_path_buf()),
            stats: Arc::new(DomainStats::default()),
            table: None,
            next_file: Arc::new(AtomicU64::new(0)),
        })
    }

    /// The same allocator, counting what it allocates for one table in
    /// counters of its own too (`table_stats`), besides the store's.
    pub fn for_table(&self) -> Domains {
        Domains {
            table: Some(Arc::new(DomainStats::default())),
            ..self.clone()
        }
    }

    /// The store's counters: every table's allocations.
    pub fn stats(&self) -> &Arc<DomainStats> {
        &self.stats
    }

    /// The table's own counters, for a `for_table` allocator.
    pub fn table_stats(&self) -> Option<&Arc<DomainStats>> {
        self.table.as_ref()
    }

    fn counters(&self) -> Counters {
        Counters {
            store: self.stats.clone(),
            table: self.table.clone(),
        }
    }

    pub fn has_fsmem(&self) -> bool {
        self.fsmem_dir.is_some()
    }

    /// A zeroed region of `bytes` bytes in `domain`, for column data.
    pub fn alloc(&self, domain: Domain, bytes: usize) -> Result<Region> {
        self.alloc_for(MemUse::Column(domain), bytes)
    }

    /// A zeroed region of `bytes` bytes counted as `what`; column data and
    /// indexes live in their column's domain, everything else in DRAM.
    pub fn alloc_for(&self, what: MemUse, bytes: usize) -> Result<Region> {
        let domain = match what {
            MemUse::Column(d) | MemUse::Index(d) => d,
            MemUse::Symbols | MemUse::Cache => Domain::Dram,
        };
        let bytes = bytes
            .max(REGION_ALIGN_BYTES)
            .next_multiple_of(REGION_ALIGN_BYTES);
        let backing = match domain {
            Domain::Dram if bytes >= DRAM_MAP_BYTES_MIN => {
                // SAFETY: a fresh private anonymous mapping; no address hint,
                // no file. The kernel hands out zeroed pages.
                let ptr = unsafe {
                    libc::mmap(
                        std::ptr::null_mut(),
                        bytes,
                        libc::PROT_READ | libc::PROT_WRITE,
                        libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                        -1,
                        0,
                    )
                };
                if ptr == libc::MAP_FAILED {
                    return Err(CoreError::Domain(format!(
                        "out of memory mapping {bytes} bytes of dram: {}",
                        std::io::Error::last_os_error()
                    )));
                }
                Backing::Mapped {
                    ptr: ptr as *mut u8,
                }
            }
            Domain::Dram => {
                let layout = std::alloc::Layout::from_size_align(bytes, REGION_ALIGN_BYTES)
                    .map_err(|e| CoreError::Domain(e.to_string()))?;
                // SAFETY: layout has a non-zero size (at least REGION_ALIGN_BYTES).
                let ptr = unsafe { std::alloc::alloc_zeroed(layout) };
                if ptr.is_null() {
                    return Err(CoreError::Domain(format!(
                        "out of memory allocating {bytes} bytes of dram"
                    )));
                }
                Backing::Heap { ptr, layout }
            }
            Domain::Fsmem => {
                let dir = self.fsmem_dir.as_ref().ok_or_else(|| {
                    CoreError::Domain(
                        "a column is placed in fsmem but no --fsmem-dir was given".into(),
                    )
                })?;
                let n = self.next_file.fetch_add(1, Ordering::Relaxed);
                let path = dir.join(format!("{}-{n}.fsmem", std::process::id()));
                let io = |e| CoreError::DomainIo {
                    path: path.clone(),
                    source: e,
                };
                let file = std::fs::OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)
                    .map_err(io)?;
                // The file is sized once and never truncated while mapped:
                // shrinking a mapped file turns later reads into SIGBUS.
                // Its blocks are allocated now, so no page fault has to
                // allocate one later and a full file system fails here,
                // where the caller sees an error, instead of as a SIGBUS on
                // a write to the mapping.
                allocate_file(&file, bytes as u64).map_err(io)?;
                // SAFETY: the file is private to this process (created with
                // create_new under our own name) and never resized while mapped.
                let map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
                self.stats.fsmem_files.fetch_add(1, Ordering::Relaxed);
                Backing::File { map, path }
            }
        };
        let counters = self.counters();
        counters.add(what, bytes as u64);
        Ok(Region {
            backing,
            len: bytes,
            domain,
            what,
            counters,
        })
    }
}

/// Gives `file` `bytes` bytes of allocated blocks (`fallocate`); where the
/// file system cannot (`EOPNOTSUPP`), a sparse file of that size instead.
fn allocate_file(file: &std::fs::File, bytes: u64) -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    let len = libc::off_t::try_from(bytes)
        .map_err(|_| std::io::Error::other(format!("{bytes} bytes is too large a file")))?;
    loop {
        // SAFETY: a valid open file descriptor; mode 0 allocates and
        // extends the file, it never shrinks it.
        let r = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, len) };
        if r == 0 {
            return Ok(());
        }
        let e = std::io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EINTR) => continue,
            Some(libc::EOPNOTSUPP) => return file.set_len(bytes),
            _ => return Err(e),
        }
    }
}

enum Backing {
    Heap {
        ptr: *mut u8,
        layout: std::alloc::Layout,
    },
    /// An anonymous mapping of `Region::len` bytes.
    Mapped {
        ptr: *mut u8,
    },
    File {
        map: MmapMut,
        path: PathBuf,
    },
}

/// A fixed-size, zeroed, 64-byte-aligned block of memory in one domain.
///
/// A region is written by exactly one writer, strictly append-only, and read
/// by any number of readers only below a length the writer published before
/// they looked (see `store::column`). That discipline is what lets readers
/// hold `Arc<Region>` without a lock.
pub struct Region {
    backing: Backing,
    len: usize,
    domain: Domain,
    what: MemUse,
    counters: Counters,
}

// SAFETY: the raw pointer is uniquely owned by this Region; concurrent access
// follows the single-writer / read-below-published-length rule above.
unsafe impl Send for Region {}
unsafe impl Sync for Region {}

impl Region {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn domain(&self) -> Domain {
        self.domain
    }

    pub fn as_ptr(&self) -> *mut u8 {
        match &self.backing {
            Backing::Heap { ptr, .. } | Backing::Mapped { ptr } => *ptr,
            Backing::File { map, .. } => map.as_ptr() as *mut u8,
        }
    }

    /// Writes a zero byte into every page that starts within `from..to`
    /// (clamped to the region), so that those pages are in memory and
    /// writable before the writer gets there: the page faults are taken now,
    /// at a moment the caller picks, instead of by a later append. Returns
    /// the pages touched.
    ///
    /// # Safety
    /// The caller is the region's single writer, and nothing at or beyond
    /// `from` has been written or published to readers yet (those bytes are
    /// still zero, and no reader looks at them).
    pub unsafe fn prefault(&self, from: usize, to: usize) -> usize {
        let to = to.min(self.len);
        let mut at = from.next_multiple_of(PAGE_BYTES);
        let mut pages = 0;
        while at < to {
            // A volatile write, so that it is not optimized away: a read
            // would map a shared zero page (or a file hole) read-only and
            // the writer's first write would fault again.
            std::ptr::write_volatile(self.as_ptr().add(at), 0u8);
            at += PAGE_BYTES;
            pages += 1;
        }
        pages
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.counters.sub(self.what, self.len as u64);
        match &self.backing {
            Backing::Heap { ptr, layout } => {
                // SAFETY: allocated in `alloc` with this layout, freed once.
                unsafe { std::alloc::dealloc(*ptr, *layout) }
            }
            Backing::Mapped { ptr } => {
                // SAFETY: mapped in `alloc` with this length, unmapped once;
                // no buffer outlives the region (they hold an Arc of it).
                unsafe { libc::munmap(*ptr as *mut libc::c_void, self.len) };
            }
            Backing::File { path, .. } => {
                self.counters
                    .store
                    .fsmem_files
                    .fetch_sub(1, Ordering::Relaxed);
                // The mapping itself is dropped with `map`; unlinking first is
                // fine on Unix (the inode lives until unmapped).
                let _ = std::fs::remove_file(path);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounts_per_domain_and_cleans_files() {
        let dir = tempfile::tempdir().unwrap();
        let d = Domains::new(Some(dir.path())).unwrap();
        let a = d.alloc(Domain::Dram, 100).unwrap();
        let b = d.alloc(Domain::Fsmem, 4096).unwrap();
        assert_eq!(d.stats().bytes(Domain::Dram), 128);
        assert_eq!(d.stats().bytes(Domain::Fsmem), 4096);
        assert_eq!(a.as_ptr() as usize % REGION_ALIGN_BYTES, 0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
        drop(a);
        drop(b);
        assert_eq!(d.stats().bytes(Domain::Dram), 0);
        assert_eq!(d.stats().bytes(Domain::Fsmem), 0);
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
    }

    #[test]
    fn large_dram_regions_are_mapped_zeroed_and_prefaulted_in_place() {
        let d = Domains::new(None).unwrap();
        let r = d.alloc(Domain::Dram, DRAM_MAP_BYTES_MIN * 4 + 1).unwrap();
        assert!(matches!(r.backing, Backing::Mapped { .. }));
        assert_eq!(r.len() % REGION_ALIGN_BYTES, 0);
        assert_eq!(d.stats().bytes(Domain::Dram), r.len() as u64);
        // SAFETY: nothing written to or read from the region yet.
        let pages = unsafe { r.prefault(10, 3 * PAGE_BYTES + 1) };
        // Pages starting at 4096, 8192 and 12288; not the one holding 10.
        assert_eq!(pages, 3);
        // SAFETY: the region is len() bytes long.
        let bytes = unsafe { std::slice::from_raw_parts(r.as_ptr(), r.len()) };
        assert!(bytes.iter().all(|b| *b == 0));
        // Clamped to the region's end.
        assert_eq!(
            unsafe { r.prefault(r.len() - 1, r.len() + 10 * PAGE_BYTES) },
            0
        );
        drop(r);
        assert_eq!(d.stats().bytes(Domain::Dram), 0);
        let small = d.alloc(Domain::Dram, 100).unwrap();
        assert!(matches!(small.backing, Backing::Heap { .. }));
    }

    #[test]
    fn fsmem_files_have_their_blocks_and_tables_their_own_counts() {
        use std::os::unix::fs::MetadataExt;
        let dir = tempfile::tempdir().unwrap();
        let d = Domains::new(Some(dir.path())).unwrap();
        let t1 = d.for_table();
        let t2 = d.for_table();
        let a = t1.alloc(Domain::Fsmem, 1 << 20).unwrap();
        let b = t2.alloc(Domain::Dram, 1000).unwrap();
        let mut tracked = Tracked::new(&t2, MemUse::Symbols, 10);
        tracked.set(30);
        let file = std::fs::read_dir(dir.path())
            .unwrap()
            .next()
            .unwrap()
            .unwrap();
        let meta = file.metadata().unwrap();
        assert_eq!(meta.len(), 1 << 20);
        // Allocated up front (fallocate), not a sparse file.
        assert!(meta.blocks() * 512 >= 1 << 20, "{} blocks", meta.blocks());
        let (s1, s2) = (t1.table_stats().unwrap(), t2.table_stats().unwrap());
        assert_eq!(s1.bytes(Domain::Fsmem), 1 << 20);
        assert_eq!(s1.bytes(Domain::Dram), 0);
        assert_eq!(s2.bytes(Domain::Dram), 1024);
        assert_eq!(s2.use_bytes(MemUse::Symbols), 30);
        assert_eq!(d.stats().bytes(Domain::Fsmem), 1 << 20);
        assert_eq!(d.stats().bytes(Domain::Dram), 1024);
        assert_eq!(d.stats().use_bytes(MemUse::Symbols), 30);
        assert!(d.table_stats().is_none());
        drop((a, b, tracked));
        for s in [d.stats(), s1, s2] {
            assert_eq!(s.bytes(Domain::Fsmem) + s.bytes(Domain::Dram), 0);
            assert_eq!(s.use_bytes(MemUse::Symbols), 0);
        }
    }

    #[test]
    fn fsmem_without_dir_is_a_clear_error() {
        let d = Domains::new(None).unwrap();
        let e = d.alloc(Domain::Fsmem, 10).err().unwrap().to_string();
        assert!(e.contains("--fsmem-dir"), "{e}");
    }
}
