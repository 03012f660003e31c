//! The nodes of a replication benchmark: a primary and its standby as child
//! processes (`tickdb up` on free loopback ports, each with its own data
//! directory and replication port, both holding one secret), waits on their
//! /status, and the correctness check that ends every scenario: the
//! standby's journal equals the primary's over the range both hold
//! (`tickdb journal compare`, exit 0) and both rdbs hold the same rows.

use crate::child;
use crate::error::{BenchError, Result};
use crate::http::request_json;
use crate::servers::{self, Tickdb};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// The environment variable both sides read the replication secret from.
pub const SECRET_ENV: &str = "TICKDB_REPL_SECRET";
/// Random bytes in the secret of a run (it is printed as hex: twice as many
/// characters, well over the 16 a node requires).
const SECRET_BYTES: usize = 16;
/// How long a standby may take to reach its primary's sequence once the
/// writes have stopped (a 2 GB catch-up on a slow disk included).
pub const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(900);
/// How long a new standby may take to connect and start streaming.
const LINK_TIMEOUT: Duration = Duration::from_secs(60);
/// /status is polled this often while waiting: often enough that a timed
/// catch-up is not rounded up by much, rarely enough to cost the nodes
/// nothing measurable.
pub const POLL_EVERY: Duration = Duration::from_millis(10);
/// A journal compare of a few GB takes seconds; this bounds a hung one.
const COMPARE_TIMEOUT: Duration = Duration::from_secs(600);

/// How a primary ships its records (its `--replication`), or no standby.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Setup {
    /// `tickdb up` without a standby.
    Alone,
    Async,
    SemiSync,
}

impl Setup {
    pub fn label(self) -> &'static str {
        match self {
            Setup::Alone => "alone",
            Setup::Async => "async",
            Setup::SemiSync => "semi-sync",
        }
    }

    /// The primary's `--replication` flags.
    pub fn primary_flags(self) -> Vec<String> {
        match self {
            Setup::Alone => vec![],
            Setup::Async => vec!["--replication".into(), "async".into()],
            Setup::SemiSync => vec!["--replication".into(), "semi-sync".into()],
        }
    }

    /// The standby's `--fsync`: a semi-sync standby reports a record durable
    /// only once it has fsynced it, so it must run `always`.
    pub fn standby_fsync(self, async_fsync: &str) -> String {
        match self {
            Setup::SemiSync => "always".into(),
            _ => async_fsync.to_string(),
        }
    }
}

/// Starts the nodes of a run, all with the run's secret.
pub struct Cluster {
    bin: PathBuf,
    work: PathBuf,
    secret: String,
}

/// One node's /status, the parts the benchmark reads.
#[derive(Debug, Clone)]
pub struct NodeStatus {
    /// The last sequence in its journal.
    pub tp_seq: u64,
    /// The last sequence its rdb applied.
    pub applied_seq: u64,
    /// Rows in every table of its rdb.
    pub rows: u64,
    pub json: serde_json::Value,
}

/// The correctness check of one scenario.
#[derive(Debug, Clone, Serialize)]
pub struct Check {
    pub scenario: String,
    /// The sequence both had reached.
    pub seq: u64,
    pub primary_rows: u64,
    pub standby_rows: u64,
    /// `tickdb journal compare` exited 0.
    pub journal_equal: bool,
    /// Its verdict line ("identical over seq 1..=N", or the first difference).
    pub journal_compare: String,
    pub ok: bool,
}

fn num(v: &serde_json::Value, what: &str) -> Result<u64> {
    v.as_u64()
        .ok_or_else(|| BenchError::Protocol(format!("/status: no number at {what}: {v}")))
}

pub fn status(node: &Tickdb) -> Result<NodeStatus> {
    let json = request_json(node.http, "GET", "/status")?;
    Ok(NodeStatus {
        tp_seq: num(&json["tp"]["seq"], "tp.seq")?,
        applied_seq: num(&json["seq"], "seq")?,
        rows: crate::restart::rdb_rows(&json),
        json,
    })
}

