//! One subscriber's queue and everything held for it, counted in bytes:
//! updates queued, updates its writer has taken but not yet written
//! (`Delivered`), and journal records read ahead for its catch-up
//! (`CatchupHold`). Each of those holds a `Charge` of the global
//! `SubMemory`; closing the queue (cut off, unsubscribed, the tp stopping)
//! releases them all at once, including what a writer still has in hand,
//! and wakes the writer so that it stops writing.

use crate::hub::{SubFilter, Update};
use crate::sub_memory::{Charge, SubMemory};
use parking_lot::Mutex;
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::Notify;

/// How long a catch-up reader waits for memory before it looks again
/// whether its subscriber is still there; a release also wakes it.
const CATCHUP_WAIT_POLL_MS: u64 = 50;

/// What a subscriber receives of each update.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SubForm {
    /// The decoded batches, for an rdb in the same process.
    Batches,
    /// Only the codec encoding (the journal payload), for the network:
    /// holding it does not keep the decoded batches alive.
    Encoded,
}

struct Item {
    update: Arc<Update>,
    charge: Arc<Charge>,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum OutKind {
    /// Taken by the writer, not yet written.
    Writing,
    /// A journal record read ahead for the catch-up.
    CatchupRecord,
    /// The catch-up journal reader's own read buffer.
    CatchupReader,
}

struct Out {
    charge: Arc<Charge>,
    kind: OutKind,
    /// The update's sequence; 0 for catch-up holds (a catch-up is behind
    /// every live update).
    seq: u64,
}

struct QueueState {
    items: VecDeque<Item>,
    queued_bytes: usize,
    /// What guards (`Delivered`, `CatchupHold`) hold, by ticket.
    out: HashMap<u64, Out>,
    writing_bytes: usize,
    catchup_bytes: usize,
    catchup_records: usize,
    next_ticket: u64,
    /// When the writer last finished writing something (or the queue was
    /// made): of equal holders equally far behind, the stalest goes first.
    last_progress: Instant,
    closed: Option<String>,
}

/// A subscriber's bounded queue. The hub offers, the subscriber's writer
/// takes.
pub struct SubQueue {
    id: u64,
    name: String,
    filter: SubFilter,
    form: SubForm,
    /// `--sub-queue-bytes-max`: queued plus being written.
    bytes_max: usize,
    /// Updates at or below this sequence were before the subscription began.
    start_seq: u64,
    memory: Arc<SubMemory>,
    state: Mutex<QueueState>,
    notify: Notify,
}

/// What became of an update offered to a queue.
pub(crate) enum Offer {
    Queued,
    /// The queue was closed already.
    Closed,
    /// Over this subscriber's own bound: it is now closed, for this reason.
    TooSlow(String),
    /// Over the global bound: nothing changed; the hub makes room.
    NoRoom,
}

/// A subscriber's bytes, by where they are, for /status.
#[derive(Debug, Clone, serde::Serialize)]
pub struct SubInfo {
    pub id: u64,
    pub name: String,
    pub start_seq: u64,
    /// Queued, not yet taken by the writer.
    pub queued_bytes: usize,
    /// Taken by the writer, not yet written to the socket.
    pub writing_bytes: usize,
    /// Journal records (and the reader's buffer) read ahead for a catch-up.
    pub catchup_bytes: usize,
    /// The sum of the three. Updates shared with other subscribers count
    /// here in full, and once in the tp's `subscriber_memory`.
    pub held_bytes: usize,
}

/// How much a subscriber holds and since when it has not written, for the
/// hub's choice of whom to cut off.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Load {
    pub held: usize,
    /// The lowest sequence among what it holds (0 while catching up;
    /// u64::MAX when it holds nothing): how far behind it is.
    pub oldest_seq: u64,
    pub queued: usize,
    pub writing: usize,
    pub catchup: usize,
    pub last_progress: Instant,
}

