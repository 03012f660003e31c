//! Figure 4 of Zero-Impact Crash Recovery for kdb+: the time a standby
//! takes to come back from its last snapshot plus the log after it. A
//! standby with a Hot Restart store (`--hot-restart`, scheduled checkpoints
//! out of the way) follows a primary loaded with a base of rows; then, for
//! each point, the standby checkpoints (`POST /checkpoint`), the primary
//! journals M minutes' worth of a 48,000 rows/s feed (48-row updates, as a
//! feed ticking every millisecond journals them; loaded as fast as the
//! primary takes them, since only the log's content matters here, and
//! scaled by `minutes_scale`), the standby follows it, and is killed with
//! SIGKILL. It is restarted twice, page cache emptied before each: without
//! `--hot-restart` (a full replay of its own journal), then with it (the
//! store reloaded, the log after the checkpoint replayed). Each restart is
//! timed from its start until `/health` answers and until it has caught up
//! with the primary, and must hold the primary's rows. With `runs` above
//! one, each point's pair of restarts is repeated (killed again with
//! SIGKILL each time, the store and journal as the first kill left them)
//! and the report gives medians.

use super::cluster::{self, Check, Cluster, NodeStatus};
use super::Progress;
use crate::child::{self, Child};
use crate::disk;
use crate::error::{BenchError, Result};
use crate::http::request_json;
use crate::servers::Tickdb;
use crate::stats::Samples;
use serde::Serialize;
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The standby's checkpoint schedule: out of the way, only the benchmark's.
const CHECKPOINT_INTERVAL_S: u64 = 86_400;
/// Rows per request of the base load: the bulk insert's.
const BASE_BATCH_ROWS: usize = 10_000;
/// A load may take this long per million rows (and a minute more).
const LOAD_SECS_PER_MROWS: u64 = 300;

#[derive(Debug, Clone, Serialize)]
pub struct RestoreOptions {
    /// Minutes of log after the last snapshot, one point each (the figure's
    /// 0 to 5).
    pub minutes: Vec<f64>,
    /// The log's minutes are scaled by this (1 = the figure's sizes).
    pub minutes_scale: f64,
    /// The feed rate whose log is journaled, rows/s.
    pub rate: u64,
    /// Rows per journaled update of that log.
    pub batch_rows: usize,
    /// Rows loaded before the first snapshot.
    pub base_rows: u64,
    /// The standby's `--fsync`.
    pub standby_fsync: String,
    pub symbols: usize,
    pub seed: u64,
    /// Timed pairs of restarts (full replay, then Hot Restart) per point.
    pub runs: usize,
}

impl RestoreOptions {
    /// Seconds of log a point stands for, after scaling.
    pub fn log_seconds(&self, minutes: f64) -> f64 {
        minutes * 60.0 * self.minutes_scale
    }

    fn rows(&self, minutes: f64) -> u64 {
        (self.log_seconds(minutes) * self.rate as f64).round() as u64
    }
}

/// One timed restart of the standby.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RestartTiming {
    /// Start until /health answered 200.
    pub ready_s: f64,
    /// Start until its journal and rdb held everything the primary had.
    pub caught_up_s: f64,
    /// Hot Restart only: the store's reload and the tables' rebuild.
    pub reload_s: Option<f64>,
    pub rebuild_s: Option<f64>,
    pub rows: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RestorePoint {
    pub minutes: f64,
    pub log_seconds: f64,
    /// Records and rows journaled after the checkpoint.
    pub tail_records: u64,
    pub tail_rows: u64,
    /// The whole journal a full replay reads.
    pub journal_records: u64,
    pub journal_bytes: u64,
    /// One timing per run, in run order; the two lists are as long.
    pub full_replay: Vec<RestartTiming>,
    pub hot_restart: Vec<RestartTiming>,
}

impl RestorePoint {
    /// A figure of every full replay of this point.
    pub fn full(&self, f: fn(&RestartTiming) -> f64) -> Samples {
        self.full_replay.iter().map(f).collect()
    }

    /// A figure of every Hot Restart of this point.
    pub fn hot(&self, f: fn(&RestartTiming) -> f64) -> Samples {
        self.hot_restart.iter().map(f).collect()
    }