/// A standby's `replication.primary.lag_us`: (records, p50, p99, max) in µs.
pub fn standby_lag_us(st: &NodeStatus) -> Result<(u64, u64, u64, u64)> {
    let l = &st.json["replication"]["primary"]["lag_us"];
    Ok((
        num(&l["records"], "replication.primary.lag_us.records")?,
        num(&l["p50"], "replication.primary.lag_us.p50")?,
        num(&l["p99"], "replication.primary.lag_us.p99")?,
        num(&l["max"], "replication.primary.lag_us.max")?,
    ))
}

impl Cluster {
    pub fn new(bin: &Path, work: &Path) -> Cluster {
        let bytes: [u8; SECRET_BYTES] = rand::random();
        Cluster {
            bin: bin.to_path_buf(),
            work: work.to_path_buf(),
            secret: bytes.iter().map(|b| format!("{b:02x}")).collect(),
        }
    }

    /// The run's replication secret (for nodes started elsewhere, e.g. the
    /// failover benchmark's, to join them).
    pub fn secret(&self) -> &str {
        &self.secret
    }

    pub fn bin(&self) -> &Path {
        &self.bin
    }

    pub fn work(&self) -> &Path {
        &self.work
    }

    /// A primary named `name`, from an empty data directory
    /// (`WORK/NAME-data`: what an earlier, failed run left is removed).
    pub fn primary(&self, name: &str, flags: &[String]) -> Result<Tickdb> {
        self.remove_data_of(name);
        let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
        servers::start_tickdb_env(
            &self.bin,
            &self.work,
            "up",
            name,
            &flags,
            &[(SECRET_ENV, &self.secret)],
        )
    }

    fn remove_data_of(&self, name: &str) {
        let _ = std::fs::remove_dir_all(self.work.join(format!("{name}-data")));
    }

    /// A new standby of `primary`, from an empty data directory. Returns
    /// once it answers /health: it has met the primary and replayed its
    /// own journal; it may still be catching up with the primary.
    pub fn standby(&self, name: &str, primary: &Tickdb, flags: &[String]) -> Result<Tickdb> {
        self.remove_data_of(name);
        self.restart_standby(name, primary, flags)
    }

    /// A standby of `primary` on the data directory a standby of that name
    /// left (its journal, and its Hot Restart store if `flags` name it).
    pub fn restart_standby(
        &self,
        name: &str,
        primary: &Tickdb,
        flags: &[String],
    ) -> Result<Tickdb> {
        let of = format!("127.0.0.1:{}", primary.repl);
        let mut all: Vec<&str> = vec!["--standby-of", &of];
        all.extend(flags.iter().map(String::as_str));
        servers::start_tickdb_env(
            &self.bin,
            &self.work,
            "up",
            name,
            &all,
            &[(SECRET_ENV, &self.secret)],
        )
    }

    /// Compares the two data directories' journals with `tickdb journal
    /// compare`: (exit 0, its verdict line).
    pub fn compare_journals(&self, a: &Path, b: &Path) -> Result<(bool, String)> {
        let mut cmd = Command::new(&self.bin);
        cmd.args(["journal", "compare"]).arg(a).arg(b);
        let log = self.work.join("journal-compare.log");
        let mut c = child::Child::spawn("tickdb journal compare", &mut cmd, &log)?;
        let st = c.wait_exit(COMPARE_TIMEOUT)?;
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // The verdict is the line after the two "A:"/"B:" summaries.
        let verdict = text
            .lines()
            .find(|l| !l.starts_with("A:") && !l.starts_with("B:") && !l.trim().is_empty())
            .unwrap_or("(no output)")
            .to_string();
        Ok((st.success(), verdict))
    }

