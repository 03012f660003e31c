//! Journal throughput: append MB/s and rows/s under each fsync policy, with
//! the raw disk (`dd … conv=fdatasync`) measured in the same run; and
//! acknowledged rows/s under `--fsync always` with 1, 4 and 16 concurrent
//! HTTP writers, showing group commit (rows per fsync) at work; and replay
//! (reading and decoding the journal, as an rdb's catch-up does) from a cold
//! page cache against a raw cold sequential read of the same files. The
//! whole sequence runs `runs` times; the report gives medians and ranges.

use crate::child;
use crate::disk;
use crate::error::{BenchError, Result};
use crate::http::HttpConn;
use crate::servers;
use crate::stats::{ratio, si, Samples};
use indicatif::{ProgressBar, ProgressStyle};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};
use tickdb_core::batch::Value;
use tickdb_core::{BatchBuilder, Schema};
use tickdb_journal::{FsyncPolicy, Journal, JournalOptions};

/// Rows per journal record in the append benchmark (one update).
const ROWS_PER_RECORD: usize = 100;
/// Rows per HTTP request in the group-commit benchmark.
const ROWS_PER_REQUEST: usize = 100;

pub struct JournalOptionsBench {
    pub megabytes: u64,
    pub seconds: u64,
    pub writers: Vec<usize>,
    /// Times the whole sequence (dd, appends, replay, group commit) runs.
    pub runs: usize,
}

pub struct PolicyResult {
    pub policy: String,
    pub mb_s: f64,
    pub rows_s: f64,
    pub fsyncs: u64,
    /// Records appended (the journal's last sequence number).
    pub records: u64,
}

pub struct GroupResult {
    pub writers: usize,
    pub rows_s: f64,
    pub rows_per_fsync: f64,
}

pub struct ReplayResult {
    pub bytes: u64,
    pub rows: u64,
    pub raw_mb_s: f64,
    pub replay_mb_s: f64,
    pub replay_rows_s: f64,
    /// How the page cache was emptied before each read, if it could be.
    pub cold: Option<&'static str>,
}

/// Every run's results, in run order.
pub struct JournalReport {
    pub dd_mb_s: Samples,
    pub replay: Vec<ReplayResult>,
    /// Per fsync policy, its runs.
    pub policies: Vec<Vec<PolicyResult>>,
    /// Per writer count, its runs.
    pub groups: Vec<Vec<GroupResult>>,
    pub megabytes: u64,
    pub runs: usize,
}

/// A figure of every run, as samples.
fn samples<T>(runs: &[T], f: impl Fn(&T) -> f64) -> Samples {
    runs.iter().map(f).collect()
}

fn record_payload() -> Vec<u8> {
    let schema = Schema::default_schema();
    let def = schema.table("trade").expect("the default schema has trade");
    let mut b = BatchBuilder::new(def);
    for i in 0..ROWS_PER_RECORD {
        b.set(0, Value::Timestamp(1_700_000_000_000_000_000 + i as i64));
        b.set(1, Value::Symbol(["AAPL", "MSFT", "IBM", "GOOG"][i % 4]));
        b.set(2, Value::F64(100.0 + i as f64 * 0.01));
        b.set(3, Value::I64(100 + i as i64));
        b.end_row();
    }
    tickdb_core::codec::encode_to_vec(&[b.finish()])
}

