//! Semi-synchronous replication's gate: a committed update is published and
//! acknowledged only once `k` standbys have reported it durable (fsynced),
//! as PostgreSQL's `synchronous_commit = on` with `k` synchronous standbys.
//! That is RPO 0: an acknowledged write is on `k + 1` machines.
//!
//! The journal thread hands each committed update to the gate instead of
//! publishing and acknowledging it itself; a releaser thread lets updates
//! through, in sequence order, as standbys report progress. An update still
//! waiting when `timeout` passes is, by default, refused to its writer
//! (journaled here and shipped later, but never acknowledged: the error says
//! so, as Redis's NOREPLICAS does). With `degrade`, the gate instead falls
//! back to acknowledging without the standbys (async), logs it, and shows it
//! in /status and /metrics until the standbys have caught up again.
//!
//! Publishing to subscribers waits for the gate too: no rdb sees an update
//! the standbys might not have.

use crate::error::TpError;
use crate::hub::{Hub, Update};
use parking_lot::{Condvar, Mutex};
use serde::Serialize;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tokio::sync::oneshot;

/// How often the releaser looks again with nothing to wake it.
const IDLE_CHECK_MS: u64 = 100;

/// The semi-sync settings.
#[derive(Debug, Clone, Copy)]
pub struct SyncPolicy {
    /// Standbys that must hold an update durably before it is acknowledged.
    pub standbys: usize,
    pub timeout: Duration,
    /// Acknowledge without the standbys after `timeout` instead of refusing.
    pub degrade: bool,
}

type Reply = oneshot::Sender<Result<u64, TpError>>;

struct Pending {
    update: Arc<Update>,
    reply: Option<Reply>,
    since: Instant,
}

#[derive(Default)]
struct State {
    /// Durable sequence each connected standby last reported.
    standbys: HashMap<u64, u64>,
    pending: VecDeque<Pending>,
    degraded_since: Option<Instant>,
    refused: u64,
    degradations: u64,
    released_seq: u64,
}

/// What /status shows of the gate.
#[derive(Debug, Clone, Serialize)]
pub struct SyncGateStatus {
    pub sync_standbys: usize,
    pub sync_timeout_ms: u64,
    pub degrade_allowed: bool,
    /// Standbys connected and reporting.
    pub standbys_reporting: usize,
    /// The highest sequence `sync_standbys` standbys all hold durably.
    pub durable_on_k_seq: u64,
    /// Updates committed here and waiting for the standbys.
    pub waiting: usize,
    /// True while writes are acknowledged without the standbys.
    pub degraded: bool,
    pub degraded_for_s: f64,
    pub refused_total: u64,
    pub degradations_total: u64,
}

pub struct SyncGate {
    policy: SyncPolicy,
    hub: Arc<Hub>,
    state: Mutex<State>,
    wake: Condvar,
    stop: AtomicBool,
    /// The tp's role: an update released while the tp is fenced is refused.
    role: Option<Arc<crate::role::RoleCell>>,
}

impl SyncGate {
    pub fn new(policy: SyncPolicy, hub: Arc<Hub>, released_seq: u64) -> Arc<SyncGate> {
        Self::with_role(policy, hub, released_seq, None)
    }

    pub fn with_role(
        policy: SyncPolicy,
        hub: Arc<Hub>,
        released_seq: u64,
        role: Option<Arc<crate::role::RoleCell>>,
    ) -> Arc<SyncGate> {
        Arc::new(SyncGate {
            role,
            policy,
            hub,
            state: Mutex::new(State {
                released_seq,
                ..State::default()
            }),
            wake: Condvar::new(),
            stop: AtomicBool::new(false),
        })
    }

    /// Holds a committed update until the standbys have it (journal thread;
    /// in sequence order).
    pub fn hold(&self, update: Arc<Update>, reply: Option<Reply>) {
        let mut st = self.state.lock();
        st.pending.push_back(Pending {
            update,
            reply,
            since: Instant::now(),
        });
        drop(st);
        self.wake.notify_one();
    }

    /// A promoted standby starts gating at `seq` (its journal's end): what
    /// came before arrived from its old primary, not through the gate.
    pub fn start_at(&self, seq: u64) {
        self.state.lock().released_seq = seq;
    }

