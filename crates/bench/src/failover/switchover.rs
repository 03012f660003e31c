//! A planned switchover's downtime: a client writes continuously (one row
//! per request, about one a millisecond, following the primary) while the
//! live feed runs, and `POST /admin/switchover` is sent to the primary: it
//! stops taking writes, waits until the standby holds everything durably,
//! has it promoted and rejoins as its standby. The downtime is the gap
//! between the last write the old primary acknowledged and the first the
//! new one did. Nothing acknowledged may be lost.

use super::group::{Group, NAMES, STABLE_TIMEOUT};
use super::writer::{tally, Tally, Writer};
use super::{Check, Progress};
use crate::child;
use crate::error::{BenchError, Result};
use crate::http::request_json_at;
use serde::Serialize;
use std::time::{Duration, Instant};

pub const WRITER_SYM: &str = "FOSWITCH";
/// The writer runs this long before the switchover, and after the new
/// primary's first acknowledgement.
const WRITER_LEAD: Duration = Duration::from_millis(300);
/// The switchover's own wait for the standby, as `tickdb switchover`'s
/// default.
const SWITCHOVER_TIMEOUT: Duration = Duration::from_secs(15);
const NEW_PRIMARY_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Serialize)]
pub struct SwitchoverRound {
    pub from: &'static str,
    pub to: &'static str,
    pub epoch: u64,
    /// The last acknowledgement of the old primary to the first of the
    /// new one, ms.
    pub gap_ms: f64,
    /// The `POST /admin/switchover` round trip, and the node's `took_ms`.
    pub call_ms: f64,
    pub took_ms: Option<f64>,
    /// The writer's rows of the round against the new primary.
    pub writer: Tally,
    /// Why the rdb stopped in the round, if it did: it held a record the
    /// new primary never had (a fresh rdb replaced it). A failure: a
    /// planned switchover must not drop what a subscriber was sent.
    pub rdb_diverged: Vec<String>,
}

pub fn run(
    g: &mut Group,
    rounds: usize,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<Vec<SwitchoverRound>> {
    let mut out = Vec::new();
    let mut next_id = 1;
    for round in 1..=rounds {
        let (p, s) = g.wait_stable(STABLE_TIMEOUT)?;
        ui.steps.set_message(format!(
            "switchover: round {round}/{rounds}, {} to {}",
            NAMES[p], NAMES[s]
        ));
        super::rto::settle(g, p)?;
        let w = Writer::start([g.http(0), g.http(1)], p, WRITER_SYM, next_id);
        child::sleep(WRITER_LEAD)?;
        let before = w.acked_by(s);
        let t = Instant::now();
        let a = request_json_at(
            g.http(p),
            "POST",
            &format!("/admin/switchover?to={}", NAMES[s]),
            SWITCHOVER_TIMEOUT,
        )?;
        let call_ms = t.elapsed().as_secs_f64() * 1000.0;
        while w.acked_by(s) == before {
            child::check_interrupt()?;
            if t.elapsed() > NEW_PRIMARY_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "switchover: {} acknowledged no write within {NEW_PRIMARY_TIMEOUT:?}: {a}",
                    NAMES[s]
                )));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        child::sleep(WRITER_LEAD)?;
        let log = w.halt();
        next_id = log.next_id;
        let first_new =
            log.acks.iter().position(|x| x.node == s).ok_or_else(|| {
                BenchError::Server("switchover: no acknowledgement logged".into())
            })?;
        let gap_ms = match first_new.checked_sub(1).map(|i| &log.acks[i]) {
            Some(last_old) if last_old.node == p => {
                (log.acks[first_new].at - last_old.at).as_secs_f64() * 1000.0
            }
            _ => {
                return Err(BenchError::Server(
                    "switchover: the old primary acknowledged nothing before the new one".into(),
                ))
            }
        };
        let (now_p, _) = g.wait_stable(STABLE_TIMEOUT)?;
        if now_p != s {
            return Err(BenchError::Server(format!(
                "switchover: {} is the primary afterwards, not {}",
                NAMES[now_p], NAMES[s]
            )));
        }
        let present = g.ids(s, WRITER_SYM)?;
        let writer = tally(&log.acks, &present);
        checks.push(g.verify(&format!("switchover, round {round}"))?);
        let rdb_diverged = g.take_rdb_deaths();
        out.push(SwitchoverRound {
            from: NAMES[p],
            to: NAMES[s],
            epoch: a["epoch"].as_u64().unwrap_or(0),
            gap_ms,
            call_ms,
            took_ms: a["took_ms"].as_f64(),
            writer,
            rdb_diverged,
        });
        ui.steps.inc(1);
    }
    Ok(out)
}