/// Raw cold sequential read of every file under `dir`, then the journal
/// reader over the same files (CRC checks and payload decoding included).
fn replay(dir: &Path, last_seq: u64) -> Result<ReplayResult> {
    let mut cold = disk::ColdReads::default();
    let files = disk::files_in(dir)?;
    // One untimed cold read first: on the VM this was measured on, the first
    // read of files just written ran at a quarter of the speed of later cold
    // reads (788 MB/s against 3.5 GB/s for a 512 MiB file), so whichever
    // reader came first would be timed at a disadvantage.
    cold.evict(dir);
    disk::read_files(&files, 1)?;
    cold.evict(dir);
    let (bytes, raw_mb_s) = disk::read_files(&files, 1)?;
    cold.evict(dir);
    let reader = tickdb_journal::JournalReader::open(dir, 1, last_seq)
        .map_err(|e| BenchError::Server(e.to_string()))?;
    let mut rows = 0u64;
    let t0 = Instant::now();
    for (i, rec) in reader.enumerate() {
        if i % 1024 == 0 {
            child::check_interrupt()?;
        }
        let rec = rec.map_err(|e| BenchError::Server(e.to_string()))?;
        let batches = tickdb_core::codec::decode(&rec.payload, None)
            .map_err(|e| BenchError::Server(e.to_string()))?;
        rows += batches.iter().map(|b| b.rows as u64).sum::<u64>();
    }
    let secs = t0.elapsed().as_secs_f64();
    let mb = bytes as f64 / disk::MB;
    Ok(ReplayResult {
        bytes,
        rows,
        raw_mb_s,
        replay_mb_s: mb / secs,
        replay_rows_s: rows as f64 / secs,
        cold: cold.how(),
    })
}

/// One writer, one commit (one acknowledgement) per record. The journal
/// written under `never` is kept for the replay benchmark when `keep`.
fn append(
    work: &Path,
    policy: FsyncPolicy,
    megabytes: u64,
    payload: &[u8],
    keep: bool,
) -> Result<PolicyResult> {
    let dir = work.join(format!("journal-{policy:?}"));
    let _ = std::fs::remove_dir_all(&dir);
    let opts = JournalOptions {
        fsync: policy,
        ..JournalOptions::default()
    };
    let (mut j, _) = Journal::open(&dir, opts).map_err(|e| BenchError::Server(e.to_string()))?;
    let bytes_target = megabytes * 1024 * 1024;
    // `always` pays one fsync per record: give it a tenth of the bytes so the
    // run stays short; the rate is what is reported.
    let bytes_target = if policy == FsyncPolicy::Always {
        bytes_target / 10
    } else {
        bytes_target
    };
    let (mut bytes, mut records, mut fsyncs) = (0u64, 0u64, 0u64);
    let t0 = Instant::now();
    while bytes < bytes_target {
        if records % 1024 == 0 {
            child::check_interrupt()?;
        }
        j.append(1, ROWS_PER_RECORD as u32, 0, payload)
            .map_err(|e| BenchError::Server(e.to_string()))?;
        let synced = j.synced_seq();
        j.commit().map_err(|e| BenchError::Server(e.to_string()))?;
        // An fsync ran in this commit if the durable point moved.
        if j.synced_seq() > synced {
            fsyncs += 1;
        }
        bytes += payload.len() as u64;
        records += 1;
    }
    j.close().map_err(|e| BenchError::Server(e.to_string()))?;
    let secs = t0.elapsed().as_secs_f64();
    if !keep {
        let _ = std::fs::remove_dir_all(&dir);
    }
    Ok(PolicyResult {
        policy: match policy {
            FsyncPolicy::Always => "always".into(),
            FsyncPolicy::IntervalMs(n) => format!("interval {n} ms"),
            FsyncPolicy::Never => "never".into(),
        },
        mb_s: bytes as f64 / secs / (1024.0 * 1024.0),
        rows_s: (records as usize * ROWS_PER_RECORD) as f64 / secs,
        fsyncs,
        records,
    })
}

