//! Recovery time after a crash: the primary is killed with SIGKILL under
//! the live feed, and the standby takes over, promoted by hand (the
//! benchmark plays an operator with no detection time: `POST
//! /admin/promote` right after the kill) or elected through etcd once the
//! dead primary's lease expires. Per round, from the kill: until the new
//! primary acknowledges a write (a one-row `POST /write` to it about every
//! millisecond), and until the remote rdb (`tickdb rdb --tp A,B`) has
//! applied that row. Then the killed node is restarted (it rejoins as a
//! standby, cutting what the new primary never had), and the round ends
//! with the group's check (journals compared, rows counted).
//!
//! In the etcd rounds a writer also logs every acknowledged row (async
//! replication): what the new primary lacks of them is the async loss.

use super::group::{Group, NAMES, STABLE_TIMEOUT};
use super::writer::{tally, Tally, Writer};
use super::{Check, Progress};
use crate::child;
use crate::error::{BenchError, Result};
use crate::http::{request_json_at, HttpConn};
use serde::Serialize;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

/// The probe's symbol (its `size` is the round).
pub const PROBE_SYM: &str = "FOPROBE";
/// The writer's symbol in the etcd rounds.
pub const WRITER_SYM: &str = "FOWRITE";
/// Between probes.
const PROBE_EVERY: Duration = Duration::from_millis(1);
/// A probe request gives up after this.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// No acknowledged write this long after the kill fails the benchmark.
const RECOVERY_TIMEOUT: Duration = Duration::from_secs(120);
/// The feed runs on the primary for a random part of this before the kill
/// (so that the kill lands anywhere in the feed's and the lease's cycles).
const SETTLE_MS: std::ops::Range<u64> = 300..800;
/// The writer runs this long before the kill, and after the rdb resumed.
const WRITER_LEAD: Duration = Duration::from_millis(200);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum How {
    /// `POST /admin/promote` on the standby right after the kill.
    Manual,
    /// Elected through etcd when the dead primary's lease expires.
    Etcd,
}

