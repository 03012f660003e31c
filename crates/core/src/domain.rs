//! Memory domains (the Optane kdb+ study, kdb+ 4.0 `-m`): where a column chunk's bytes
//! live. `dram` is the heap; `fsmem` is a file-backed `mmap` under a directory
//! given at start (a DAX/PMEM mount in production). Every allocation is
//! counted per domain so the server can report memory by domain.

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

/// Counts the heap bytes of a structure that is not a region (a hash table,
/// an index's vectors) for as long as it lives: the owner calls `set` when
/// the structure's allocation changes, and the count goes back on drop.
#[derive(Debug)]
pub struct Tracked {
    stats: Arc<DomainStats>,
    what: MemUse,
    bytes: u64,
}

impl Tracked {
    pub fn new(stats: &Arc<DomainStats>, what: MemUse, bytes: u64) -> Tracked {
        stats.use_counter(what).fetch_add(bytes, Ordering::Relaxed);
        Tracked {
            stats: stats.clone(),
            what,
            bytes,
        }
    }

    /// The structure now holds `bytes`.
    pub fn set(&mut self, bytes: u64) {
        let c = self.stats.use_counter(self.what);
        if bytes >= self.bytes {
            c.fetch_add(bytes - self.bytes, Ordering::Relaxed);
        } else {
            c.fetch_sub(self.bytes - bytes, Ordering::Relaxed);
        }
        self.bytes = bytes;
    }

    pub fn bytes(&self) -> u64 {
        self.bytes
    }
}

impl Drop for Tracked {
    fn drop(&mut self) {
        self.stats
            .use_counter(self.what)
            .fetch_sub(self.bytes, Ordering::Relaxed);
    }
}

/// The allocator for column memory. Cloning shares the counters.
#[derive(Clone)]
pub struct Domains {
    fsmem_dir: Option<PathBuf>,
    stats: Arc<DomainStats>,
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
            next_file: Arc::new(AtomicU64::new(0)),
        })
    }

    pub fn stats(&self) -> &Arc<DomainStats> {
        &self.stats
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
                file.set_len(bytes as u64).map_err(io)?;
                // SAFETY: the file is private to this process (created with
                // create_new under our own name) and never resized while mapped.
                let map = unsafe { MmapMut::map_mut(&file) }.map_err(io)?;
                self.stats.fsmem_files.fetch_add(1, Ordering::Relaxed);
                Backing::File { map, path }
            }
        };
        self.stats
            .use_counter(what)
            .fetch_add(bytes as u64, Ordering::Relaxed);
        Ok(Region {
            backing,
            len: bytes,
            domain,
            what,
            stats: self.stats.clone(),
        })
    }
}

enum Backing {
    Heap {
        ptr: *mut u8,
        layout: std::alloc::Layout,
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
    stats: Arc<DomainStats>,
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
            Backing::Heap { ptr, .. } => *ptr,
            Backing::File { map, .. } => map.as_ptr() as *mut u8,
        }
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        self.stats
            .use_counter(self.what)
            .fetch_sub(self.len as u64, Ordering::Relaxed);
        match &self.backing {
            Backing::Heap { ptr, layout } => {
                // SAFETY: allocated in `alloc` with this layout, freed once.
                unsafe { std::alloc::dealloc(*ptr, *layout) }
            }
            Backing::File { path, .. } => {
                self.stats.fsmem_files.fetch_sub(1, Ordering::Relaxed);
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
    fn fsmem_without_dir_is_a_clear_error() {
        let d = Domains::new(None).unwrap();
        let e = d.alloc(Domain::Fsmem, 10).err().unwrap().to_string();
        assert!(e.contains("--fsmem-dir"), "{e}");
    }
}