fn group_commit(bin: &Path, work: &Path, writers: usize, seconds: u64) -> Result<GroupResult> {
    let mut s = servers::start_tickdb(
        bin,
        work,
        "tp",
        &format!("group-{writers}"),
        &["--fsync", "always"],
    )?;
    let stop = Arc::new(AtomicBool::new(false));
    let rows = Arc::new(AtomicU64::new(0));
    let mut body = String::new();
    for i in 0..ROWS_PER_REQUEST {
        body.push_str(&format!("trade,sym=S{} price=1.5,size={i}i\n", i % 10));
    }
    let commits_before = status_commits(s.http)?;
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|sc| {
        let hs: Vec<_> = (0..writers)
            .map(|_| {
                let (stop, rows, body, port) =
                    (stop.clone(), rows.clone(), body.as_bytes(), s.http);
                sc.spawn(move || -> Result<()> {
                    let mut c = HttpConn::connect(port)?;
                    while !stop.load(Ordering::Relaxed) {
                        let (st, b) = c.request("POST", "/write", body)?;
                        if st != 204 {
                            return Err(BenchError::Server(format!(
                                "HTTP {st}: {}",
                                String::from_utf8_lossy(&b)
                            )));
                        }
                        rows.fetch_add(ROWS_PER_REQUEST as u64, Ordering::Relaxed);
                    }
                    Ok(())
                })
            })
            .collect();
        let r = child::sleep(Duration::from_secs(seconds));
        stop.store(true, Ordering::Relaxed);
        let mut out: Vec<Result<()>> = hs
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Server("writer panicked".into())))
            })
            .collect();
        out.push(r);
        out
    });
    let secs = t0.elapsed().as_secs_f64();
    for r in results {
        r?;
    }
    let commits = status_commits(s.http)? - commits_before;
    s.child.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&s.data_dir);
    let n = rows.load(Ordering::Relaxed);
    Ok(GroupResult {
        writers,
        rows_s: n as f64 / secs,
        rows_per_fsync: n as f64 / commits.max(1) as f64,
    })
}

fn status_commits(port: u16) -> Result<u64> {
    let (st, body) = HttpConn::connect(port)?.request("GET", "/status", b"")?;
    if st != 200 {
        return Err(BenchError::Server(format!("/status: HTTP {st}")));
    }
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| BenchError::Protocol(e.to_string()))?;
    v["tp"]["commits"]
        .as_u64()
        .ok_or_else(|| BenchError::Protocol("/status has no tp.commits".into()))
}