    /// A standby's progress: everything up to `durable_seq` is fsynced there.
    pub fn report(&self, standby: u64, durable_seq: u64) {
        let mut st = self.state.lock();
        let e = st.standbys.entry(standby).or_insert(0);
        *e = (*e).max(durable_seq);
        drop(st);
        self.wake.notify_one();
    }

    /// A standby went away: it no longer counts.
    pub fn forget(&self, standby: u64) {
        self.state.lock().standbys.remove(&standby);
        self.wake.notify_one();
    }

    fn durable_on_k(&self, st: &State) -> u64 {
        let k = self.policy.standbys.max(1);
        if st.standbys.len() < k {
            return 0;
        }
        let mut v: Vec<u64> = st.standbys.values().copied().collect();
        v.sort_unstable_by(|a, b| b.cmp(a));
        v[k - 1]
    }

    pub fn status(&self) -> SyncGateStatus {
        let st = self.state.lock();
        SyncGateStatus {
            sync_standbys: self.policy.standbys,
            sync_timeout_ms: self.policy.timeout.as_millis() as u64,
            degrade_allowed: self.policy.degrade,
            standbys_reporting: st.standbys.len(),
            durable_on_k_seq: self.durable_on_k(&st),
            waiting: st.pending.len(),
            degraded: st.degraded_since.is_some(),
            degraded_for_s: st
                .degraded_since
                .map(|t| t.elapsed().as_secs_f64())
                .unwrap_or(0.0),
            refused_total: st.refused,
            degradations_total: st.degradations,
        }
    }

    /// Releases updates as the standbys allow, until `stop` (then refuses
    /// whatever still waits: the tp is stopping).
    pub fn run(&self) {
        loop {
            let mut out: Vec<(Pending, Result<u64, TpError>)> = Vec::new();
            {
                let mut st = self.state.lock();
                if self.stop.load(Ordering::Acquire) {
                    for p in st.pending.drain(..) {
                        out.push((p, Err(TpError::Shutdown)));
                    }
                } else {
                    let k_seq = self.durable_on_k(&st);
                    // Caught up again: leave degraded mode.
                    if st.degraded_since.is_some()
                        && st.pending.is_empty()
                        && k_seq >= st.released_seq
                    {
                        let t = st.degraded_since.take();
                        tracing::warn!(
                            "semi-sync restored: {} standby(s) hold everything up to seq {k_seq} again (degraded for {:.1} s)",
                            self.policy.standbys,
                            t.map(|t| t.elapsed().as_secs_f64()).unwrap_or(0.0)
                        );
                    }
                    while let Some(front) = st.pending.front() {
                        let seq = front.update.seq;
                        if seq <= k_seq || st.degraded_since.is_some() {
                            let p = st.pending.pop_front().expect("front exists");
                            st.released_seq = seq;
                            out.push((p, Ok(seq)));
                        } else if front.since.elapsed() >= self.policy.timeout {
                            let waited = front.since.elapsed();
                            if self.policy.degrade {
                                st.degraded_since = Some(Instant::now());
                                st.degradations += 1;
                                tracing::error!(
                                    "semi-sync degraded to async: {} of {} standby(s) reported seq {seq} durable within {} ms; \
                                     writes are acknowledged without them until they catch up (--sync-degrade)",
                                    st.standbys.values().filter(|d| **d >= seq).count(),
                                    self.policy.standbys,
                                    waited.as_millis()
                                );
                                continue;
                            }
                            let p = st.pending.pop_front().expect("front exists");
                            st.released_seq = seq;
                            st.refused += 1;
                            let msg = format!(
                                "not acknowledged: {} standby(s) must hold the update durably (--sync-standbys) and {} of {} connected did within {} ms (--sync-timeout-ms). \
                                 It is journaled on this primary (seq {seq}) and will be shipped to the standbys when they return, but it was not replicated in time",
                                self.policy.standbys,
                                st.standbys.values().filter(|d| **d >= seq).count(),
                                st.standbys.len(),
                                self.policy.timeout.as_millis()
                            );
                            out.push((p, Err(TpError::NotReplicated(msg))));
                        } else {
                            break;
                        }
                    }
                    if out.is_empty() {
                        let wait = st
                            .pending
                            .front()
                            .map(|p| self.policy.timeout.saturating_sub(p.since.elapsed()))
                            .unwrap_or(Duration::from_millis(IDLE_CHECK_MS))
                            .min(Duration::from_millis(IDLE_CHECK_MS))
                            .max(Duration::from_millis(1));
                        self.wake.wait_for(&mut st, wait);
                        continue;
                    }
                }
            }
            // Publish in order (whatever the answer: every journaled update
            // reaches the subscribers, as a replay would give it them), then
            // answer the writers.
            let stopping = self.stop.load(Ordering::Acquire);
            for (p, answer) in out {
                if !stopping {
                    self.hub.publish(p.update);
                }
                if let Some(reply) = p.reply {
                    // Fenced while it waited: never acknowledged.
                    let answer = match (answer, self.role.as_ref().and_then(|r| r.refusal())) {
                        (Ok(_), Some(refused)) => Err(refused),
                        (a, _) => a,
                    };
                    let _ = reply.send(answer);
                }
            }
            if stopping {
                return;
            }
        }
    }