impl How {
    pub fn label(self) -> &'static str {
        match self {
            How::Manual => "manual promotion",
            How::Etcd => "etcd automatic failover",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RtoRound {
    pub killed: &'static str,
    pub promoted: &'static str,
    /// The epoch the new primary acknowledged in.
    pub epoch: u64,
    /// Kill until the new primary acknowledged a write, s.
    pub write_s: f64,
    /// Kill until the rdb applied that write, s (None: the rdb had applied
    /// records the new primary never had: see `rdb_diverged` and
    /// `rdb_gaps`).
    pub rdb_s: Option<f64>,
    /// Manual: the `POST /admin/promote` round trip, ms, and the node's own
    /// `took_ms`.
    pub promote_call_ms: Option<f64>,
    pub promote_took_ms: Option<f64>,
    /// Probes refused before the first acknowledgement.
    pub probes_refused: u64,
    /// The killed node's restart until the group was stable again, s.
    pub rejoin_s: f64,
    /// The writer's rows of the round against the new primary (etcd
    /// rounds).
    pub writer: Option<Tally>,
}

#[derive(Debug, Clone, Serialize)]
pub struct RtoResult {
    pub how: How,
    pub rounds: Vec<RtoRound>,
    /// Rounds whose rdb stopped because it held records the new primary
    /// never had (async replication), with its reason; a fresh rdb was
    /// started for the next round.
    pub rdb_diverged: Vec<String>,
    /// Rounds whose rdb went on with a gap instead: it held a record of the
    /// old primary's that the new primary never had, was not refused, and
    /// lacked the new primary's record at that sequence (a fresh rdb was
    /// started). A failure.
    pub rdb_gaps: Vec<String>,
    /// The feed's own summary over all the rounds.
    pub feed: Option<tickdb_stack::feed::FeedSummary>,
}

/// The last acknowledgement of a probe: when, its sequence and epoch.
struct Acked {
    at: Instant,
    seq: u64,
    epoch: u64,
    refused: u64,
}

/// Writes one probe row to `addr` about every millisecond until it is
/// acknowledged.
fn probe(addr: SocketAddr, round: usize, t0: Instant) -> Result<Acked> {
    let body = format!("trade,sym={PROBE_SYM} price=1.0,size={round}i\n");
    let mut conn: Option<HttpConn> = None;
    let mut refused = 0;
    loop {
        child::check_interrupt()?;
        let c = match conn.take() {
            Some(c) => Ok(c),
            None => HttpConn::connect_to(addr, PROBE_TIMEOUT),
        };
        let r = c.and_then(|mut c| {
            let r = c.request_full("POST", "/write", body.as_bytes());
            if r.is_ok() {
                conn = Some(c);
            }
            r
        });
        if let Ok(r) = &r {
            if r.status == 204 {
                let num = |h: &str| r.header(h).and_then(|v| v.parse().ok()).unwrap_or(0);
                return Ok(Acked {
                    at: Instant::now(),
                    seq: num("x-tickdb-seq"),
                    epoch: num("x-tickdb-epoch"),
                    refused,
                });
            }
        }
        refused += 1;
        if t0.elapsed() > RECOVERY_TIMEOUT {
            return Err(BenchError::Server(format!(
                "no write acknowledged by {addr} within {RECOVERY_TIMEOUT:?} of the kill; last answer: {}",
                match r {
                    Ok(r) => format!("{} {}", r.status, String::from_utf8_lossy(&r.body)),
                    Err(e) => e.to_string(),
                }
            )));
        }
        std::thread::sleep(PROBE_EVERY);
    }
}

/// Lets the feed run on the primary for a random while, and checks that it
/// does (its journal grows).
pub fn settle(g: &mut Group, p: usize) -> Result<()> {
    let before = g.view(p)?.tp_seq;
    child::sleep(Duration::from_millis(rand::random_range(SETTLE_MS)))?;
    let t0 = Instant::now();
    loop {
        g.feed_alive()?;
        if g.view(p)?.tp_seq > before {
            return Ok(());
        }
        if t0.elapsed() > Duration::from_secs(30) {
            return Err(BenchError::Server(format!(
                "the feed wrote nothing to the primary {} for 30 s",
                NAMES[p]
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Runs `rounds` kill -9 rounds on a running group (feed and rdb started).
pub fn run(
    g: &mut Group,
    how: How,
    rounds: usize,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<RtoResult> {
    let mut out = Vec::new();
    let mut diverged = Vec::new();
    let mut skipped = Vec::new();
    let mut next_id = 1;
    for round in 1..=rounds {
        let (p, s) = g.wait_stable(STABLE_TIMEOUT)?;
        ui.steps.set_message(format!(
            "{}: round {round}/{rounds}, kill -9 of the primary {}",
            how.label(),
            NAMES[p]
        ));
        settle(g, p)?;
        let writer = (how == How::Etcd)
            .then(|| Writer::start([g.http(0), g.http(1)], p, WRITER_SYM, next_id));
        if writer.is_some() {
            child::sleep(WRITER_LEAD)?;
        }
        let t0 = Instant::now();
        g.kill(p);
        let (mut call_ms, mut took_ms) = (None, None);
        if how == How::Manual {
            let t = Instant::now();
            let a = request_json_at(g.http(s), "POST", "/admin/promote", Duration::from_secs(10))?;
            call_ms = Some(t.elapsed().as_secs_f64() * 1000.0);
            took_ms = a["took_ms"].as_f64();
        }
        let acked = probe(g.http(s), round, t0)?;
        let write_s = (acked.at - t0).as_secs_f64();
        let rdb_s = loop {
            child::check_interrupt()?;
            if let Some(why) = g.rdb_exited() {
                diverged.push(format!("round {round}: {why}"));
                break None;
            }
            if g.rdb_seq().ok().flatten().is_some_and(|r| r >= acked.seq) {
                let at = t0.elapsed().as_secs_f64();
                // The rdb is at the probe's sequence: it must hold the
                // probe's row. At that sequence without it, it holds a
                // record of the old primary's (async) that it applied
                // before the failover: it is refused as diverged when it
                // next subscribes (and exits, above); until then, wait.
                // (An rdb that is being refused may close the query's
                // connection: its exit is seen above, next time round.)
                if matches!(g.rdb_ids(PROBE_SYM), Ok(ids) if ids.contains_key(&(round as u64))) {
                    break Some(at);
                }
            }
            if t0.elapsed() > RECOVERY_TIMEOUT {
                if g.rdb_seq().ok().flatten().is_some_and(|r| r >= acked.seq) {
                    skipped.push(format!(
                        "round {round}: the rdb reached seq {} without the new primary's record at that seq (the probe row): it had applied a record of the old primary's that the new primary never had, and was not refused within {RECOVERY_TIMEOUT:?}",
                        acked.seq
                    ));
                    break None;
                }
                return Err(BenchError::Server(format!(
                    "the rdb did not apply seq {} of the new primary within {RECOVERY_TIMEOUT:?} of the kill",
                    acked.seq
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        };
        let log = match writer {
            Some(w) => {
                child::sleep(WRITER_LEAD)?;
                Some(w.halt())
            }
            None => None,
        };
        if rdb_s.is_none() {
            g.restart_rdb()?;
        }
        ui.steps.set_message(format!(
            "{}: round {round}/{rounds}, {} rejoins",
            how.label(),
            NAMES[p]
        ));
        let t1 = Instant::now();
        g.start(p, (how == How::Manual).then_some(s))?;
        let (now_p, _) = g.wait_stable(STABLE_TIMEOUT)?;
        let rejoin_s = t1.elapsed().as_secs_f64();
        let mut writer = None;
        if let Some(log) = log {
            let present = g.ids(now_p, WRITER_SYM)?;
            writer = Some(tally(&log.acks, &present));
            next_id = log.next_id;
        }
        checks.push(g.verify(&format!("{}, round {round}", how.label()))?);
        diverged.extend(
            g.take_rdb_deaths()
                .into_iter()
                .map(|why| format!("round {round}: {why}")),
        );
        out.push(RtoRound {
            killed: NAMES[p],
            promoted: NAMES[s],
            epoch: acked.epoch,
            write_s,
            rdb_s,
            promote_call_ms: call_ms,
            promote_took_ms: took_ms,
            probes_refused: acked.refused,
            rejoin_s,
            writer,
        });
        ui.steps.inc(1);
    }
    Ok(RtoResult {
        how,
        rounds: out,
        rdb_diverged: diverged,
        rdb_gaps: skipped,
        feed: None,
    })
}
