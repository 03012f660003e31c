//! The one bound on all subscriber buffer memory (`--sub-memory-bytes-max`).
//! This module owns the count of bytes held for subscribers: updates queued
//! for them, updates taken from a queue but not yet written to a socket, and
//! journal records read ahead for a catch-up.
//!
//! What is counted is a `Charge`: the bytes of one thing held for
//! subscribers. An update's encoded payload is one charge shared by every
//! unfiltered subscriber that holds it, so it is counted once however many
//! hold it, and released when the last lets go: the count is the memory
//! really held, not a sum of per-subscriber views (which would count one
//! 57 MB update 200 times for 200 subscribers).
//!
//! Publishing never waits here (`try_hold` answers at once and the hub
//! makes room by cutting subscribers off); catch-up readers do wait
//! (`wait_released`).

use parking_lot::{Condvar, Mutex};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

/// Default bound on all subscriber buffer memory together, in bytes.
pub const SUB_MEMORY_BYTES_MAX: usize = 1 << 30;

/// Bytes of one thing held for subscribers, and how many hold it.
#[derive(Debug)]
pub struct Charge {
    bytes: usize,
    /// Subscribers holding it. Changed only under `SubMemory::state`'s lock,
    /// so the 0 -> 1 and 1 -> 0 transitions and the byte count agree.
    holders: AtomicUsize,
}

impl Charge {
    pub fn new(bytes: usize) -> Charge {
        Charge {
            bytes,
            holders: AtomicUsize::new(0),
        }
    }

    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Whether anyone holds it (its bytes are counted).
    pub fn is_held(&self) -> bool {
        self.holders.load(Ordering::Relaxed) > 0
    }
}

struct MemState {
    bytes: usize,
}

pub struct SubMemory {
    bytes_max: usize,
    state: Mutex<MemState>,
    /// Woken whenever bytes are released: catch-up readers wait on it.
    released: Condvar,
    /// Subscribers cut off to keep within the bound, since start.
    cut_offs: AtomicU64,
    /// Held while a catch-up reader reads a record: its size is known only
    /// once read, so a record larger than its reader reserved can pass the
    /// bound, and one reader at a time keeps that to one record.
    catchup_read: Mutex<()>,
}

/// What /status shows of the bound.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SubMemoryInfo {
    /// Bytes held for subscribers now (shared payloads counted once).
    pub bytes: usize,
    pub bytes_max: usize,
    /// Subscribers cut off to keep within `bytes_max`, since start.
    pub cut_offs: u64,
}

impl SubMemory {
    pub fn new(bytes_max: usize) -> SubMemory {
        SubMemory {
            bytes_max,
            state: Mutex::new(MemState { bytes: 0 }),
            released: Condvar::new(),
            cut_offs: AtomicU64::new(0),
            catchup_read: Mutex::new(()),
        }
    }

    pub fn bytes(&self) -> usize {
        self.state.lock().bytes
    }

    pub fn bytes_max(&self) -> usize {
        self.bytes_max
    }

    pub fn info(&self) -> SubMemoryInfo {
        SubMemoryInfo {
            bytes: self.bytes(),
            bytes_max: self.bytes_max,
            cut_offs: self.cut_offs.load(Ordering::Relaxed),
        }
    }

    pub(crate) fn note_cut_off(&self) {
        self.cut_offs.fetch_add(1, Ordering::Relaxed);
    }

    /// Adds a holder to `c` without waiting: free when others hold it
    /// already, else its bytes are counted if they fit under the bound.
    /// Returns false (and changes nothing) when they do not fit.
    pub(crate) fn try_hold(&self, c: &Charge) -> bool {
        let mut st = self.state.lock();
        if c.holders.load(Ordering::Relaxed) == 0 {
            if st.bytes + c.bytes > self.bytes_max {
                return false;
            }
            st.bytes += c.bytes;
        }
        c.holders.fetch_add(1, Ordering::Relaxed);
        true
    }

    /// Moves the one holder of `old` to `new` (nobody holds it yet), in one
    /// step: a catch-up reader's reservation becomes the record's real
    /// size, whatever the bound (the record is in memory already).
    pub(crate) fn replace_sole(&self, old: &Charge, new: &Charge) {
        let mut st = self.state.lock();
        debug_assert_eq!(old.holders.load(Ordering::Relaxed), 1);
        debug_assert_eq!(new.holders.load(Ordering::Relaxed), 0);
        st.bytes = st.bytes - old.bytes + new.bytes;
        old.holders.store(0, Ordering::Relaxed);
        new.holders.store(1, Ordering::Relaxed);
        let shrank = new.bytes < old.bytes;
        drop(st);
        if shrank {
            self.released.notify_all();
        }
    }

    /// Waits until some bytes are released, or `wait` has passed.
    pub(crate) fn wait_released(&self, wait: Duration) {
        let mut st = self.state.lock();
        let _ = self.released.wait_for(&mut st, wait);
    }

    /// Drops one holder of `c`; its bytes are released with the last.
    pub(crate) fn release(&self, c: &Charge) {
        let mut st = self.state.lock();
        let before = c.holders.load(Ordering::Relaxed);
        debug_assert!(before > 0, "released a charge nobody holds");
        if before == 0 {
            return;
        }
        c.holders.store(before - 1, Ordering::Relaxed);
        if before == 1 {
            st.bytes -= c.bytes;
            drop(st);
            self.released.notify_all();
        }
    }

    /// Serializes catch-up record reads (see `catchup_read`).
    pub(crate) fn catchup_read_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.catchup_read.lock()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn a_shared_charge_counts_once_and_goes_with_its_last_holder() {
        let m = SubMemory::new(100);
        let c = Charge::new(60);
        assert!(m.try_hold(&c));
        assert!(m.try_hold(&c), "a second holder costs nothing");
        assert_eq!(m.bytes(), 60);
        let other = Charge::new(50);
        assert!(!m.try_hold(&other), "60 + 50 is over 100");
        assert_eq!(m.bytes(), 60);
        m.release(&c);
        assert_eq!(m.bytes(), 60, "one holder left");
        m.release(&c);
        assert_eq!(m.bytes(), 0);
        assert!(m.try_hold(&other));
        m.release(&other);
        assert_eq!(m.bytes(), 0);
    }

    #[test]
    fn waiters_wake_when_bytes_are_released_and_a_reservation_resizes() {
        let m = std::sync::Arc::new(SubMemory::new(100));
        let big = std::sync::Arc::new(Charge::new(90));
        assert!(m.try_hold(&big));
        let c = Charge::new(20);
        assert!(!m.try_hold(&c), "no room yet");
        let (m2, big2) = (m.clone(), big.clone());
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            m2.release(&big2);
        });
        let started = Instant::now();
        while !m.try_hold(&c) {
            assert!(started.elapsed() < Duration::from_secs(10));
            m.wait_released(Duration::from_secs(10));
        }
        t.join().unwrap();
        assert_eq!(m.bytes(), 20);
        // A reservation becomes the real size, even over the bound: the
        // bytes are in memory already and the count must show them.
        let real = Charge::new(500);
        m.replace_sole(&c, &real);
        assert_eq!(m.bytes(), 500);
        assert!(!c.is_held() && real.is_held());
        m.release(&real);
        assert_eq!(m.bytes(), 0);
    }
}
