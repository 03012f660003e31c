//! Acknowledged-write latency: the paced HTTP feed of `bench robustness`
//! (updates of 48 rows, 1,000 a second over 4 connections; each timed by
//! the client from sending the request to its 204) against a primary with
//! `--fsync always` and no standby, then with an async standby and with a
//! semi-sync one (both standbys `--fsync always`). Under semi-sync a 204
//! means the rows are fsynced on the primary and on the standby. Every
//! acknowledged row must be on the primary exactly once, and the standby
//! must equal it.

use super::cluster::{self, Check, Cluster, Setup};
use super::Progress;
use crate::error::{BenchError, Result};
use crate::robustness::{self, PhaseResult, RobustnessOptions};
use serde::Serialize;
use std::sync::Arc;

#[derive(Debug, Clone, Serialize)]
pub struct AckOptions {
    pub updates_per_s: u64,
    pub update_rows: usize,
    pub seconds: f64,
    pub setups: Vec<Setup>,
    /// Rounds of every setup in turn; the report gives medians.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct AckCell {
    /// Which round (0-based).
    pub run: usize,
    pub setup: Setup,
    pub phase: PhaseResult,
    /// Acknowledged rows missing on the primary afterwards (must be 0).
    pub lost_rows: u64,
    /// Acknowledged rows there more than once (must be 0).
    pub duplicated_rows: u64,
}

fn cell(
    c: &Cluster,
    o: &AckOptions,
    setup: Setup,
    run: usize,
    checks: &mut Vec<Check>,
) -> Result<AckCell> {
    let tag = format!("repl-ack-{}-{run}", setup.label());
    let mut flags = vec!["--fsync".to_string(), "always".into()];
    flags.extend(setup.primary_flags());
    let mut p = c.primary(&format!("{tag}-primary"), &flags)?;
    let mut s = match setup {
        Setup::Alone => None,
        _ => Some(c.standby(
            &format!("{tag}-standby"),
            &p,
            &["--fsync".into(), "always".into()],
        )?),
    };
    cluster::wait_linked(&mut p, setup)?;
    let ro = RobustnessOptions {
        updates_per_s: o.updates_per_s,
        update_rows: o.update_rows,
        seconds: o.seconds,
        preload_rows: 0,
        slow_queries: 0,
        idle_per_port: 0,
        query_timeout_ms: 0,
        query_threads: None,
        runs: 1,
    };
    let feed = Arc::new(robustness::Feed::new()?);
    let phase = robustness::phase(setup.label(), p.http, &ro, &feed, |_| Ok(()))?;
    if let Some(s) = s.as_mut() {
        checks.push(c.verify(
            &format!("ack latency, {}, round {}", setup.label(), run + 1),
            &mut p,
            s,
        )?);
    }
    // The rdb answers for every acknowledged row once it has applied them
    // (verify waited for that where there is a standby).
    let (lost_rows, duplicated_rows) = wait_rows(&mut p, &feed)?;
    if let Some(s) = s.as_mut() {
        cluster::stop(s);
        cluster::remove_data(s);
    }
    cluster::stop(&mut p);
    cluster::remove_data(&p);
    Ok(AckCell {
        run,
        setup,
        phase,
        lost_rows,
        duplicated_rows,
    })
}

/// Checks the acknowledged rows once the primary's rdb has applied its
/// whole journal.
fn wait_rows(p: &mut crate::servers::Tickdb, feed: &robustness::Feed) -> Result<(u64, u64)> {
    let t0 = std::time::Instant::now();
    loop {
        crate::child::check_interrupt()?;
        let st = cluster::status(p)?;
        if st.applied_seq == st.tp_seq {
            return robustness::check_rows(p.http, feed);
        }
        if t0.elapsed() > cluster::CATCH_UP_TIMEOUT {
            return Err(BenchError::Server(format!(
                "the primary's rdb did not apply its journal within {:?}",
                cluster::CATCH_UP_TIMEOUT
            )));
        }
        std::thread::sleep(cluster::POLL_EVERY);
    }
}

pub fn run(
    c: &Cluster,
    o: &AckOptions,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<Vec<AckCell>> {
    let steps = &ui.steps;
    let mut out = Vec::new();
    for run in 0..o.runs.max(1) {
        for &setup in &o.setups {
            steps.set_message(format!(
                "acknowledged-write latency, {} for {} s, round {}/{}",
                setup.label(),
                o.seconds,
                run + 1,
                o.runs.max(1)
            ));
            // The feed draws its own bar (bench robustness's); the steps
            // bar steps aside meanwhile.
            out.push(ui.mp.suspend(|| cell(c, o, setup, run, checks))?);
            steps.inc(1);
        }
    }
    Ok(out)
}

pub fn steps(o: &AckOptions) -> u64 {
    (o.setups.len() * o.runs.max(1)) as u64
}
