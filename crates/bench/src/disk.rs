//! The raw disk as a peer: sequential write (`dd … conv=fdatasync`) and a
//! cold sequential read of given files, with the page cache emptied first.
//! Benchmarks that write or read files quote their speed as a ratio to these,
//! measured in the same run on the same file system.

use crate::child;
use crate::error::{BenchError, Result};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Instant;

/// Bytes per `read()` in the raw sequential read: large enough that the
/// system call count does not matter, as a streaming reader would use.
pub const RAW_READ_BLOCK_BYTES: usize = 1 << 20;

/// Bytes in a MB as these reports count them (MiB, as `dd bs=1M` does).
pub const MB: f64 = 1024.0 * 1024.0;

/// The raw disk's sequential write speed: `dd if=/dev/zero bs=1M count=N
/// conv=fdatasync` into `work`, MB/s (the time includes the final fdatasync).
pub fn dd(work: &Path, megabytes: u64) -> Result<f64> {
    let file = work.join("dd.bin");
    let t0 = Instant::now();
    let out = Command::new("dd")
        .arg("if=/dev/zero")
        .arg(format!("of={}", file.display()))
        .args(["bs=1M", &format!("count={megabytes}"), "conv=fdatasync"])
        .output()
        .map_err(BenchError::io("running dd"))?;
    let secs = t0.elapsed().as_secs_f64();
    let _ = std::fs::remove_file(&file);
    if !out.status.success() {
        return Err(BenchError::Server(format!(
            "dd failed: {}",
            String::from_utf8_lossy(&out.stderr)
        )));
    }
    Ok(megabytes as f64 / secs)
}

/// The regular files directly under `dir`, sorted by name.
pub fn files_in(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .map_err(BenchError::io(format!("listing {}", dir.display())))?
        .flatten()
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.path())
        .collect();
    files.sort();
    Ok(files)
}

/// Drops the files under `dir` from the page cache (they must be clean:
/// written and closed), so that the next read comes from the disk. Returns
/// how, or `None` if it could not.
pub fn evict(dir: &Path) -> Option<&'static str> {
    use std::os::fd::AsRawFd;
    let files = files_in(dir).ok()?;
    let mut ok = true;
    for f in files {
        match std::fs::File::open(&f) {
            Ok(file) => {
                let fd = file.as_raw_fd();
                // SAFETY: fd is a valid open descriptor for the call's duration.
                let r = unsafe {
                    libc::fdatasync(fd);
                    libc::posix_fadvise(fd, 0, 0, libc::POSIX_FADV_DONTNEED)
                };
                ok &= r == 0;
            }
            Err(_) => ok = false,
        }
    }
    // fadvise is advice; where we may (root), drop the clean page cache
    // outright so that the read really comes from the disk.
    if std::fs::write("/proc/sys/vm/drop_caches", "1").is_ok() {
        return Some("dropped (/proc/sys/vm/drop_caches)");
    }
    ok.then_some("emptied for those files (posix_fadvise DONTNEED)")
}

/// Whether every eviction of a run emptied the page cache, and how: a
/// benchmark that calls its reads cold must have emptied it before each.
#[derive(Debug, Default)]
pub struct ColdReads {
    how: Option<&'static str>,
    failed: bool,
}

impl ColdReads {
    /// Evicts `dir` (see `evict`) and notes whether it worked.
    pub fn evict(&mut self, dir: &Path) {
        match evict(dir) {
            Some(how) => {
                self.how.get_or_insert(how);
            }
            None => self.failed = true,
        }
    }

    /// How the cache was emptied, if it was every time.
    pub fn how(&self) -> Option<&'static str> {
        if self.failed {
            None
        } else {
            self.how
        }
    }
}

/// A raw sequential read of `files` with `threads` readers, each taking
/// whole files from a shared queue (largest first) and reading them in
/// `RAW_READ_BLOCK_BYTES` blocks, as a parallel reload does. Returns (bytes,
/// MB/s). Call `evict` first for a cold read.
pub fn read_files(files: &[PathBuf], threads: usize) -> Result<(u64, f64)> {
    use std::io::Read;
    each_file(files, threads, |f, bytes, buf| {
        // One buffer per thread, allocated once: the read measures the disk.
        buf.resize(RAW_READ_BLOCK_BYTES, 0);
        let mut file =
            std::fs::File::open(f).map_err(BenchError::io(format!("opening {}", f.display())))?;
        loop {
            let n = file
                .read(buf)
                .map_err(BenchError::io(format!("reading {}", f.display())))?;
            if n == 0 {
                return Ok(());
            }
            bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
    })
}

/// A mapped read of `files`, as `read_files` but each file mapped whole by
/// the Hot Restart reload's own `map_chunk_file` (huge pages where the file
/// system allows, populated), then unmapped. That is how a reload reads a
/// chunk file before it checks a byte of it, so this is the reload's floor
/// on this disk. Call `evict` first.
pub fn map_files(files: &[PathBuf], threads: usize) -> Result<(u64, f64)> {
    each_file(files, threads, |f, bytes, _| {
        // SAFETY: the benchmark's own files, which nothing changes while it
        // reads them; the mapping is dropped without a byte of it read here.
        let map = unsafe { tickdb_hotrestart::map_chunk_file(f) }
            .map_err(|e| BenchError::Server(format!("mapping {}: {e}", f.display())))?;
        bytes.fetch_add(map.map_or(0, |m| m.len() as u64), Ordering::Relaxed);
        Ok(())
    })
}

/// Runs `one` on every file of `files` from `threads` threads, each taking
/// whole files from a shared queue, largest first; `one` adds the bytes it
/// read, and may keep a buffer in its thread's scratch `Vec` from one file
/// to the next. Returns (bytes, MB/s over the whole run).
fn each_file(
    files: &[PathBuf],
    threads: usize,
    one: impl Fn(&Path, &AtomicU64, &mut Vec<u8>) -> Result<()> + Sync,
) -> Result<(u64, f64)> {
    let mut sized: Vec<(u64, &PathBuf)> = files
        .iter()
        .map(|f| (std::fs::metadata(f).map(|m| m.len()).unwrap_or(0), f))
        .collect();
    sized.sort_by_key(|s| std::cmp::Reverse(s.0));
    let next = AtomicUsize::new(0);
    let bytes = AtomicU64::new(0);
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..threads.max(1))
            .map(|_| {
                s.spawn(|| -> Result<()> {
                    let mut scratch = Vec::new();
                    loop {
                        child::check_interrupt()?;
                        let Some((_, f)) = sized.get(next.fetch_add(1, Ordering::Relaxed)) else {
                            return Ok(());
                        };
                        one(f, &bytes, &mut scratch)?;
                    }
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Server("reader panicked".into())))
            })
            .collect()
    });
    let secs = t0.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    let bytes = bytes.load(Ordering::Relaxed);
    Ok((bytes, bytes as f64 / MB / secs))
}

/// Bytes of the regular files directly under `dir`.
pub fn dir_bytes(dir: &Path) -> u64 {
    files_in(dir)
        .map(|fs| {
            fs.iter()
                .filter_map(|f| std::fs::metadata(f).ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}
