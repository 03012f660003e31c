//! Subscribers (kdb+ `.u.sub`): each picks tables and symbols and gets a
//! byte-bounded queue. Publishing never waits for a subscriber: one whose
//! queue would overflow is cut off with a logged reason, and reconnects from
//! the sequence it has applied (the journal fills the gap).
//!
//! In zero-latency mode every update is queued as soon as it is journaled; in
//! timer mode updates wait in `pending` until the next flush.

use parking_lot::Mutex;
use std::collections::{HashSet, VecDeque};
use std::sync::Arc;
use tickdb_core::{Batch, ColumnData};
use tokio::sync::Notify;

/// Default bound of one subscriber's queue.
pub const SUB_QUEUE_BYTES_MAX: usize = 256 * 1024 * 1024;

/// One journaled update: its sequence number, its batches, and their codec
/// encoding (the journal payload, reused for remote subscribers).
#[derive(Debug)]
pub struct Update {
    pub seq: u64,
    pub batches: Vec<Batch>,
    pub payload: Vec<u8>,
    pub rows: usize,
    /// When the tp journaled it (ns since the epoch), for latency metrics.
    pub time_ns: i64,
}

#[derive(Debug, Clone, Default)]
pub struct SubFilter {
    /// Empty = every table.
    pub tables: HashSet<String>,
    /// Empty = every symbol.
    pub symbols: HashSet<String>,
}

impl SubFilter {
    pub fn is_all(&self) -> bool {
        self.tables.is_empty() && self.symbols.is_empty()
    }

    /// The part of `u` this filter passes. Updates with nothing left still
    /// carry their sequence number (as an empty update), so subscribers see
    /// every sequence and can prove there is no gap.
    pub fn apply(&self, u: &Arc<Update>) -> Arc<Update> {
        if self.is_all() {
            return u.clone();
        }
        let batches: Vec<Batch> = u
            .batches
            .iter()
            .filter(|b| self.tables.is_empty() || self.tables.contains(&b.table))
            .filter_map(|b| self.filter_symbols(b))
            .collect();
        let payload = tickdb_core::codec::encode_to_vec(&batches);
        Arc::new(Update {
            seq: u.seq,
            rows: batches.iter().map(|b| b.rows).sum(),
            batches,
            payload,
            time_ns: u.time_ns,
        })
    }

    fn filter_symbols(&self, b: &Batch) -> Option<Batch> {
        // A clear marker empties the table whatever the symbols: a subscriber
        // to some symbols of a table holds those rows, and they go too.
        if self.symbols.is_empty() || b.is_clear_marker() {
            return Some(b.clone());
        }
        // The first symbol column is the one subscriptions filter on, as the
        // `sym` column is in kdb+.
        let col = b
            .columns
            .iter()
            .position(|c| matches!(c.data, ColumnData::Symbol { .. }))?;
        let rows: Vec<usize> = (0..b.rows)
            .filter(|i| {
                b.columns[col]
                    .data
                    .symbol(*i)
                    .map(|s| self.symbols.contains(s))
                    .unwrap_or(false)
            })
            .collect();
        if rows.is_empty() {
            None
        } else {
            Some(b.select(&rows))
        }
    }
}

struct QueueState {
    items: VecDeque<Arc<Update>>,
    bytes: usize,
    closed: Option<String>,
}

/// A subscriber's bounded queue. The hub pushes, the subscriber's task pops.
pub struct SubQueue {
    id: u64,
    name: String,
    filter: SubFilter,
    bytes_max: usize,
    state: Mutex<QueueState>,
    notify: Notify,
    /// Updates at or below this sequence were before the subscription began.
    start_seq: u64,
}