    /// Each run's full replay ÷ its Hot Restart, to ready.
    pub fn speedups(&self) -> Samples {
        self.full_replay
            .iter()
            .zip(&self.hot_restart)
            .filter(|(_, h)| h.ready_s > 0.0)
            .map(|(f, h)| f.ready_s / h.ready_s)
            .collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct RestoreResult {
    pub points: Vec<RestorePoint>,
    pub cold: Option<&'static str>,
}

impl RestoreResult {
    /// Timed runs of a point's restarts.
    pub fn runs(&self) -> usize {
        self.points
            .iter()
            .map(|p| p.hot_restart.len())
            .max()
            .unwrap_or(0)
    }
}

/// `tickdb feed --prestress ROWS --duration 0`: ROWS trades and quotes as
/// fast as the primary acknowledges them, `batch_rows` rows a request.
fn feed_rows(
    c: &Cluster,
    p: &Tickdb,
    rows: u64,
    batch_rows: usize,
    o: &RestoreOptions,
    seed: u64,
) -> Result<()> {
    if rows == 0 {
        return Ok(());
    }
    let mut cmd = Command::new(c.bin());
    cmd.env("TICKDB_LOG", "warn")
        .args(["feed", "--http-port", &p.http.to_string()])
        .args(["--ilp-port", &p.ilp.to_string()])
        .args(["--prestress", &rows.to_string(), "--duration", "0"])
        .args(["--prestress-batch-rows", &batch_rows.to_string()])
        .args(["--symbols", &o.symbols.to_string()])
        .args(["--seed", &seed.to_string()]);
    let mut f = Child::spawn(
        "tickdb feed --prestress",
        &mut cmd,
        &c.work().join("repl-restore-feed.log"),
    )?;
    let limit = Duration::from_secs(60 + LOAD_SECS_PER_MROWS * rows.div_ceil(1_000_000));
    let st = f.wait_exit(limit)?;
    if !st.success() {
        return Err(BenchError::Server(format!(
            "tickdb feed --prestress exited {st}:\n{}",
            child::log_tail(&f.log)
        )));
    }
    Ok(())
}

struct Standby<'a> {
    c: &'a Cluster,
    hot: PathBuf,
    fsync: String,
}

const STANDBY_NAME: &str = "repl-restore-standby";

impl Standby<'_> {
    fn flags(&self, hot: bool) -> Vec<String> {
        let mut f = vec!["--fsync".to_string(), self.fsync.clone()];
        if hot {
            f.extend([
                "--hot-restart".to_string(),
                self.hot.display().to_string(),
                "--checkpoint-interval-s".to_string(),
                CHECKPOINT_INTERVAL_S.to_string(),
            ]);
        }
        f
    }

    fn journal(&self) -> PathBuf {
        self.c
            .work()
            .join(format!("{STANDBY_NAME}-data"))
            .join("journal")
    }

    /// The first start, from an empty data directory.
    fn start(&self, p: &Tickdb) -> Result<Tickdb> {
        let _ = std::fs::remove_dir_all(&self.hot);
        self.c.standby(STANDBY_NAME, p, &self.flags(true))
    }

    /// A restart on the data directory (and store) it left.
    fn restart(&self, p: &Tickdb, hot: bool) -> Result<Tickdb> {
        self.c.restart_standby(STANDBY_NAME, p, &self.flags(hot))
    }

    /// A cold, timed restart: the page cache emptied, start until /health,
    /// then until caught up with the primary; the rows must be the
    /// primary's.
    fn timed_restart(
        &self,
        p: &mut Tickdb,
        hot: bool,
        want: &NodeStatus,
        cold: &mut disk::ColdReads,
    ) -> Result<(Tickdb, RestartTiming)> {
        cold.evict(&self.journal());
        if hot {
            cold.evict(&self.hot);
        }
        let t0 = Instant::now();
        let mut s = self.restart(p, hot)?;
        let ready_s = t0.elapsed().as_secs_f64();
        let (_, st) = cluster::wait_caught_up(p, &mut s, cluster::CATCH_UP_TIMEOUT)?;
        let caught_up_s = t0.elapsed().as_secs_f64();
        if st.rows != want.rows {
            return Err(BenchError::Server(format!(
                "the standby restarted {} with {} rows, not the primary's {}",
                if hot {
                    "with Hot Restart"
                } else {
                    "from its journal"
                },
                st.rows,
                want.rows
            )));
        }
        let h = &st.json["hot_restart"];
        Ok((
            s,
            RestartTiming {
                ready_s,
                caught_up_s,
                reload_s: hot.then(|| h["reload_seconds"].as_f64()).flatten(),
                rebuild_s: hot.then(|| h["restore"]["seconds"].as_f64()).flatten(),
                rows: st.rows,
            },
        ))
    }
}

