//! Catch-up: a new standby started behind a primary holding a journal of
//! N GB, timed from its start until its journal reaches the primary's
//! sequence; journal MB/s against a raw cold sequential read of the same
//! segment files (the page cache emptied before each, `disk::evict`). The
//! primary is loaded fast with the bulk insert under `--fsync never`, and
//! is idle while the standby catches up: its shipper reads the segment
//! files from the disk, cold. With `runs` above one, the raw read and a
//! fresh standby's catch-up are repeated, in turn, behind the same
//! primary, and the report gives medians.

use super::cluster::{self, Check, Cluster, NodeStatus, POLL_EVERY};
use super::Progress;
use crate::child;
use crate::disk::{self, MB};
use crate::error::{BenchError, Result};
use crate::insert::{self, InsertOptions, InsertTarget};
use crate::servers::Tickdb;
use crate::stats::Samples;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::time::Instant;

/// Rows of the first load step at most, from which the rows for N GB are
/// estimated.
const PROBE_ROWS_MAX: u64 = 1_000_000;
/// Journal bytes a row is assumed to take at least when sizing that step,
/// so that it stays under about half the target (a trade row journals
/// about 28 bytes).
const PROBE_BYTES_PER_ROW_MIN: u64 = 64;
/// GB as the option counts it: 10^9 bytes of journal.
const GB: f64 = 1e9;

#[derive(Debug, Clone, Serialize)]
pub struct CatchupOptions {
    /// Journal the standby starts behind, GB (10^9 bytes).
    pub gb: f64,
    /// The standby's `--fsync`.
    pub standby_fsync: String,
    pub seed: u64,
    /// Rounds of the raw read and a new standby's catch-up.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct CatchupResult {
    pub journal_bytes: u64,
    pub segments: usize,
    pub records: u64,
    pub rows: u64,
    /// One per round, in order.
    pub rounds: Vec<CatchupRound>,
    /// How the page cache was emptied, or None if it could not be.
    pub cold: Option<&'static str>,
}