    /// Waits until the standby has caught up (see `wait_caught_up`), then
    /// compares journals and rows.
    pub fn verify(
        &self,
        scenario: &str,
        primary: &mut Tickdb,
        standby: &mut Tickdb,
    ) -> Result<Check> {
        let (p, s) = wait_caught_up(primary, standby, CATCH_UP_TIMEOUT)?;
        let (journal_equal, journal_compare) =
            self.compare_journals(&primary.data_dir, &standby.data_dir)?;
        let ok = journal_equal && p.rows == s.rows;
        if !ok {
            eprintln!(
                "replication: {scenario}: MISMATCH: journals {journal_compare}; rows {} on the primary, {} on the standby",
                p.rows, s.rows
            );
        }
        Ok(Check {
            scenario: scenario.to_string(),
            seq: p.tp_seq,
            primary_rows: p.rows,
            standby_rows: s.rows,
            journal_equal,
            journal_compare,
            ok,
        })
    }
}

/// Waits until the primary lists a connected standby that is streaming
/// (and, under semi-sync, reporting durable sequences), so that a timed run
/// does not include the standby's connection.
pub fn wait_linked(primary: &mut Tickdb, setup: Setup) -> Result<()> {
    if setup == Setup::Alone {
        return Ok(());
    }
    let t0 = Instant::now();
    loop {
        child::check_interrupt()?;
        primary.child.check_alive()?;
        let st = request_json(primary.http, "GET", "/status")?;
        let r = &st["replication"];
        let streaming = r["standbys"]
            .as_array()
            .is_some_and(|a| a.iter().any(|s| s["state"] == "streaming"));
        let reporting = setup != Setup::SemiSync
            || r["semi_sync"]["standbys_reporting"]
                .as_u64()
                .is_some_and(|n| n >= 1);
        if streaming && reporting {
            return Ok(());
        }
        if t0.elapsed() > LINK_TIMEOUT {
            return Err(BenchError::Server(format!(
                "no standby streaming from the primary after {LINK_TIMEOUT:?}: {r}"
            )));
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// Whether the standby holds and has applied everything the primary
/// journaled, and the primary's rdb has applied it too.
fn caught_up(p: &NodeStatus, s: &NodeStatus) -> bool {
    s.tp_seq == p.tp_seq && s.applied_seq == p.tp_seq && p.applied_seq == p.tp_seq
}

/// Fails with the standby's reason if its replication has stopped (a
/// refusal that retrying cannot fix).
fn check_link(s: &NodeStatus) -> Result<()> {
    let link = &s.json["replication"]["primary"];
    if link["state"] == "stopped" {
        return Err(BenchError::Server(format!(
            "the standby's replication stopped: {}",
            link["reason"]
        )));
    }
    Ok(())
}

/// Polls both nodes until the standby has caught up with the primary (no
/// writes may be in flight); returns both statuses at that moment.
pub fn wait_caught_up(
    primary: &mut Tickdb,
    standby: &mut Tickdb,
    timeout: Duration,
) -> Result<(NodeStatus, NodeStatus)> {
    let t0 = Instant::now();
    loop {
        child::check_interrupt()?;
        primary.child.check_alive()?;
        standby.child.check_alive()?;
        let p = status(primary)?;
        let s = status(standby)?;
        check_link(&s)?;
        if caught_up(&p, &s) {
            return Ok((p, s));
        }
        if t0.elapsed() > timeout {
            return Err(BenchError::Server(format!(
                "the standby did not catch up within {timeout:?}: primary at seq {} (applied {}), standby journal at {} (applied {}); {}",
                p.tp_seq,
                p.applied_seq,
                s.tp_seq,
                s.applied_seq,
                s.json["replication"]["primary"]
            )));
        }
        std::thread::sleep(POLL_EVERY);
    }
}

/// Stops a node (SIGTERM, then SIGKILL after a grace period).
pub fn stop(node: &mut Tickdb) {
    node.child.stop(STOP_GRACE);
}

/// A clean stop's grace period: a node's final journal sync and checkpoint.
pub const STOP_GRACE: Duration = Duration::from_secs(30);

/// Removes a stopped node's data directory (the scratch space of a run is
/// reused by the next).
pub fn remove_data(node: &Tickdb) {
    let _ = std::fs::remove_dir_all(&node.data_dir);
}
