//! Rows lost at a failover: a writer logs every row acknowledged to it
//! (outside the database) while the live feed runs; the primary is killed
//! with SIGKILL and etcd elects the standby. Once the new primary serves,
//! the killed node is restarted (a semi-sync primary acknowledges nothing
//! without a standby: until it rejoins, writes wait --sync-timeout-ms and
//! are refused, not acknowledged), and the round ends when the group is
//! stable: every acknowledged row must be on the new primary. This module
//! runs the semi-sync rounds; the async rows come from the etcd kill -9
//! rounds (`rto`), which run the same writer.

use super::group::{Group, NAMES, STABLE_TIMEOUT};
use super::writer::{tally, Tally, Writer};
use super::{Check, Progress};
use crate::child;
use crate::error::{BenchError, Result};
use serde::Serialize;
use std::time::{Duration, Instant};

pub const WRITER_SYM: &str = "FOSEMI";
const WRITER_LEAD: Duration = Duration::from_millis(300);
const ELECTION_TIMEOUT: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Serialize)]
pub struct LossRound {
    pub killed: &'static str,
    /// The writer's rows of the round against the new primary.
    pub writer: Tally,
    /// Requests refused or broken (not acknowledged).
    pub refused: u64,
    /// The kill until the standby reported itself the primary, s.
    pub elected_s: f64,
}

/// The totals of a mode's rounds.
#[derive(Debug, Clone, Serialize)]
pub struct LossResult {
    pub mode: &'static str,
    pub rounds: usize,
    pub acked: u64,
    pub lost: u64,
    pub duplicated: u64,
    /// Acknowledgements in an epoch older than one acknowledged before.
    pub stale: u64,
    /// Lost rows per round.
    pub lost_per_round: Vec<u64>,
}

impl LossResult {
    pub fn of(mode: &'static str, per_round: &[Tally]) -> LossResult {
        LossResult {
            mode,
            rounds: per_round.len(),
            acked: per_round.iter().map(|r| r.acked).sum(),
            lost: per_round.iter().map(|r| r.lost).sum(),
            duplicated: per_round.iter().map(|r| r.duplicated).sum(),
            stale: per_round.iter().map(|r| r.stale).sum(),
            lost_per_round: per_round.iter().map(|r| r.lost).collect(),
        }
    }
}

pub fn run(
    g: &mut Group,
    rounds: usize,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<Vec<LossRound>> {
    let mut out = Vec::new();
    let mut next_id = 1;
    for round in 1..=rounds {
        let (p, s) = g.wait_stable(STABLE_TIMEOUT)?;
        ui.steps.set_message(format!(
            "loss ({}): round {round}/{rounds}, kill -9 of the primary {}",
            g.spec.mode, NAMES[p]
        ));
        super::rto::settle(g, p)?;
        let w = Writer::start([g.http(0), g.http(1)], p, WRITER_SYM, next_id);
        child::sleep(WRITER_LEAD)?;
        let t0 = Instant::now();
        g.kill(p);
        let elected_s = loop {
            child::check_interrupt()?;
            g.alive(s)?;
            if g.view(s).is_ok_and(|v| v.is("primary")) {
                break t0.elapsed().as_secs_f64();
            }
            if t0.elapsed() > ELECTION_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "loss ({}): {} was not elected within {ELECTION_TIMEOUT:?}",
                    g.spec.mode, NAMES[s]
                )));
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        g.start(p, None)?;
        g.wait_stable(STABLE_TIMEOUT)?;
        child::sleep(WRITER_LEAD)?;
        let log = w.halt();
        next_id = log.next_id;
        let (now_p, _) = g.wait_stable(STABLE_TIMEOUT)?;
        let present = g.ids(now_p, WRITER_SYM)?;
        let writer = tally(&log.acks, &present);
        checks.push(g.verify(&format!("loss ({}), round {round}", g.spec.mode))?);
        out.push(LossRound {
            killed: NAMES[p],
            writer,
            refused: log.failed,
            elected_s,
        });
        ui.steps.inc(1);
    }
    Ok(out)
}
