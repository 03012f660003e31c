//! Replication lag at a steady rate: `tickdb feed --rate R` sends trades
//! and quotes (1:10) over ILP TCP to a primary for a while; its standby
//! measures, per record, the time from the primary journaling it (the
//! record's journal time) to its own durable copy (appended and fsynced,
//! `--fsync always`), and reports p50, p99 and max in /status
//! (`replication.primary.lag_us`). Each cell starts a fresh pair, so the
//! standby's histogram holds exactly the feed's records.

use super::cluster::{self, Check, Cluster, Setup};
use crate::child::{self, Child};
use crate::error::{BenchError, Result};
use indicatif::ProgressBar;
use serde::Serialize;
use std::process::Command;
use std::time::Duration;

/// Symbols in the feed's universe (the market-data stack's default).
const FEED_SYMBOLS: usize = 2000;
/// Time a feed may take beyond its duration (start, the last writes).
const FEED_EXIT_SLACK: Duration = Duration::from_secs(120);

#[derive(Debug, Clone, Serialize)]
pub struct LagOptions {
    /// Target rows/s of each cell.
    pub rates: Vec<u64>,
    pub seconds: f64,
    /// The shipping modes measured.
    pub setups: Vec<Setup>,
    pub seed: u64,
    /// Rounds of every cell in turn; the report gives medians.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct LagCell {
    /// Which round (0-based).
    pub run: usize,
    pub setup: Setup,
    pub target_rows_s: u64,
    /// What the feed achieved over its run (its own summary).
    pub achieved_rows_s: f64,
    pub rows: u64,
    /// Records the standby measured.
    pub records: u64,
    pub p50_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
    /// Writes the semi-sync gate refused (not acknowledged in time).
    pub refused: u64,
}

/// Runs `tickdb feed` at `rate` for `seconds` against `p`; its summary.
fn feed(
    c: &Cluster,
    p: &crate::servers::Tickdb,
    rate: u64,
    seconds: f64,
    seed: u64,
    tag: &str,
) -> Result<tickdb_stack::feed::FeedSummary> {
    let summary = c.work().join(format!("{tag}-feed.json"));
    let mut cmd = Command::new(c.bin());
    cmd.env("TICKDB_LOG", "warn")
        .args(["feed", "--ilp-port", &p.ilp.to_string()])
        .args(["--http-port", &p.http.to_string()])
        .args(["--rate", &rate.to_string()])
        .args(["--duration", &seconds.to_string()])
        .args(["--symbols", &FEED_SYMBOLS.to_string()])
        .args(["--seed", &seed.to_string()])
        .arg("--summary")
        .arg(&summary);
    let mut f = Child::spawn(
        "tickdb feed",
        &mut cmd,
        &c.work().join(format!("{tag}-feed.log")),
    )?;
    let st = f.wait_exit(Duration::from_secs_f64(seconds) + FEED_EXIT_SLACK)?;
    if !st.success() {
        return Err(BenchError::Server(format!(
            "tickdb feed exited {st}:\n{}",
            child::log_tail(&f.log)
        )));
    }
    let text = std::fs::read(&summary)
        .map_err(BenchError::io(format!("reading {}", summary.display())))?;
    serde_json::from_slice(&text)
        .map_err(|e| BenchError::Protocol(format!("{}: {e}", summary.display())))
}

fn cell(
    c: &Cluster,
    o: &LagOptions,
    setup: Setup,
    rate: u64,
    run: usize,
    checks: &mut Vec<Check>,
) -> Result<LagCell> {
    let tag = format!("repl-lag-{}-{rate}-{run}", setup.label());
    // Both sides fsync every commit: the lag ends at the standby's durable
    // copy, and a semi-sync acknowledgement means durable on both.
    let mut flags = vec!["--fsync".to_string(), "always".into()];
    flags.extend(setup.primary_flags());
    let mut p = c.primary(&format!("{tag}-primary"), &flags)?;
    let mut s = c.standby(
        &format!("{tag}-standby"),
        &p,
        &["--fsync".into(), "always".into()],
    )?;
    cluster::wait_linked(&mut p, setup)?;
    let summary = feed(c, &p, rate, o.seconds, o.seed, &tag)?;
    checks.push(c.verify(
        &format!("lag, {} at {rate} rows/s, round {}", setup.label(), run + 1),
        &mut p,
        &mut s,
    )?);
    let st = cluster::status(&s)?;
    let (records, p50_us, p99_us, max_us) = cluster::standby_lag_us(&st)?;
    let refused = cluster::status(&p)?.json["replication"]["semi_sync"]["refused_total"]
        .as_u64()
        .unwrap_or(0);
    cluster::stop(&mut s);
    cluster::stop(&mut p);
    cluster::remove_data(&s);
    cluster::remove_data(&p);
    Ok(LagCell {
        run,
        setup,
        target_rows_s: rate,
        achieved_rows_s: summary.rate_achieved,
        rows: summary.rows,
        records,
        p50_us,
        p99_us,
        max_us,
        refused,
    })
}

pub fn run(
    c: &Cluster,
    o: &LagOptions,
    steps: &ProgressBar,
    checks: &mut Vec<Check>,
) -> Result<Vec<LagCell>> {
    let mut out = Vec::new();
    // Round after round, every cell in turn: a slow spell of the machine
    // falls on every cell, not on one.
    for run in 0..o.runs.max(1) {
        for &setup in &o.setups {
            for &rate in &o.rates {
                steps.set_message(format!(
                    "lag, {} at {rate} rows/s for {} s, round {}/{}",
                    setup.label(),
                    o.seconds,
                    run + 1,
                    o.runs.max(1)
                ));
                out.push(cell(c, o, setup, rate, run, checks)?);
                steps.inc(1);
            }
        }
    }
    Ok(out)
}

pub fn steps(o: &LagOptions) -> u64 {
    (o.setups.len() * o.rates.len() * o.runs.max(1)) as u64
}
