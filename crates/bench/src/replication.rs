//! `tickdb bench replication`: what a standby costs its primary and what
//! it gives back, after Zero-Impact Crash Recovery for kdb+ (a log
//! forwarder ships the primary's log to a standby, which replays it and
//! snapshots every 5 minutes; on failover it restores the last snapshot
//! and replays the log after it). Every node is `tickdb up` as a child
//! process on loopback, on free ports, with its own data directory and
//! replication port; standbys follow with `--standby-of` and the run's
//! shared secret. Sections:
//!
//! - `cost`: Figures 2 and 3, the bulk insert on the primary alone, with an
//!   async standby and with a semi-sync one (throughput, CPU, RSS)
//! - `lag`: the standby's lag behind the primary's journal at a steady rate
//! - `ack`: acknowledged-write latency under semi-sync against `--fsync
//!   always` alone
//! - `catchup`: a new standby N GB behind, against a raw cold read
//! - `restore`: Figure 4, a standby's restart from its last snapshot and
//!   the log after it, against a full replay
//!
//! Every scenario ends with the same check (`cluster::Cluster::verify`):
//! the standby's journal equals the primary's, and both hold the same rows.
//! A mismatch fails the benchmark once the report is written.

mod ack;
mod catchup;
pub(crate) mod cluster;
mod cost;
mod lag;
mod markdown;
pub(crate) mod restore;

pub use ack::AckOptions;
pub use catchup::CatchupOptions;
pub use cluster::Setup;
pub use cost::CostOptions;
pub use lag::LagOptions;
pub use restore::RestoreOptions;

use crate::error::Result;
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::Path;

/// The sections, by the names `--sections` takes.
pub const SECTIONS: [&str; 5] = ["insert", "lag", "ack", "catchup", "restore"];

#[derive(Debug, Clone, Serialize)]
pub struct ReplicationOptions {
    pub sections: Vec<String>,
    pub cost: CostOptions,
    pub lag: LagOptions,
    pub ack: AckOptions,
    pub catchup: CatchupOptions,
    pub restore: RestoreOptions,
}

impl ReplicationOptions {
    fn runs(&self, section: &str) -> bool {
        self.sections.iter().any(|s| s == section)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ReplicationReport {
    pub machine: String,
    pub cores: usize,
    pub date: String,
    pub build: &'static str,
    pub options: ReplicationOptions,
    pub insert: Vec<cost::CostCell>,
    pub lag: Vec<lag::LagCell>,
    pub ack: Vec<ack::AckCell>,
    pub catchup: Option<catchup::CatchupResult>,
    pub restore: Option<restore::RestoreResult>,
    /// Every scenario's correctness check.
    pub checks: Vec<cluster::Check>,
    /// Every check passed, and no acknowledged row was lost or duplicated.
    pub correct: bool,
}

impl ReplicationReport {
    pub fn markdown(&self) -> String {
        markdown::render(self)
    }

    /// What failed, for the error a mismatch ends the benchmark with.
    pub fn failures(&self) -> Vec<String> {
        let mut out: Vec<String> = self
            .checks
            .iter()
            .filter(|c| !c.ok)
            .map(|c| {
                format!(
                    "{}: journals {}; rows {} on the primary, {} on the standby",
                    c.scenario, c.journal_compare, c.primary_rows, c.standby_rows
                )
            })
            .collect();
        for a in &self.ack {
            if a.lost_rows > 0 || a.duplicated_rows > 0 {
                out.push(format!(
                    "ack latency, {}: {} acknowledged rows lost, {} duplicated",
                    a.setup.label(),
                    a.lost_rows,
                    a.duplicated_rows
                ));
            }
        }
        out
    }
}

/// The progress display: one bar of steps with a message, and the bars of
/// the step in hand beneath it.
pub struct Progress {
    pub mp: MultiProgress,
    pub steps: ProgressBar,
}

pub fn run(bin: &Path, work: &Path, o: &ReplicationOptions) -> Result<ReplicationReport> {
    let machine = crate::machine::Machine::probe(work);
    let c = cluster::Cluster::new(bin, work);
    let total = [
        ("insert", cost::steps(&o.cost)),
        ("lag", lag::steps(&o.lag)),
        ("ack", ack::steps(&o.ack)),
        ("catchup", o.catchup.runs as u64),
        ("restore", restore::steps(&o.restore)),
    ]
    .iter()
    .filter(|(s, _)| o.runs(s))
    .map(|(_, n)| n)
    .sum();
    let mp = MultiProgress::new();
    let steps = mp.add(ProgressBar::new(total));
    steps.set_style(
        ProgressStyle::with_template("replication {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let ui = Progress { mp, steps };
    let mut checks = Vec::new();
    let insert = if o.runs("insert") {
        cost::run(&c, &o.cost, &ui, &mut checks)?
    } else {
        Vec::new()
    };
    let lag = if o.runs("lag") {
        lag::run(&c, &o.lag, &ui.steps, &mut checks)?
    } else {
        Vec::new()
    };
    let ack = if o.runs("ack") {
        ack::run(&c, &o.ack, &ui, &mut checks)?
    } else {
        Vec::new()
    };
    let catchup = if o.runs("catchup") {
        Some(catchup::run(&c, &o.catchup, &ui, &mut checks)?)
    } else {
        None
    };
    let restore = if o.runs("restore") {
        Some(restore::run(&c, &o.restore, &ui, &mut checks)?)
    } else {
        None
    };
    ui.steps.finish_and_clear();
    let mut r = ReplicationReport {
        machine: machine.summary(),
        cores: machine.cores,
        date: crate::today_utc(),
        build: crate::build_profile(),
        options: o.clone(),
        insert,
        lag,
        ack,
        catchup,
        restore,
        checks,
        correct: false,
    };
    r.correct = r.failures().is_empty();
    Ok(r)
}
