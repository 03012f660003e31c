//! The I/O seam. Every file operation the writer, recovery and repair make
//! goes through `Storage`, so the same code runs on real files (`FsStorage`)
//! and under fault injection and simulated power loss (`FaultyStorage`).
//! The streaming `JournalReader` reads real files directly: it only reads.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// An open file, written at explicit offsets (no shared cursor).
pub trait StorageFile: Send + Sync {
    /// One positional write; may write fewer bytes than asked (a short write).
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<usize>;
    /// Truncates or extends the file. Not durable until `sync_data`.
    fn set_len(&mut self, len: u64) -> io::Result<()>;
    /// fdatasync: returns after the file's data (and its length) is on disk.
    fn sync_data(&mut self) -> io::Result<()>;
    fn len(&self) -> io::Result<u64>;
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
}

/// The file operations the journal uses.
pub trait Storage: Send + Sync {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()>;
    /// Names of the entries in `dir` (files and directories).
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>>;
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>>;
    fn file_len(&self, path: &Path) -> io::Result<u64>;
    /// Creates a file that must not exist yet, for writing.
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    /// Opens an existing file for writing (not appending: writes are positional).
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>>;
    fn remove_file(&self, path: &Path) -> io::Result<()>;
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// fsync of the directory itself, which makes created, renamed and
    /// removed names durable. Returns after the fsync.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
    /// Takes an exclusive lock on the directory (a `LOCK` file in it), held
    /// until the returned guard is dropped. Fails at once if held elsewhere.
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>>;
    /// The wall clock, nanoseconds since the Unix epoch (UTC). Part of the seam
    /// so that tests can move the clock across midnight.
    fn now_unix_ns(&self) -> i64 {
        system_now_ns()
    }
}

pub(crate) fn system_now_ns() -> i64 {
    match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_nanos().min(i64::MAX as u128) as i64,
        Err(_) => 0,
    }
}

/// Real files through `std::fs`.
#[derive(Debug, Default, Clone, Copy)]
pub struct FsStorage;

struct FsFile(File);

impl StorageFile for FsFile {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<usize> {
        #[cfg(unix)]
        {
            use std::os::unix::fs::FileExt;
            loop {
                match self.0.write_at(buf, offset) {
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    r => return r,
                }
            }
        }
        #[cfg(not(unix))]
        {
            use std::io::{Seek, SeekFrom, Write};
            self.0.seek(SeekFrom::Start(offset))?;
            self.0.write(buf)
        }
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }
    fn sync_data(&mut self) -> io::Result<()> {
        self.0.sync_data()
    }
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }
}

struct FsLock(#[allow(dead_code)] File);

impl Storage for FsStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        std::fs::create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        let mut out = Vec::new();
        for e in std::fs::read_dir(dir)? {
            let e = e?;
            if let Some(name) = e.file_name().to_str() {
                out.push(name.to_string());
            }
        }
        Ok(out)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        Ok(std::fs::metadata(path)?.len())
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let f = OpenOptions::new().write(true).create_new(true).open(path)?;
        Ok(Box::new(FsFile(f)))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let f = OpenOptions::new().write(true).open(path)?;
        Ok(Box::new(FsFile(f)))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        #[cfg(unix)]
        {
            File::open(dir)?.sync_all()
        }
        #[cfg(not(unix))]
        {
            let _ = dir;
            Ok(())
        }
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(dir.join("LOCK"))?;
        #[cfg(unix)]
        {
            use std::os::unix::io::AsRawFd;
            // SAFETY: flock on a descriptor we own; no memory is passed.
            let rc = unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) };
            if rc != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        Ok(Box::new(FsLock(f)))
    }
}

/// The kind of operation a fault is injected into.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    Write,
    SyncData,
    SyncDir,
    SetLen,
    Create,
    Rename,
    Remove,
}

/// The failure an injected fault produces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The operation fails with EIO.
    Eio,
    /// The operation fails with ENOSPC (meant for writes: a full disk).
    Enospc,
    /// A write stores the first half of its bytes and reports that count;
    /// every later write then fails with ENOSPC, like a disk filling up.
    ShortWrite,
}

#[derive(Debug)]
struct Injection {
    op: Op,
    /// Operations of this kind still allowed to succeed before the fault.
    remaining: u64,
    fault: Fault,
}