impl SubQueue {
    pub(crate) fn new(
        id: u64,
        name: String,
        filter: SubFilter,
        form: SubForm,
        bytes_max: usize,
        start_seq: u64,
        memory: Arc<SubMemory>,
    ) -> SubQueue {
        SubQueue {
            id,
            name,
            filter,
            form,
            bytes_max,
            start_seq,
            memory,
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                queued_bytes: 0,
                out: HashMap::new(),
                writing_bytes: 0,
                catchup_bytes: 0,
                catchup_records: 0,
                next_ticket: 0,
                last_progress: Instant::now(),
                closed: None,
            }),
            notify: Notify::new(),
        }
    }

    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn start_seq(&self) -> u64 {
        self.start_seq
    }

    pub fn filter(&self) -> &SubFilter {
        &self.filter
    }

    pub fn form(&self) -> SubForm {
        self.form
    }

    /// Queues `update` (whose bytes `charge` counts) unless that would pass
    /// this subscriber's bound or the global one. Never waits.
    pub(crate) fn offer(&self, update: &Arc<Update>, charge: &Arc<Charge>) -> Offer {
        let mut st = self.state.lock();
        if st.closed.is_some() {
            return Offer::Closed;
        }
        let held = st.queued_bytes + st.writing_bytes;
        let size = charge.bytes();
        if held + size > self.bytes_max {
            let reason = format!(
                "subscriber {} too slow: {held} bytes queued or being written + {size} bytes of \
                 the update at seq {} would exceed its bound of {} bytes (--sub-queue-bytes-max); \
                 cut off",
                self.name, update.seq, self.bytes_max
            );
            self.close_locked(&mut st, &reason);
            drop(st);
            self.notify.notify_one();
            return Offer::TooSlow(reason);
        }
        if !self.memory.try_hold(charge) {
            return Offer::NoRoom;
        }
        st.queued_bytes += size;
        st.items.push_back(Item {
            update: update.clone(),
            charge: charge.clone(),
        });
        drop(st);
        self.notify.notify_one();
        Offer::Queued
    }

    fn close_locked(&self, st: &mut QueueState, reason: &str) {
        if st.closed.is_none() {
            st.closed = Some(reason.to_string());
        }
        for item in st.items.drain(..) {
            self.memory.release(&item.charge);
        }
        for (_, out) in st.out.drain() {
            self.memory.release(&out.charge);
        }
        st.queued_bytes = 0;
        st.writing_bytes = 0;
        st.catchup_bytes = 0;
        st.catchup_records = 0;
    }

    /// Closes the queue and releases everything held for it at once, what
    /// its writer has in hand included (the writer stops: see `closed`).
    /// Returns whether this call closed it.
    pub fn close(&self, reason: &str) -> bool {
        let mut st = self.state.lock();
        let was_open = st.closed.is_none();
        self.close_locked(&mut st, reason);
        drop(st);
        self.notify.notify_one();
        was_open
    }

    pub fn is_closed(&self) -> bool {
        self.state.lock().closed.is_some()
    }

    /// Resolves with the reason once the queue is closed: a writer races
    /// its socket writes against it, so a cut-off subscriber stops holding
    /// memory even while its socket accepts nothing.
    pub async fn closed(&self) -> String {
        loop {
            if let Some(reason) = &self.state.lock().closed {
                return reason.clone();
            }
            self.notify.notified().await;
        }
    }

    /// Waits for updates; returns everything queued, or `Err(reason)` once
    /// the queue is closed. What it returns stays counted (as being
    /// written) until each `Delivered` is dropped.
    pub async fn next(self: &Arc<Self>) -> Result<Vec<Delivered>, String> {
        loop {
            {
                let mut st = self.state.lock();
                if let Some(reason) = &st.closed {
                    return Err(reason.clone());
                }
                if !st.items.is_empty() {
                    let items: Vec<Item> = st.items.drain(..).collect();
                    st.writing_bytes += st.queued_bytes;
                    st.queued_bytes = 0;
                    let mut out = Vec::with_capacity(items.len());
                    for item in items {
                        let ticket = st.next_ticket;
                        st.next_ticket += 1;
                        st.out.insert(
                            ticket,
                            Out {
                                charge: item.charge,
                                kind: OutKind::Writing,
                                seq: item.update.seq,
                            },
                        );
                        out.push(Delivered {
                            queue: self.clone(),
                            ticket,
                            update: item.update,
                        });
                    }
                    return Ok(out);
                }
            }
            self.notify.notified().await;
        }
    }

    /// Blocking variant for threads outside tokio (the embedded rdb).
    pub fn next_blocking(self: &Arc<Self>) -> Result<Vec<Delivered>, String> {
        futures_lite_block_on(self.next())
    }

    /// A guard let go of what it held: it was written (or given up).
    fn finish(&self, ticket: u64) {
        let mut st = self.state.lock();
        // Gone already if the queue was closed: closing released it.
        let Some(out) = st.out.remove(&ticket) else {
            return;
        };
        let bytes = out.charge.bytes();
        match out.kind {
            OutKind::Writing => st.writing_bytes -= bytes,
            OutKind::CatchupRecord => {
                st.catchup_bytes -= bytes;
                st.catchup_records -= 1;
            }
            OutKind::CatchupReader => st.catchup_bytes -= bytes,
        }
        if out.kind != OutKind::CatchupReader {
            st.last_progress = Instant::now();
        }
        self.memory.release(&out.charge);
    }

    /// Blocks until `bytes` of catch-up read-ahead fit: under the global
    /// bound, and for a record also under `ahead_bytes_max` of this
    /// subscriber's read-ahead (one record always fits when nothing else is
    /// read ahead). `Err(reason)` once the queue is closed.
    pub(crate) fn hold_catchup(
        self: &Arc<Self>,
        bytes: usize,
        record: bool,
        ahead_bytes_max: usize,
    ) -> Result<CatchupHold, String> {
        let charge = Arc::new(Charge::new(bytes));
        loop {
            {
                let mut st = self.state.lock();
                if let Some(reason) = &st.closed {
                    return Err(reason.clone());
                }
                let ahead_ok = !record
                    || st.catchup_records == 0
                    || st.catchup_bytes + bytes <= ahead_bytes_max;
                if ahead_ok && self.memory.try_hold(&charge) {
                    let ticket = st.next_ticket;
                    st.next_ticket += 1;
                    st.catchup_bytes += bytes;
                    let kind = if record {
                        st.catchup_records += 1;
                        OutKind::CatchupRecord
                    } else {
                        OutKind::CatchupReader
                    };
                    st.out.insert(
                        ticket,
                        Out {
                            charge,
                            kind,
                            seq: 0,
                        },
                    );
                    return Ok(CatchupHold {
                        queue: self.clone(),
                        ticket,
                    });
                }
            }
            self.memory
                .wait_released(Duration::from_millis(CATCHUP_WAIT_POLL_MS));
        }
    }

    /// Makes a catch-up hold count `bytes` (a record's real size, known only
    /// once read), over the bound if need be: the bytes are in memory.
    fn resize_catchup(&self, ticket: u64, bytes: usize) {
        let mut st = self.state.lock();
        let Some(out) = st.out.get_mut(&ticket) else {
            return;
        };
        let new = Arc::new(Charge::new(bytes));
        self.memory.replace_sole(&out.charge, &new);
        let old = std::mem::replace(&mut out.charge, new).bytes();
        st.catchup_bytes = st.catchup_bytes - old + bytes;
    }

    pub(crate) fn load(&self) -> Option<Load> {
        let st = self.state.lock();
        if st.closed.is_some() {
            return None;
        }
        let oldest_queued = st.items.front().map_or(u64::MAX, |i| i.update.seq);
        let oldest_out = st.out.values().map(|o| o.seq).min().unwrap_or(u64::MAX);
        Some(Load {
            held: st.queued_bytes + st.writing_bytes + st.catchup_bytes,
            oldest_seq: oldest_queued.min(oldest_out),
            queued: st.queued_bytes,
            writing: st.writing_bytes,
            catchup: st.catchup_bytes,
            last_progress: st.last_progress,
        })
    }

    pub fn info(&self) -> SubInfo {
        let st = self.state.lock();
        SubInfo {
            id: self.id,
            name: self.name.clone(),
            start_seq: self.start_seq,
            queued_bytes: st.queued_bytes,
            writing_bytes: st.writing_bytes,
            catchup_bytes: st.catchup_bytes,
            held_bytes: st.queued_bytes + st.writing_bytes + st.catchup_bytes,
        }
    }

    /// The global bound (`--sub-memory-bytes-max`).
    pub(crate) fn memory_bytes_max(&self) -> usize {
        self.memory.bytes_max()
    }

    /// Serializes catch-up record reads across subscribers (see
    /// `SubMemory::catchup_read_lock`).
    pub(crate) fn catchup_read_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.memory.catchup_read_lock()
    }

    /// Whether `bytes` more would fit under the global bound now.
    #[cfg(test)]
    pub(crate) fn memory_fits(&self, bytes: usize) -> bool {
        self.memory.bytes() + bytes <= self.memory.bytes_max()
    }

    /// Bytes queued, being written and read ahead for this subscriber.
    pub fn held_bytes(&self) -> usize {
        self.info().held_bytes
    }
}