impl SubQueue {
    pub fn id(&self) -> u64 {
        self.id
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn start_seq(&self) -> u64 {
        self.start_seq
    }

    /// Pushes unless that would overflow; returns false if the queue is (now)
    /// closed.
    fn push(&self, u: &Arc<Update>) -> bool {
        if u.seq <= self.start_seq {
            return true;
        }
        let u = self.filter.apply(u);
        let size = u.payload.len() + 64;
        let mut st = self.state.lock();
        if st.closed.is_some() {
            return false;
        }
        if st.bytes + size > self.bytes_max {
            st.closed = Some(format!(
                "subscriber {} too slow: {} bytes queued, bound {} (SUB_QUEUE_BYTES_MAX); cut off at seq {}",
                self.name, st.bytes, self.bytes_max, u.seq
            ));
            st.items.clear();
            st.bytes = 0;
            drop(st);
            self.notify.notify_one();
            return false;
        }
        st.bytes += size;
        st.items.push_back(u);
        drop(st);
        self.notify.notify_one();
        true
    }

    pub fn close(&self, reason: &str) {
        let mut st = self.state.lock();
        if st.closed.is_none() {
            st.closed = Some(reason.to_string());
        }
        drop(st);
        self.notify.notify_one();
    }

    /// Waits for updates; returns everything queued, or `Err(reason)` once
    /// the queue is closed (cut off, or the tp is stopping).
    pub async fn next(&self) -> Result<Vec<Arc<Update>>, String> {
        loop {
            {
                let mut st = self.state.lock();
                if let Some(reason) = &st.closed {
                    return Err(reason.clone());
                }
                if !st.items.is_empty() {
                    st.bytes = 0;
                    return Ok(st.items.drain(..).collect());
                }
            }
            self.notify.notified().await;
        }
    }

    /// Blocking variant for threads outside tokio (the embedded rdb).
    pub fn next_blocking(&self) -> Result<Vec<Arc<Update>>, String> {
        futures_lite_block_on(self.next())
    }

    pub fn queued_bytes(&self) -> usize {
        self.state.lock().bytes
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

struct HubState {
    subs: Vec<Arc<SubQueue>>,
    pending: Vec<Arc<Update>>,
    last_seq: u64,
    next_id: u64,
}

pub struct Hub {
    batched: bool,
    bytes_max: usize,
    state: Mutex<HubState>,
}

#[derive(Debug, Clone, serde::Serialize)]
pub struct SubInfo {
    pub id: u64,
    pub name: String,
    pub start_seq: u64,
    pub queued_bytes: usize,
}

impl Hub {
    /// `batched`: hold updates until `flush` (timer mode) instead of queueing
    /// them at once (zero-latency mode).
    pub fn new(last_seq: u64, batched: bool, bytes_max: usize) -> Hub {
        Hub {
            batched,
            bytes_max,
            state: Mutex::new(HubState {
                subs: Vec::new(),
                pending: Vec::new(),
                last_seq,
                next_id: 1,
            }),
        }
    }

    /// Registers a subscriber. Returns its queue, which will receive every
    /// update after the returned sequence S (the tp's current sequence).
    pub fn subscribe(&self, name: &str, filter: SubFilter) -> (Arc<SubQueue>, u64) {
        let mut st = self.state.lock();
        let id = st.next_id;
        st.next_id += 1;
        let q = Arc::new(SubQueue {
            id,
            name: format!("{name}#{id}"),
            filter,
            bytes_max: self.bytes_max,
            state: Mutex::new(QueueState {
                items: VecDeque::new(),
                bytes: 0,
                closed: None,
            }),
            notify: Notify::new(),
            start_seq: st.last_seq,
        });
        st.subs.push(q.clone());
        (q, st.last_seq)
    }

    pub fn unsubscribe(&self, id: u64) {
        self.state.lock().subs.retain(|s| s.id != id);
    }

    /// Called by the journal thread, in sequence order, after the update is
    /// journaled under the fsync policy.
    pub fn publish(&self, u: Arc<Update>) {
        let mut st = self.state.lock();
        st.last_seq = u.seq;
        if self.batched {
            st.pending.push(u);
        } else {
            Self::deliver(&mut st, &[u]);
        }
    }

    /// Timer mode: hands everything pending to the subscribers.
    pub fn flush(&self) {
        let mut st = self.state.lock();
        if st.pending.is_empty() {
            return;
        }
        let pending = std::mem::take(&mut st.pending);
        Self::deliver(&mut st, &pending);
    }

    fn deliver(st: &mut HubState, updates: &[Arc<Update>]) {
        st.subs.retain(|s| {
            for u in updates {
                if !s.push(u) {
                    if let Some(reason) = &s.state.lock().closed {
                        tracing::warn!("{reason}");
                    }
                    return false;
                }
            }
            true
        });
    }

    pub fn close_all(&self, reason: &str) {
        let mut st = self.state.lock();
        for s in st.subs.drain(..) {
            s.close(reason);
        }
    }

    pub fn subscribers(&self) -> Vec<SubInfo> {
        self.state
            .lock()
            .subs
            .iter()
            .map(|s| SubInfo {
                id: s.id,
                name: s.name.clone(),
                start_seq: s.start_seq,
                queued_bytes: s.queued_bytes(),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upd(seq: u64, bytes: usize) -> Arc<Update> {
        Arc::new(Update {
            seq,
            batches: vec![],
            payload: vec![0; bytes],
            rows: 0,
            time_ns: 0,
        })
    }

    #[test]
    fn slow_subscriber_is_cut_off_others_continue() {
        let hub = Hub::new(0, false, 1000);
        let (slow, s0) = hub.subscribe("slow", SubFilter::default());
        let (fast, _) = hub.subscribe("fast", SubFilter::default());
        assert_eq!(s0, 0);
        for seq in 1..=20 {
            hub.publish(upd(seq, 100));
            let got = fast.next_blocking().unwrap();
            assert_eq!(got.len(), 1);
            assert_eq!(got[0].seq, seq);
        }
        let err = slow.next_blocking().unwrap_err();
        assert!(err.contains("too slow"), "{err}");
        assert_eq!(hub.subscribers().len(), 1);
    }

    #[test]
    fn timer_mode_holds_until_flush_and_respects_start_seq() {
        let hub = Hub::new(5, true, 1 << 20);
        hub.publish(upd(6, 10));
        let (q, s) = hub.subscribe("late", SubFilter::default());
        assert_eq!(s, 6);
        hub.publish(upd(7, 10));
        assert_eq!(q.queued_bytes(), 0);
        hub.flush();
        let got = q.next_blocking().unwrap();
        assert_eq!(got.iter().map(|u| u.seq).collect::<Vec<_>>(), vec![7]);
    }
}
