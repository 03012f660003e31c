//! What /status and /metrics show of replication, on both sides: for each
//! standby its mode, state (and why it stopped), the sequences shipped,
//! received, durable and applied there, and the lag in records, bytes and
//! milliseconds.

use crate::protocol::Mode;
use parking_lot::Mutex;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Shipped frames remembered for the lag in milliseconds; older ones are
/// dropped (the lag then reads from the oldest kept).
const SHIPPED_REMEMBERED_MAX: usize = 4096;

/// Where a replication link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Connecting,
    /// Shipping records from the journal files, behind the primary.
    CatchingUp,
    /// Caught up: records shipped as they are committed.
    Streaming,
    Stopped,
}

/// One standby as its primary sees it.
#[derive(Debug)]
pub struct StandbyLink {
    pub id: u64,
    pub name: String,
    pub peer: String,
    pub mode: Mode,
    since: Instant,
    inner: Mutex<LinkInner>,
    pub shipped_seq: AtomicU64,
    pub received_seq: AtomicU64,
    pub durable_seq: AtomicU64,
    pub applied_seq: AtomicU64,
    /// Bytes shipped and bytes the standby holds durably, since connected.
    pub shipped_bytes: AtomicU64,
    pub durable_bytes: AtomicU64,
}

#[derive(Debug)]
struct LinkInner {
    /// The standby's HTTP address, for a switchover to reach it.
    http: String,
    state: LinkState,
    reason: Option<String>,
    /// (last seq of a frame, bytes shipped up to it, when it was shipped).
    shipped: VecDeque<(u64, u64, Instant)>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StandbyStatus {
    pub name: String,
    pub peer: String,
    /// Its HTTP address (empty when it did not say).
    pub http: String,
    pub mode: Mode,
    pub state: LinkState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub connected_for_s: f64,
    pub shipped_seq: u64,
    pub received_seq: u64,
    pub durable_seq: u64,
    pub applied_seq: u64,
    pub lag_records: u64,
    pub lag_bytes: u64,
    pub lag_ms: f64,
}

impl StandbyLink {
    pub fn new(id: u64, name: &str, peer: &str, mode: Mode, from_seq: u64) -> StandbyLink {
        let before = from_seq.saturating_sub(1);
        StandbyLink {
            id,
            name: name.to_string(),
            peer: peer.to_string(),
            mode,
            since: Instant::now(),
            inner: Mutex::new(LinkInner {
                http: String::new(),
                state: LinkState::CatchingUp,
                reason: None,
                shipped: VecDeque::new(),
            }),
            shipped_seq: AtomicU64::new(before),
            received_seq: AtomicU64::new(before),
            durable_seq: AtomicU64::new(before),
            applied_seq: AtomicU64::new(0),
            shipped_bytes: AtomicU64::new(0),
            durable_bytes: AtomicU64::new(0),
        }
    }

    pub fn set_state(&self, state: LinkState, reason: Option<String>) {
        let mut i = self.inner.lock();
        i.state = state;
        i.reason = reason;
    }

    pub fn state(&self) -> LinkState {
        self.inner.lock().state
    }

    /// A frame ending at `seq` went out.
    pub fn shipped(&self, seq: u64, bytes: u64) {
        self.shipped_seq.store(seq, Ordering::Relaxed);
        let total = self.shipped_bytes.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let mut i = self.inner.lock();
        if i.shipped.len() == SHIPPED_REMEMBERED_MAX {
            i.shipped.pop_front();
        }
        i.shipped.push_back((seq, total, Instant::now()));
    }

    /// The standby's acknowledgement.
    pub fn acked(&self, received: u64, durable: u64, applied: u64) {
        self.received_seq.fetch_max(received, Ordering::Relaxed);
        self.durable_seq.fetch_max(durable, Ordering::Relaxed);
        self.applied_seq.fetch_max(applied, Ordering::Relaxed);
        let mut i = self.inner.lock();
        while let Some(&(seq, bytes, _)) = i.shipped.front() {
            if seq <= durable {
                self.durable_bytes.fetch_max(bytes, Ordering::Relaxed);
                i.shipped.pop_front();
            } else {
                break;
            }
        }
    }