#[derive(Debug, Default)]
struct FileTrack {
    len: u64,
    synced_len: u64,
}

#[derive(Debug, Default)]
struct FaultState {
    injections: Vec<Injection>,
    /// Faults that have fired and keep firing (a dead or full disk stays so).
    active: HashMap<Op, Fault>,
    counts: HashMap<Op, u64>,
    files: HashMap<PathBuf, FileTrack>,
}

impl FaultState {
    /// Counts the operation and returns the fault to raise, if any.
    fn check(&mut self, op: Op) -> Option<Fault> {
        *self.counts.entry(op).or_default() += 1;
        if let Some(f) = self.active.get(&op) {
            return Some(*f);
        }
        let mut fired = None;
        self.injections.retain_mut(|inj| {
            if inj.op != op || fired.is_some() {
                return true;
            }
            if inj.remaining == 0 {
                fired = Some(inj.fault);
                false
            } else {
                inj.remaining -= 1;
                true
            }
        });
        if let Some(f) = fired {
            self.active.insert(
                op,
                if f == Fault::ShortWrite {
                    Fault::Enospc
                } else {
                    f
                },
            );
        }
        fired
    }
}

fn fault_error(f: Fault) -> io::Error {
    match f {
        Fault::Eio => io::Error::from_raw_os_error(libc::EIO),
        Fault::Enospc | Fault::ShortWrite => io::Error::from_raw_os_error(libc::ENOSPC),
    }
}

/// A test backend over real files that injects faults and simulates power
/// loss. Faults are armed with `inject(op, after, fault)`: the `after + 1`-th
/// operation of that kind from now fails, and so does every later one (a
/// failed disk does not heal) until `clear()`. It also counts operations
/// (`count(Op::SyncData)` is the number of fdatasyncs) and can pin the clock.
#[derive(Debug, Default)]
pub struct FaultyStorage {
    inner: FsStorage,
    state: Arc<Mutex<FaultState>>,
    /// 0 means "use the system clock".
    clock_ns: AtomicI64,
    syncs: Arc<AtomicU64>,
}

impl FaultyStorage {
    pub fn new() -> Arc<FaultyStorage> {
        Arc::new(FaultyStorage::default())
    }

    /// Arms a fault: `after` more operations of kind `op` succeed, then every
    /// one fails with `fault` until `clear`.
    pub fn inject(&self, op: Op, after: u64, fault: Fault) {
        self.state.lock().injections.push(Injection {
            op,
            remaining: after,
            fault,
        });
    }

    /// Disarms every fault, armed or firing.
    pub fn clear(&self) {
        let mut s = self.state.lock();
        s.injections.clear();
        s.active.clear();
    }

    /// Operations of kind `op` attempted so far (failed ones included).
    pub fn count(&self, op: Op) -> u64 {
        self.state.lock().counts.get(&op).copied().unwrap_or(0)
    }

    /// fdatasyncs of files that succeeded so far.
    pub fn fsyncs_ok(&self) -> u64 {
        self.syncs.load(Ordering::SeqCst)
    }

    /// Pins the wall clock the journal sees (None: the system clock).
    pub fn set_clock_ns(&self, ns: Option<i64>) {
        self.clock_ns.store(ns.unwrap_or(0), Ordering::SeqCst);
    }

    /// Simulates a power loss on the files written through this storage:
    /// each keeps its fsynced length plus a `seed`-chosen part of the bytes
    /// written after its last fdatasync (the page cache may have flushed some
    /// of them). Drop the `Journal` first. Files never synced keep a random
    /// prefix too; directory entries are not rolled back.
    pub fn power_loss(&self, seed: u64) -> io::Result<()> {
        let mut rng = seed | 1;
        let mut s = self.state.lock();
        let mut paths: Vec<_> = s.files.keys().cloned().collect();
        paths.sort();
        for p in paths {
            let t = &s.files[&p];
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let unsynced = t.len.saturating_sub(t.synced_len);
            let keep = t.synced_len
                + if unsynced == 0 {
                    0
                } else {
                    rng % (unsynced + 1)
                };
            if let Ok(meta) = std::fs::metadata(&p) {
                if meta.len() > keep {
                    OpenOptions::new().write(true).open(&p)?.set_len(keep)?;
                }
            }
            let t = s.files.get_mut(&p).expect("path listed above");
            t.len = keep;
            t.synced_len = keep;
        }
        Ok(())
    }

