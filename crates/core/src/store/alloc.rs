//! The store's allocator thread: allocates the next chunk of a table with
//! fsmem columns ahead of the table's writer.
//!
//! Creating an fsmem file, giving it its blocks and faulting in its first
//! pages wait on the file system (its journal). Measured here under other
//! processes' disk traffic, that wait was usually well under a millisecond
//! but now and then 10-30 ms; on the writer's thread it held up every
//! update behind it. On this thread it delays no update: the writer picks
//! the chunk up when it is ready, and allocates one itself only if it needs
//! a chunk before this one is done. DRAM chunks are anonymous mappings,
//! which cost microseconds, and are allocated by the writer.
//!
//! The thread starts with the first job and ends when the store is dropped
//! (its queue's sender with it). The queue is bounded: a job that does not
//! fit is not queued, and the writer asks again at its next upkeep.

use parking_lot::Mutex;
use std::sync::mpsc::{sync_channel, SyncSender, TrySendError};

/// Jobs waiting for the allocator thread at most: one per table is all the
/// store asks for at a time.
pub const ALLOC_QUEUE_JOBS_MAX: usize = 16;

type Job = Box<dyn FnOnce() + Send>;

#[derive(Default)]
pub(crate) struct Allocator {
    queue: Mutex<Option<SyncSender<Job>>>,
}

impl Allocator {
    /// Queues `job` for the allocator thread (started on first use). False
    /// when the queue is full or the thread could not be started: the
    /// caller allocates later or by itself.
    pub fn submit(&self, job: Job) -> bool {
        let mut queue = self.queue.lock();
        if queue.is_none() {
            let (tx, rx) = sync_channel::<Job>(ALLOC_QUEUE_JOBS_MAX);
            let started = std::thread::Builder::new()
                .name("tickdb-alloc".into())
                .spawn(move || {
                    while let Ok(job) = rx.recv() {
                        job();
                    }
                });
            if started.is_err() {
                return false;
            }
            *queue = Some(tx);
        }
        match queue.as_ref().map(|tx| tx.try_send(job)) {
            Some(Ok(())) => true,
            Some(Err(TrySendError::Full(_))) | None => false,
            Some(Err(TrySendError::Disconnected(_))) => {
                // The thread is gone (a job panicked): start another next time.
                *queue = None;
                false
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::mpsc::channel;

    #[test]
    fn runs_jobs_in_order_on_its_thread() {
        let a = Allocator::default();
        let (tx, rx) = channel();
        for i in 0..5 {
            let tx = tx.clone();
            assert!(a.submit(Box::new(move || {
                let name = std::thread::current().name().map(String::from);
                tx.send((i, name)).unwrap();
            })));
        }
        let got: Vec<(i32, Option<String>)> = (0..5).map(|_| rx.recv().unwrap()).collect();
        assert_eq!(
            got,
            (0..5)
                .map(|i| (i, Some("tickdb-alloc".into())))
                .collect::<Vec<_>>()
        );
    }

    #[test]
    fn a_full_queue_refuses_instead_of_blocking() {
        let a = Allocator::default();
        let (hold_tx, hold_rx) = channel::<()>();
        // The first job blocks the thread until released.
        assert!(a.submit(Box::new(move || {
            let _ = hold_rx.recv();
        })));
        let mut accepted = 0;
        for _ in 0..ALLOC_QUEUE_JOBS_MAX + 5 {
            if a.submit(Box::new(|| {})) {
                accepted += 1;
            }
        }
        // The blocking job may or may not have been taken off the queue yet.
        assert!(
            (ALLOC_QUEUE_JOBS_MAX - 1..=ALLOC_QUEUE_JOBS_MAX).contains(&accepted),
            "{accepted}"
        );
        drop(hold_tx);
    }
}