pub fn run(bin: &Path, work: &Path, o: &JournalOptionsBench) -> Result<JournalReport> {
    const POLICIES: [FsyncPolicy; 3] = [
        FsyncPolicy::Never,
        FsyncPolicy::IntervalMs(100),
        FsyncPolicy::Always,
    ];
    let runs = o.runs.max(1);
    let steps = (1 + POLICIES.len() as u64 + 1 + o.writers.len() as u64) * runs as u64;
    let pb = ProgressBar::new(steps);
    pb.set_style(
        ProgressStyle::with_template("journal {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let payload = record_payload();
    let mut dd_mb_s = Samples::default();
    let mut policies: Vec<Vec<PolicyResult>> = POLICIES.iter().map(|_| Vec::new()).collect();
    let mut replays = Vec::new();
    let mut groups: Vec<Vec<GroupResult>> = o.writers.iter().map(|_| Vec::new()).collect();
    for run in 1..=runs {
        let of = format!("run {run}/{runs}");
        pb.set_message(format!("{of}: dd conv=fdatasync"));
        dd_mb_s.push(disk::dd(work, o.megabytes)?);
        pb.inc(1);
        let mut never_records = 0;
        for (p, out) in POLICIES.into_iter().zip(policies.iter_mut()) {
            pb.set_message(format!("{of}: append, fsync {p:?}"));
            let keep = p == FsyncPolicy::Never;
            let r = append(work, p, o.megabytes, &payload, keep)?;
            if keep {
                never_records = r.records;
            }
            out.push(r);
            pb.inc(1);
        }
        pb.set_message(format!("{of}: replay vs cold sequential read"));
        let never_dir = work.join(format!("journal-{:?}", FsyncPolicy::Never));
        let replay = replay(&never_dir, never_records);
        let _ = std::fs::remove_dir_all(&never_dir);
        replays.push(replay?);
        pb.inc(1);
        for (&w, out) in o.writers.iter().zip(groups.iter_mut()) {
            pb.set_message(format!("{of}: group commit, {w} writers"));
            out.push(group_commit(bin, work, w, o.seconds)?);
            pb.inc(1);
        }
    }
    pb.finish_and_clear();
    Ok(JournalReport {
        dd_mb_s,
        replay: replays,
        policies,
        groups,
        megabytes: o.megabytes,
        runs,
    })
}

impl JournalReport {
    pub fn markdown(&self) -> String {
        let dd = self.dd_mb_s.median();
        let runs = if self.runs == 1 {
            "Each figure is from one run of the whole sequence below (`--runs 1`).".to_string()
        } else {
            format!(
                "Each figure is the median (min–max) of {} runs of the whole sequence below; `*` marks a \
                 spread over 1.3×.",
                self.runs
            )
        };
        let mut s = format!(
            "{runs}\n\nAppend: one writer, one commit (acknowledgement) per record of {ROWS_PER_RECORD} trade rows, \
             {} MB per policy (a tenth under `always`). Peer: `dd if=/dev/zero bs=1M count={} conv=fdatasync` \
             on the same file system in the same run: **{:.0} MB/s** (median; {:.0}–{:.0}).\n\n",
            self.megabytes,
            self.megabytes,
            dd.unwrap_or(0.0),
            self.dd_mb_s.min().unwrap_or(0.0),
            self.dd_mb_s.max().unwrap_or(0.0),
        );
        s.push_str(
            "| fsync policy | MB/s | rows/s | fsyncs | ratio to dd |\n|---|---|---|---|---|\n",
        );
        for runs in &self.policies {
            let Some(first) = runs.first() else { continue };
            let mb = samples(runs, |r| r.mb_s);
            s.push_str(&format!(
                "| {} | {} | {} | {:.0} | {} |\n",
                first.policy,
                mb.describe(|v| format!("{v:.1}")),
                samples(runs, |r| r.rows_s).describe(si),
                samples(runs, |r| r.fsyncs as f64).median().unwrap_or(0.0),
                ratio(mb.median(), dd)
            ));
        }
        s.push_str(&format!(
            "\nGroup commit: `tickdb tp --fsync always`, W HTTP writers each posting {ROWS_PER_REQUEST}-row requests \
             back to back; every request is acknowledged only after the fdatasync covering it.\n\n"
        ));
        s.push_str("| writers | acknowledged rows/s | rows per fsync |\n|---|---|---|\n");
        for runs in &self.groups {
            let Some(first) = runs.first() else { continue };
            s.push_str(&format!(
                "| {} | {} | {:.0} |\n",
                first.writers,
                samples(runs, |g| g.rows_s).describe(si),
                samples(runs, |g| g.rows_per_fsync).median().unwrap_or(0.0)
            ));
        }
        let Some(r) = self.replay.first() else {
            return s;
        };
        let raw = samples(&self.replay, |r| r.raw_mb_s);
        let replay = samples(&self.replay, |r| r.replay_mb_s);
        s.push_str(&format!(
            "\nReplay: the journal written under `never` ({:.0} MB, {} rows) read back with the journal reader (CRC per record, sequence check, payload decoded into batches, as an rdb's catch-up does), against a raw sequential `read()` of the same files in 1 MiB blocks, after one untimed read of them (the first read of newly written files can be much slower than later cold reads, whichever reader does it); the page cache was {} before each.\n\n",
            r.bytes as f64 / (1024.0 * 1024.0),
            si(r.rows as f64),
            r.cold
                .unwrap_or("NOT emptied (no permission): both figures are warm reads")
        ));
        s.push_str("| | MB/s | rows/s | ratio to raw read |\n|---|---|---|---|\n");
        s.push_str(&format!(
            "| raw sequential read | {} | | |\n",
            raw.describe(|v| format!("{v:.0}"))
        ));
        s.push_str(&format!(
            "| journal replay | {} | {} | {} |\n",
            replay.describe(|v| format!("{v:.0}")),
            samples(&self.replay, |r| r.replay_rows_s).describe(si),
            ratio(replay.median(), raw.median())
        ));
        s
    }
}
