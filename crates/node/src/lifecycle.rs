//! A node's lifecycle, owned in one place: starting, loading (journal
//! replay, Hot Restart reload, catch-up with a remote tp), ready, draining,
//! stopping. Every listener consults it: query paths answer only when it
//! says ready (with how far loading has got otherwise), `/health` reports
//! it, and `/status` shows it.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

/// Where the node is in its life.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// Opening the journal or the Hot Restart store: nothing to answer yet.
    Starting,
    /// Loading tables: `done` of `total` units (records, rows) of `what`.
    Loading,
    /// Loading stopped at an error (`what` says which): the tables will not
    /// be complete without an operator, so no query is answered. Writes are
    /// still journaled, so nothing acknowledged is lost.
    Failed,
    /// Tables complete and following live updates: queries are answered.
    Ready,
    /// Finishing what is in flight before stopping; no new work.
    Draining,
    /// Shutting down.
    Stopping,
}

#[derive(Debug)]
struct State {
    phase: Phase,
    what: String,
    since: Instant,
}

/// The node's lifecycle. Cheap to clone; clones share the state.
#[derive(Debug, Clone)]
pub struct Lifecycle {
    state: Arc<parking_lot::Mutex<State>>,
    done: Arc<AtomicU64>,
    total: Arc<AtomicU64>,
}

/// What `/status` shows.
#[derive(Debug, Clone, Serialize)]
pub struct LifecycleStatus {
    pub phase: Phase,
    /// What the node is doing in this phase, in words.
    pub what: String,
    pub done: u64,
    pub total: u64,
    pub seconds_in_phase: f64,
}

impl Default for Lifecycle {
    fn default() -> Self {
        Self::new()
    }
}

impl Lifecycle {
    pub fn new() -> Lifecycle {
        Lifecycle {
            state: Arc::new(parking_lot::Mutex::new(State {
                phase: Phase::Starting,
                what: "starting".to_string(),
                since: Instant::now(),
            })),
            done: Arc::new(AtomicU64::new(0)),
            total: Arc::new(AtomicU64::new(0)),
        }
    }

    fn set(&self, phase: Phase, what: &str) {
        let mut st = self.state.lock();
        // Draining and stopping are final: a late loader cannot undo them.
        if matches!(st.phase, Phase::Draining | Phase::Stopping) && phase < Phase::Draining {
            return;
        }
        st.phase = phase;
        st.what = what.to_string();
        st.since = Instant::now();
    }

    /// Still starting: `what` is being opened.
    pub fn starting(&self, what: &str) {
        self.set(Phase::Starting, what);
    }

    /// Loading `what`: `total` units to go through (0 if unknown).
    pub fn loading(&self, what: &str, total: u64) {
        self.done.store(0, Ordering::Relaxed);
        self.total.store(total, Ordering::Relaxed);
        self.set(Phase::Loading, what);
    }

    /// Units loaded so far (cheap: called per record).
    pub fn progress(&self, done: u64) {
        self.done.store(done, Ordering::Relaxed);
    }

    /// Loading failed for good: `why` is shown by `/health`, `/status` and
    /// every refused query until the node is restarted.
    pub fn failed(&self, why: &str) {
        self.set(Phase::Failed, why);
    }

    pub fn ready(&self) {
        self.set(Phase::Ready, "serving");
    }

    /// No new work from now on; what is in flight finishes.
    pub fn draining(&self) {
        self.set(Phase::Draining, "draining");
    }

    pub fn stopping(&self) {
        self.set(Phase::Stopping, "stopping");
    }

    pub fn phase(&self) -> Phase {
        self.state.lock().phase
    }

    pub fn is_ready(&self) -> bool {
        self.phase() == Phase::Ready
    }

    pub fn status(&self) -> LifecycleStatus {
        let st = self.state.lock();
        LifecycleStatus {
            phase: st.phase,
            what: st.what.clone(),
            done: self.done.load(Ordering::Relaxed),
            total: self.total.load(Ordering::Relaxed),
            seconds_in_phase: st.since.elapsed().as_secs_f64(),
        }
    }

    /// Why the node cannot answer a query now, or `Ok` when it can.
    pub fn check(&self) -> Result<(), String> {
        let s = self.status();
        match s.phase {
            Phase::Ready | Phase::Draining => Ok(()),
            Phase::Starting => Err(format!(
                "the node is starting ({}); its tables are not loaded yet, retry shortly",
                s.what
            )),
            Phase::Loading if s.total > 0 => Err(format!(
                "{}: {} of {} ({:.0}%) after {:.1} s; queries are answered once the tables are complete",
                s.what,
                s.done,
                s.total,
                100.0 * s.done as f64 / s.total as f64,
                s.seconds_in_phase
            )),
            Phase::Loading => Err(format!(
                "{}: {} so far after {:.1} s; queries are answered once the tables are complete",
                s.what, s.done, s.seconds_in_phase
            )),
            Phase::Failed => Err(format!(
                "loading the tables failed: {}; queries are not answered (the log has the \
                 details; writes are still journaled), restart the node once the cause is fixed",
                s.what
            )),
            Phase::Stopping => Err("the node is stopping".to_string()),
        }
    }
}

impl PartialOrd for Phase {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Phase {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (*self as u8).cmp(&(*other as u8))
    }
}

impl tickdb_query::Readiness for Lifecycle {
    fn check(&self) -> Result<(), String> {
        Lifecycle::check(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loading_reports_progress_until_ready() {
        let l = Lifecycle::new();
        assert!(l.check().unwrap_err().contains("starting"));
        l.loading("replaying the journal (records)", 3_000_000);
        l.progress(158_100);
        let why = l.check().unwrap_err();
        assert!(why.contains("158100 of 3000000"), "{why}");
        l.ready();
        assert!(l.check().is_ok());
        l.draining();
        assert!(
            l.check().is_ok(),
            "in-flight work still answers while draining"
        );
        l.loading("late", 1);
        assert_eq!(l.phase(), Phase::Draining, "draining is final");
    }

    #[test]
    fn a_failed_load_refuses_queries_with_its_reason_until_stopped() {
        let life = Lifecycle::new();
        life.loading("replaying the journal (records)", 10);
        life.progress(4);
        life.failed("journal replay stopped at seq 5: corrupt update");
        assert_eq!(life.phase(), Phase::Failed);
        let why = life.check().unwrap_err();
        assert!(why.contains("seq 5: corrupt update"), "{why}");
        assert_eq!(
            life.status().what,
            "journal replay stopped at seq 5: corrupt update"
        );
        // Stopping still ends a failed node.
        life.stopping();
        assert_eq!(life.phase(), Phase::Stopping);
    }
}