pub fn run(
    c: &Cluster,
    o: &RestoreOptions,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<RestoreResult> {
    let sb = Standby {
        c,
        hot: c.work().join("repl-restore-hot"),
        fsync: o.standby_fsync.clone(),
    };
    ui.steps
        .set_message(format!("restore: loading {} base rows", o.base_rows));
    let mut p = c.primary("repl-restore-primary", &["--fsync".into(), "never".into()])?;
    let mut s = sb.start(&p)?;
    cluster::wait_linked(&mut p, cluster::Setup::Async)?;
    feed_rows(c, &p, o.base_rows, BASE_BATCH_ROWS, o, o.seed)?;
    let mut cold = disk::ColdReads::default();
    let mut points = Vec::new();
    for (i, &m) in o.minutes.iter().enumerate() {
        child::check_interrupt()?;
        // The standby has applied everything so far: the checkpoint covers
        // all the primary journaled before this point's log.
        cluster::wait_caught_up(&mut p, &mut s, cluster::CATCH_UP_TIMEOUT)?;
        let ck = request_json(s.http, "POST", "/checkpoint")?;
        let ck_seq = ck["seq"].as_u64().ok_or_else(|| {
            BenchError::Protocol(format!("POST /checkpoint on the standby: no seq in {ck}"))
        })?;
        let rows_at_ck = cluster::status(&s)?.rows;
        let tail = o.rows(m);
        ui.steps.set_message(format!(
            "restore: {m} min of log ({:.1} s at {} rows/s, {tail} rows), then kill -9",
            o.log_seconds(m),
            o.rate
        ));
        feed_rows(c, &p, tail, o.batch_rows, o, o.seed + 1 + i as u64)?;
        checks.push(c.verify(&format!("restore, {m} min of log"), &mut p, &mut s)?);
        let want = cluster::status(&p)?;
        s.child.kill();
        let jb = disk::dir_bytes(&sb.journal());
        let (mut full_replay, mut hot_restart) = (Vec::new(), Vec::new());
        for run in 0..o.runs.max(1) {
            child::check_interrupt()?;
            if run > 0 {
                // The last Hot Restart caught up with a primary that took
                // nothing since, and checkpointed nothing (none is due):
                // each run restarts from the same journal and checkpoint.
                s.child.kill();
            }
            let (mut full_s, full) = sb.timed_restart(&mut p, false, &want, &mut cold)?;
            full_s.child.kill();
            let (hot_s, hot) = sb.timed_restart(&mut p, true, &want, &mut cold)?;
            s = hot_s;
            full_replay.push(full);
            hot_restart.push(hot);
            ui.steps.inc(1);
        }
        points.push(RestorePoint {
            minutes: m,
            log_seconds: o.log_seconds(m),
            tail_records: want.tp_seq.saturating_sub(ck_seq),
            tail_rows: want.rows.saturating_sub(rows_at_ck),
            journal_records: want.tp_seq,
            journal_bytes: jb,
            full_replay,
            hot_restart,
        });
    }
    checks.push(c.verify("restore, after the last restart", &mut p, &mut s)?);
    cluster::stop(&mut s);
    cluster::stop(&mut p);
    cluster::remove_data(&s);
    cluster::remove_data(&p);
    let _ = std::fs::remove_dir_all(&sb.hot);
    Ok(RestoreResult {
        points,
        cold: cold.how(),
    })
}

pub fn steps(o: &RestoreOptions) -> u64 {
    (o.minutes.len() * o.runs.max(1)) as u64
}