impl Drop for SubQueue {
    fn drop(&mut self) {
        // Guards keep their queue alive, so only queued items can be left;
        // a queue dropped without being closed must not leak its charges.
        let st = self.state.get_mut();
        for item in st.items.drain(..) {
            self.memory.release(&item.charge);
        }
        for (_, out) in st.out.drain() {
            self.memory.release(&out.charge);
        }
    }
}

/// An update taken from a queue: counted as being written until dropped.
pub struct Delivered {
    queue: Arc<SubQueue>,
    ticket: u64,
    update: Arc<Update>,
}

impl std::fmt::Debug for Delivered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Delivered")
            .field("subscriber", &self.queue.name)
            .field("seq", &self.update.seq)
            .field("rows", &self.update.rows)
            .finish()
    }
}

impl Delivered {
    pub fn update(&self) -> &Arc<Update> {
        &self.update
    }
}

impl std::ops::Deref for Delivered {
    type Target = Update;
    fn deref(&self) -> &Update {
        &self.update
    }
}

impl Drop for Delivered {
    fn drop(&mut self) {
        self.queue.finish(self.ticket);
    }
}

/// Catch-up bytes held for a subscriber (a record read ahead, or the
/// reader's buffer): counted until dropped.
pub struct CatchupHold {
    queue: Arc<SubQueue>,
    ticket: u64,
}

impl CatchupHold {
    /// Counts `bytes` instead of what was reserved (see `resize_catchup`).
    pub(crate) fn resize(&self, bytes: usize) {
        self.queue.resize_catchup(self.ticket, bytes);
    }
}

impl Drop for CatchupHold {
    fn drop(&mut self) {
        self.queue.finish(self.ticket);
    }
}

/// A tiny executor for `next_blocking`: parks the thread until woken.
fn futures_lite_block_on<F: std::future::Future>(f: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut f = std::pin::pin!(f);
    loop {
        if let Poll::Ready(v) = f.as_mut().poll(&mut cx) {
            return v;
        }
        std::thread::park();
    }
}