impl CatchupResult {
    /// A figure of every round.
    pub fn each(&self, f: fn(&CatchupRound) -> f64) -> Samples {
        self.rounds.iter().map(f).collect()
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct CatchupRound {
    /// Raw cold sequential read of the primary's segment files (1 thread,
    /// 1 MiB reads), MiB/s.
    pub raw_read_mb_s: f64,
    /// The standby's start until its journal held the primary's last
    /// record, seconds.
    pub journal_secs: f64,
    pub journal_mb_s: f64,
    /// ... and until its rdb had applied it too.
    pub applied_secs: f64,
    /// The journal's MB/s ÷ this round's raw read.
    pub ratio_to_raw: f64,
}

/// The journal's segment files (not its schema history or lock).
fn segment_files(journal: &Path) -> Result<Vec<PathBuf>> {
    Ok(disk::files_in(journal)?
        .into_iter()
        .filter(|f| {
            f.file_name()
                .and_then(|n| n.to_str())
                .and_then(tickdb_journal::format::parse_segment_file_name)
                .is_some()
        })
        .collect())
}

fn load(p: &Tickdb, rows: u64, seed: u64, ui: &Progress) -> Result<()> {
    let pb = ui.mp.add(ProgressBar::new(rows));
    pb.set_style(
        ProgressStyle::with_template(
            "  loading the primary {bar:30} {human_pos}/{human_len} rows {per_sec}",
        )
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let target = InsertTarget {
        http_port: p.http,
        pid: None,
    };
    let r = insert::insert(&target, &InsertOptions { rows, seed }, &pb);
    pb.finish_and_clear();
    ui.mp.remove(&pb);
    r.map(|_| ())
}

/// Waits for the primary's rdb to apply its journal: it must not compete
/// with the timed catch-up for the cores.
fn settle(p: &mut Tickdb) -> Result<NodeStatus> {
    let t0 = Instant::now();
    loop {
        child::check_interrupt()?;
        p.child.check_alive()?;
        let st = cluster::status(p)?;
        if st.applied_seq == st.tp_seq {
            return Ok(st);
        }
        if t0.elapsed() > cluster::CATCH_UP_TIMEOUT {
            return Err(BenchError::Server(
                "the primary's rdb did not apply its journal".into(),
            ));
        }
        std::thread::sleep(POLL_EVERY);
    }
}

pub fn run(
    c: &Cluster,
    o: &CatchupOptions,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<CatchupResult> {
    let target_bytes = (o.gb * GB) as u64;
    ui.steps
        .set_message(format!("catch-up: loading a {:.2} GB journal", o.gb));
    let mut p = c.primary("repl-catchup-primary", &["--fsync".into(), "never".into()])?;
    // Estimate the rows from a first step, then load the rest at once.
    let probe = PROBE_ROWS_MAX.min((target_bytes / PROBE_BYTES_PER_ROW_MIN).max(1));
    load(&p, probe, o.seed, ui)?;
    let got = cluster::status(&p)?.json["tp"]["bytes"]
        .as_u64()
        .unwrap_or(0)
        .max(1);
    if got < target_bytes {
        let rest = ((target_bytes - got) as f64 * probe as f64 / got as f64).ceil() as u64;
        load(&p, rest, o.seed + 1, ui)?;
    }
    let status = settle(&mut p)?;
    let files = segment_files(&p.data_dir.join("journal"))?;
    let bytes: u64 = files
        .iter()
        .filter_map(|f| std::fs::metadata(f).ok())
        .map(|m| m.len())
        .sum();
    let mut l = Loaded {
        p,
        status,
        files,
        bytes,
    };
    let mut cold = disk::ColdReads::default();
    let mut rounds = Vec::new();
    for run in 0..o.runs.max(1) {
        rounds.push(round(c, &mut l, run, o, ui, checks, &mut cold)?);
        ui.steps.inc(1);
    }
    cluster::stop(&mut l.p);
    cluster::remove_data(&l.p);
    Ok(CatchupResult {
        journal_bytes: l.bytes,
        segments: l.files.len(),
        records: l.status.tp_seq,
        rows: l.status.rows,
        rounds,
        cold: cold.how(),
    })
}

/// The loaded primary every round's standby catches up with.
struct Loaded {
    p: Tickdb,
    /// Its status once its rdb had applied its whole journal.
    status: NodeStatus,
    /// Its journal's segment files, and their bytes.
    files: Vec<PathBuf>,
    bytes: u64,
}

/// One round: the raw cold read of the primary's segment files, then a
/// new standby, started cold behind all of them, timed until its journal
/// and its rdb hold the primary's last record; checked, stopped, removed.
fn round(
    c: &Cluster,
    l: &mut Loaded,
    run: usize,
    o: &CatchupOptions,
    ui: &Progress,
    checks: &mut Vec<Check>,
    cold: &mut disk::ColdReads,
) -> Result<CatchupRound> {
    let (p, journal_bytes) = (&mut l.p, l.bytes);
    let journal = p.data_dir.join("journal");
    ui.steps.set_message(format!(
        "catch-up, round {}: raw cold read of the journal",
        run + 1
    ));
    cold.evict(&journal);
    let (_, raw_read_mb_s) = disk::read_files(&l.files, 1)?;
    cold.evict(&journal);
    ui.steps.set_message(format!(
        "catch-up, round {}: a new standby behind {:.0} MB of journal",
        run + 1,
        journal_bytes as f64 / MB
    ));
    let t0 = Instant::now();
    let mut s = c.standby(
        &format!("repl-catchup-standby-{run}"),
        p,
        &["--fsync".into(), o.standby_fsync.clone()],
    )?;
    let journal_secs = loop {
        child::check_interrupt()?;
        s.child.check_alive()?;
        if cluster::status(&s)?.tp_seq >= l.status.tp_seq {
            break t0.elapsed().as_secs_f64();
        }
        if t0.elapsed() > cluster::CATCH_UP_TIMEOUT {
            return Err(BenchError::Server(format!(
                "the standby did not catch up within {:?}",
                cluster::CATCH_UP_TIMEOUT
            )));
        }
        std::thread::sleep(POLL_EVERY);
    };
    cluster::wait_caught_up(p, &mut s, cluster::CATCH_UP_TIMEOUT)?;
    let applied_secs = t0.elapsed().as_secs_f64();
    checks.push(c.verify("catch-up", p, &mut s)?);
    cluster::stop(&mut s);
    cluster::remove_data(&s);
    let journal_mb_s = journal_bytes as f64 / MB / journal_secs.max(1e-9);
    Ok(CatchupRound {
        raw_read_mb_s,
        journal_secs,
        journal_mb_s,
        applied_secs,
        ratio_to_raw: journal_mb_s / raw_read_mb_s.max(1e-9),
    })
}