    pub fn stop(&self) {
        self.stop.store(true, Ordering::Release);
        self.wake.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn upd(seq: u64) -> Arc<Update> {
        Arc::new(Update {
            seq,
            batches: vec![],
            payload: bytes::Bytes::new(),
            rows: 0,
            time_ns: 0,
            epoch: 0,
        })
    }

    fn gate(
        standbys: usize,
        timeout_ms: u64,
        degrade: bool,
    ) -> (Arc<SyncGate>, std::thread::JoinHandle<()>) {
        let hub = Arc::new(Hub::new(0, false, 1 << 20, 1 << 24));
        let g = SyncGate::new(
            SyncPolicy {
                standbys,
                timeout: Duration::from_millis(timeout_ms),
                degrade,
            },
            hub,
            0,
        );
        let g2 = g.clone();
        (g, std::thread::spawn(move || g2.run()))
    }

    fn held(g: &SyncGate, seq: u64) -> oneshot::Receiver<Result<u64, TpError>> {
        let (tx, rx) = oneshot::channel();
        g.hold(upd(seq), Some(tx));
        rx
    }

    #[test]
    fn acknowledged_in_order_once_k_standbys_hold_it() {
        let (g, t) = gate(2, 10_000, false);
        let a = held(&g, 1);
        let b = held(&g, 2);
        g.report(7, 2);
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(g.status().waiting, 2, "one standby of two is not enough");
        g.report(8, 1);
        assert_eq!(a.blocking_recv().unwrap().unwrap(), 1);
        assert_eq!(g.status().durable_on_k_seq, 1);
        g.report(8, 2);
        assert_eq!(b.blocking_recv().unwrap().unwrap(), 2);
        g.stop();
        t.join().unwrap();
    }

    #[test]
    fn refused_at_the_timeout_unless_degrading_is_allowed() {
        let (g, t) = gate(1, 50, false);
        let e = held(&g, 1).blocking_recv().unwrap().unwrap_err();
        assert!(matches!(e, TpError::NotReplicated(_)), "{e}");
        assert!(e.to_string().contains("not acknowledged"), "{e}");
        assert_eq!(g.status().refused_total, 1);
        g.stop();
        t.join().unwrap();

        let (g, t) = gate(1, 50, true);
        assert_eq!(held(&g, 1).blocking_recv().unwrap().unwrap(), 1);
        assert!(g.status().degraded);
        // Degraded: acknowledged at once, until a standby holds everything.
        let start = Instant::now();
        assert_eq!(held(&g, 2).blocking_recv().unwrap().unwrap(), 2);
        assert!(start.elapsed() < Duration::from_millis(40));
        g.report(1, 2);
        let deadline = Instant::now() + Duration::from_secs(5);
        while g.status().degraded && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert!(!g.status().degraded);
        g.stop();
        t.join().unwrap();
    }

    #[test]
    fn a_departed_standby_no_longer_counts() {
        let (g, t) = gate(1, 100, false);
        g.report(3, 10);
        g.forget(3);
        assert!(held(&g, 11).blocking_recv().unwrap().is_err());
        g.stop();
        t.join().unwrap();
    }
}