    fn op(&self, op: Op) -> io::Result<()> {
        match self.state.lock().check(op) {
            Some(f) => Err(fault_error(f)),
            None => Ok(()),
        }
    }
}

struct FaultyFile {
    inner: Box<dyn StorageFile>,
    path: PathBuf,
    state: Arc<Mutex<FaultState>>,
    syncs: Arc<AtomicU64>,
}

impl StorageFile for FaultyFile {
    fn write_at(&mut self, offset: u64, buf: &[u8]) -> io::Result<usize> {
        let fault = self.state.lock().check(Op::Write);
        let n = match fault {
            None => self.inner.write_at(offset, buf)?,
            Some(Fault::ShortWrite) if buf.len() > 1 => {
                self.inner.write_at(offset, &buf[..buf.len() / 2])?
            }
            Some(f) => return Err(fault_error(f)),
        };
        let mut s = self.state.lock();
        let t = s.files.entry(self.path.clone()).or_default();
        t.len = t.len.max(offset + n as u64);
        Ok(n)
    }
    fn set_len(&mut self, len: u64) -> io::Result<()> {
        if let Some(f) = self.state.lock().check(Op::SetLen) {
            return Err(fault_error(f));
        }
        self.inner.set_len(len)?;
        let mut s = self.state.lock();
        let t = s.files.entry(self.path.clone()).or_default();
        t.len = len;
        t.synced_len = t.synced_len.min(len);
        Ok(())
    }
    fn sync_data(&mut self) -> io::Result<()> {
        if let Some(f) = self.state.lock().check(Op::SyncData) {
            return Err(fault_error(f));
        }
        self.inner.sync_data()?;
        let mut s = self.state.lock();
        let t = s.files.entry(self.path.clone()).or_default();
        t.synced_len = t.len;
        self.syncs.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
    fn len(&self) -> io::Result<u64> {
        self.inner.len()
    }
}

impl Storage for FaultyStorage {
    fn create_dir_all(&self, dir: &Path) -> io::Result<()> {
        self.inner.create_dir_all(dir)
    }
    fn list_dir(&self, dir: &Path) -> io::Result<Vec<String>> {
        self.inner.list_dir(dir)
    }
    fn read_file(&self, path: &Path) -> io::Result<Vec<u8>> {
        self.inner.read_file(path)
    }
    fn file_len(&self, path: &Path) -> io::Result<u64> {
        self.inner.file_len(path)
    }
    fn create_new(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        self.op(Op::Create)?;
        let inner = self.inner.create_new(path)?;
        self.state
            .lock()
            .files
            .insert(path.to_path_buf(), FileTrack::default());
        Ok(self.wrap(path, inner))
    }
    fn open_write(&self, path: &Path) -> io::Result<Box<dyn StorageFile>> {
        let inner = self.inner.open_write(path)?;
        let len = inner.len()?;
        // A file that existed before this storage saw it is taken as durable.
        self.state
            .lock()
            .files
            .entry(path.to_path_buf())
            .or_insert(FileTrack {
                len,
                synced_len: len,
            });
        Ok(self.wrap(path, inner))
    }
    fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.op(Op::Remove)?;
        self.inner.remove_file(path)?;
        self.state.lock().files.remove(path);
        Ok(())
    }
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.op(Op::Rename)?;
        self.inner.rename(from, to)?;
        self.state.lock().files.remove(from);
        Ok(())
    }
    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.op(Op::SyncDir)?;
        self.inner.sync_dir(dir)
    }
    fn lock_dir(&self, dir: &Path) -> io::Result<Box<dyn std::any::Any + Send + Sync>> {
        self.inner.lock_dir(dir)
    }
    fn now_unix_ns(&self) -> i64 {
        match self.clock_ns.load(Ordering::SeqCst) {
            0 => system_now_ns(),
            ns => ns,
        }
    }
}

impl FaultyStorage {
    fn wrap(&self, path: &Path, inner: Box<dyn StorageFile>) -> Box<dyn StorageFile> {
        Box::new(FaultyFile {
            inner,
            path: path.to_path_buf(),
            state: self.state.clone(),
            syncs: self.syncs.clone(),
        })
    }
}
