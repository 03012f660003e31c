//! A bound on the connections open on one port (`--ilp-connections-max`,
//! `--sub-connections-max`): it owns the count of open connections, the
//! count of refused ones, and the log line a refusal gets.
//!
//! Refusals are logged at most once per `REFUSAL_LOG_INTERVAL_MS`, with the
//! number refused since the last line: a client hammering a full port must
//! not turn into a flood of log lines.

use parking_lot::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// At most one refusal log line per port in this long.
pub const REFUSAL_LOG_INTERVAL_MS: u64 = 1000;

pub struct ConnLimit {
    /// The port's name in log lines, e.g. "ILP TCP".
    what: &'static str,
    /// The flag that sets `max`, named in log lines.
    flag: &'static str,
    max: usize,
    permits: Arc<Semaphore>,
    refused: AtomicU64,
    /// When the last refusal line was logged, and refusals not logged since.
    log: Mutex<(Option<Instant>, u64)>,
}

/// An open connection: its slot is freed when this is dropped.
pub type ConnPermit = OwnedSemaphorePermit;

impl ConnLimit {
    pub fn new(what: &'static str, flag: &'static str, max: usize) -> ConnLimit {
        ConnLimit {
            what,
            flag,
            max,
            permits: Arc::new(Semaphore::new(max)),
            refused: AtomicU64::new(0),
            log: Mutex::new((None, 0)),
        }
    }

    /// A slot for a new connection, or None when `max` are open.
    pub fn try_open(&self) -> Option<ConnPermit> {
        self.permits.clone().try_acquire_owned().ok()
    }

    /// The message a refused peer is told and the log says.
    pub fn refusal(&self) -> String {
        format!("{} connections open ({})", self.max, self.flag)
    }

    /// What a refused peer is told, where the protocol can tell it.
    pub fn refusal_message(&self) -> String {
        format!(
            "too many connections: {} open ({}); try again later",
            self.max, self.flag
        )
    }

    /// Counts a refused connection from `peer` and logs it (rate-limited).
    pub fn note_refused(&self, peer: &str) {
        self.refused.fetch_add(1, Ordering::Relaxed);
        let mut log = self.log.lock();
        let now = Instant::now();
        let due = log
            .0
            .is_none_or(|t| now - t >= Duration::from_millis(REFUSAL_LOG_INTERVAL_MS));
        if !due {
            log.1 += 1;
            return;
        }
        let also = std::mem::take(&mut log.1);
        log.0 = Some(now);
        drop(log);
        if also > 0 {
            tracing::warn!(
                "{}: refusing {peer}: {} ({also} more refused since the last such line)",
                self.what,
                self.refusal()
            );
        } else {
            tracing::warn!("{}: refusing {peer}: {}", self.what, self.refusal());
        }
    }

    pub fn open(&self) -> usize {
        self.max - self.permits.available_permits()
    }

    pub fn max(&self) -> usize {
        self.max
    }

    pub fn refused(&self) -> u64 {
        self.refused.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_open_and_refused() {
        let l = ConnLimit::new("test port", "--test-max", 2);
        let a = l.try_open().unwrap();
        let _b = l.try_open().unwrap();
        assert!(l.try_open().is_none());
        assert_eq!(l.open(), 2);
        l.note_refused("127.0.0.1:1");
        l.note_refused("127.0.0.1:2");
        assert_eq!(l.refused(), 2);
        assert_eq!(l.refusal(), "2 connections open (--test-max)");
        assert_eq!(
            l.refusal_message(),
            "too many connections: 2 open (--test-max); try again later"
        );
        drop(a);
        assert_eq!(l.open(), 1);
        assert!(l.try_open().is_some());
    }
}