    pub fn set_http(&self, http: &str) {
        self.inner.lock().http = http.to_string();
    }

    pub fn status(&self, primary_seq: u64) -> StandbyStatus {
        let i = self.inner.lock();
        let durable = self.durable_seq.load(Ordering::Relaxed);
        let lag_ms = if durable >= primary_seq {
            0.0
        } else {
            i.shipped
                .front()
                .map(|(_, _, at)| at.elapsed().as_secs_f64() * 1000.0)
                .unwrap_or(0.0)
        };
        StandbyStatus {
            name: self.name.clone(),
            peer: self.peer.clone(),
            http: i.http.clone(),
            mode: self.mode,
            state: i.state,
            reason: i.reason.clone(),
            connected_for_s: self.since.elapsed().as_secs_f64(),
            shipped_seq: self.shipped_seq.load(Ordering::Relaxed),
            received_seq: self.received_seq.load(Ordering::Relaxed),
            durable_seq: durable,
            applied_seq: self.applied_seq.load(Ordering::Relaxed),
            lag_records: primary_seq.saturating_sub(durable),
            lag_bytes: self
                .shipped_bytes
                .load(Ordering::Relaxed)
                .saturating_sub(self.durable_bytes.load(Ordering::Relaxed)),
            lag_ms,
        }
    }
}

/// The standbys of a primary: connected ones, and the last few that left
/// (with why), so /status can say what happened.
#[derive(Debug, Default)]
pub struct Standbys {
    links: Mutex<Vec<Arc<StandbyLink>>>,
    gone: Mutex<VecDeque<StandbyStatus>>,
    next_id: AtomicU64,
}

/// Departed standbys kept for /status.
const GONE_REMEMBERED_MAX: usize = 8;

impl Standbys {
    pub fn next_id(&self) -> u64 {
        self.next_id.fetch_add(1, Ordering::Relaxed) + 1
    }

    pub fn add(&self, link: Arc<StandbyLink>) {
        self.links.lock().push(link);
    }

    pub fn remove(&self, id: u64, primary_seq: u64) {
        let mut links = self.links.lock();
        if let Some(at) = links.iter().position(|l| l.id == id) {
            let l = links.remove(at);
            let mut g = self.gone.lock();
            if g.len() == GONE_REMEMBERED_MAX {
                g.pop_front();
            }
            g.push_back(l.status(primary_seq));
        }
    }

    pub fn connected(&self, primary_seq: u64) -> Vec<StandbyStatus> {
        self.links
            .lock()
            .iter()
            .map(|l| l.status(primary_seq))
            .collect()
    }

    pub fn departed(&self) -> Vec<StandbyStatus> {
        self.gone.lock().iter().cloned().collect()
    }
}

/// A standby's own view of its link to the primary.
#[derive(Debug, Clone, Serialize)]
pub struct FollowerStatus {
    pub primary: String,
    pub state: LinkState,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    pub mode: Option<Mode>,
    pub received_seq: u64,
    pub durable_seq: u64,
    pub applied_seq: u64,
    /// The primary's sequence as last heard.
    pub primary_seq: u64,
    /// The primary's epoch at the last handshake.
    pub primary_epoch: u32,
    pub lag_records: u64,
    /// Now minus the primary's clock in its last heartbeat or record: how
    /// stale this standby's view may be.
    pub heard_ms_ago: f64,
    pub connects: u64,
    /// From the primary journaling a record (its time) to this standby
    /// having it appended and committed (fsynced under `--fsync always`), in
    /// microseconds, over the records received since start.
    pub lag_us: LagSummary,
}

#[derive(Debug, Clone, Default, Serialize)]
pub struct LagSummary {
    pub records: u64,
    pub p50: u64,
    pub p99: u64,
    pub max: u64,
}
