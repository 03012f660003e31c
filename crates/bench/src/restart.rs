//! `tickdb bench restart`: what Hot Restart buys an rdb. A `tickdb up
//! --hot-restart` is loaded with the feed's trades and quotes in steps while
//! a live feed runs at the Optane kdb+ study's rate; a checkpoint after each step measures
//! the ingest pause as the data grows. A journal tail follows, then kill -9.
//! The same data directory is then restarted, page cache emptied each time:
//! from the whole journal (no `--hot-restart`), from the store plus the
//! journal after its checkpoint with the journal kept whole, and with the
//! journal trimmed behind the checkpoint (`--trim-journal`'s effect). Every
//! restart must come back with exactly the rows the rdb held at the crash.

use crate::child::{self, Child};
use crate::disk::{self, MB};
use crate::error::{BenchError, Result};
use crate::http::request_json;
use crate::servers::{self, Tickdb};
use crate::stats::{si, Samples, NOISY_SPREAD};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// The Optane kdb+ study's rate (its simulation of the March 9, 2020
/// crash): 48,000 updates a second.
pub const SEED_RATE: u64 = 48_000;
/// A trading day, 9:30 to 16:00, in seconds.
pub const TRADING_DAY_S: u64 = 6 * 3600 + 1800;
/// The checkpoint schedule's default (the five minutes of Zero-Impact Crash Recovery for kdb+): a crash
/// leaves on average half of it as the journal tail.
pub const CHECKPOINT_INTERVAL_S: u64 = 300;
/// Rows per journaled update at that rate: a feed ticking every
/// millisecond at 48,000 updates/s sends 48 rows a tick.
pub const SEED_RATE_BATCH_ROWS: usize = (SEED_RATE / 1000) as usize;
/// How long the rdb may take to apply what the tp journaled, after the feeds stop.
const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(300);
/// A prestress step may take this long per million rows (and a minute more).
const PRESTRESS_SECS_PER_MROWS: u64 = 300;

#[derive(Clone, Debug, Serialize)]
pub struct RestartOptions {
    /// Rows loaded before the last checkpoint (trades and quotes, 1:10).
    pub rows: u64,
    /// Load steps, each followed by a checkpoint.
    pub steps: usize,
    /// Rows after the last checkpoint: the journal tail a crash leaves.
    pub tail_rows: u64,
    /// The live feed's rate while loading and checkpointing.
    pub live_rate: u64,
    pub repeats: usize,
    pub symbols: usize,
    pub parallelism: usize,
    pub segment_bytes_max: u64,
    /// Rows per journaled update while loading (`feed --prestress-batch-rows`).
    pub batch_rows: usize,
    pub seed: u64,
}

impl RestartOptions {
    /// The average tail a crash leaves with the default schedule, scaled
    /// like the day: `rows` × (interval / 2) / day.
    pub fn scaled_tail(rows: u64) -> u64 {
        (rows as u128 * (CHECKPOINT_INTERVAL_S / 2) as u128 / TRADING_DAY_S as u128) as u64
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct CheckpointRow {
    /// Rows in the rdb when the checkpoint was asked for.
    pub rows: u64,
    pub pause_us: u64,
    pub wait_us: u64,
    pub duration_ms: u64,
    pub bytes_written: u64,
}

#[derive(Clone, Debug, Default, Serialize)]
pub struct RestartRuns {
    /// Start until /health answers (the journal replayed), seconds.
    pub secs: Vec<f64>,
    pub reload_secs: Vec<f64>,
    pub restore_secs: Vec<f64>,
    /// Bytes of files the restarted process had mapped 2 MiB per page-table
    /// entry once ready (`FilePmdMapped` of /proc/PID/smaps_rollup): the
    /// store's chunks where the reload got huge pages.
    pub huge_mapped_bytes: Vec<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RestartReport {
    pub options: RestartOptions,
    pub checkpoints: Vec<CheckpointRow>,
    /// Rows the rdb held at the crash (every restart must show them all).
    pub rows: u64,
    pub journal_bytes: u64,
    pub journal_trimmed_bytes: u64,
    pub store_bytes: u64,
    /// Rows after the last checkpoint, replayed by a hot restart.
    pub tail_rows: u64,
    pub full_replay: RestartRuns,
    pub hot_whole_journal: RestartRuns,
    pub hot_trimmed_journal: RestartRuns,
    /// A raw cold read of the store's files with the reload's parallelism,
    /// MB/s, once per repeat: what the reload is measured against.
    pub raw_read_mb_s: Vec<f64>,
    /// The same files mapped cold (`disk::map_files`): how the reload reads
    /// them, before it checks a byte.
    pub mapped_read_mb_s: Vec<f64>,
    pub cold: Option<&'static str>,
}

fn tickdb_cmd(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env("TICKDB_LOG", "warn");
    c
}

/// Preloads `rows` as fast as the tp acknowledges them (`tickdb feed
/// --prestress N --duration 0`) and waits for the feed to finish.
fn prestress(
    bin: &Path,
    work: &Path,
    s: &Tickdb,
    o: &RestartOptions,
    rows: u64,
    seed: u64,
) -> Result<()> {
    let mut cmd = tickdb_cmd(bin);
    cmd.args(["feed", "--http-port", &s.http.to_string()])
        .args(["--ilp-port", &s.ilp.to_string()])
        .args(["--prestress", &rows.to_string(), "--duration", "0"])
        .args(["--prestress-batch-rows", &o.batch_rows.to_string()])
        .args([
            "--symbols",
            &o.symbols.to_string(),
            "--seed",
            &seed.to_string(),
        ]);
    let mut feed = Child::spawn(
        "tickdb feed --prestress",
        &mut cmd,
        &work.join("restart-prestress.log"),
    )?;
    let limit = Duration::from_secs(60 + PRESTRESS_SECS_PER_MROWS * rows.div_ceil(1_000_000));
    let st = feed.wait_exit(limit)?;
    if !st.success() {
        return Err(BenchError::Server(format!(
            "tickdb feed --prestress exited {st}:\n{}",
            child::log_tail(&feed.log)
        )));
    }
    Ok(())
}

/// Rows in every table of the rdb, from /status.
pub(crate) fn rdb_rows(st: &serde_json::Value) -> u64 {
    st["tables"]
        .as_object()
        .map(|t| t.values().filter_map(|v| v["rows"].as_u64()).sum())
        .unwrap_or(0)
}

/// Waits until the rdb has applied everything the tp journaled, and that
/// stays so for a moment (the feeds have stopped); returns its rows.
fn caught_up(s: &mut Tickdb) -> Result<u64> {
    let t0 = Instant::now();
    let mut stable = 0;
    let mut last = (0, 0);
    loop {
        child::check_interrupt()?;
        s.child.check_alive()?;
        let st = request_json(s.http, "GET", "/status")?;
        let now = (st["seq"].as_u64().unwrap_or(0), rdb_rows(&st));
        let applied_all = Some(now.0) == st["tp"]["seq"].as_u64();
        stable = if applied_all && now == last {
            stable + 1
        } else {
            0
        };
        last = now;
        if stable >= 5 {
            return Ok(now.1);
        }
        if t0.elapsed() > CATCH_UP_TIMEOUT {
            return Err(BenchError::Server(format!(
                "the rdb did not catch up with the tp within {CATCH_UP_TIMEOUT:?}: {st}"
            )));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Flags of every start: no fsync (kdb+ tps log without one, and the
/// restarts, not the load, are measured) and the journal's segment size.
fn base_flags(o: &RestartOptions) -> Vec<String> {
    vec![
        "--fsync".into(),
        "never".into(),
        "--segment-bytes-max".into(),
        o.segment_bytes_max.to_string(),
    ]
}

fn hot_flags(hot: &Path, o: &RestartOptions) -> Vec<String> {
    vec![
        "--hot-restart".into(),
        hot.display().to_string(),
        // Only the benchmark's own checkpoints.
        "--checkpoint-interval-s".into(),
        "86400".into(),
        "--hot-restart-parallelism".into(),
        o.parallelism.to_string(),
    ]
}

/// `FilePmdMapped` of a process (/proc/PID/smaps_rollup), in bytes: how
/// much of the files it maps is mapped 2 MiB per page-table entry.
fn file_pmd_mapped_bytes(pid: u32) -> Option<u64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/smaps_rollup")).ok()?;
    let line = text.lines().find(|l| l.starts_with("FilePmdMapped:"))?;
    let kb: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// One cold restart of the data directory (with the store when `hot`):
/// start until /health, then the rows are checked.
fn restart_once(
    bin: &Path,
    work: &Path,
    hot: Option<&Path>,
    o: &RestartOptions,
    rows: u64,
    runs: &mut RestartRuns,
    cold: &mut disk::ColdReads,
) -> Result<()> {
    let data = work.join("restart-data");
    cold.evict(&data.join("journal"));
    if let Some(h) = hot {
        cold.evict(h);
    }
    // Emptying the page cache empties it of the binary too; read it back,
    // so that both kinds of restart measure their data's reads, not the
    // program's.
    let _ = disk::read_files(&[bin.to_path_buf()], 1);
    let mut flags = base_flags(o);
    if let Some(h) = hot {
        flags.extend(hot_flags(h, o));
    }
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let t0 = Instant::now();
    let mut s = servers::start_tickdb(bin, work, "up", "restart", &flags)?;
    let secs = t0.elapsed().as_secs_f64();
    let st = request_json(s.http, "GET", "/status")?;
    let got = rdb_rows(&st);
    if got != rows {
        return Err(BenchError::Server(format!(
            "a restart {} came back with {got} rows, not the {rows} held at the crash",
            if hot.is_some() {
                "with Hot Restart"
            } else {
                "from the journal"
            }
        )));
    }
    if hot.is_some() {
        let h = &st["hot_restart"];
        runs.reload_secs
            .push(h["reload_seconds"].as_f64().unwrap_or(0.0));
        runs.restore_secs
            .push(h["restore"]["seconds"].as_f64().unwrap_or(0.0));
        if let Some(b) = s.child.pid().and_then(file_pmd_mapped_bytes) {
            runs.huge_mapped_bytes.push(b);
        }
    }
    runs.secs.push(secs);
    // A crash again: no checkpoint at shutdown, so every restart of the
    // store starts from the same checkpoint and tail.
    s.child.kill();
    Ok(())
}

pub fn run(bin: &Path, work: &Path, o: &RestartOptions) -> Result<RestartReport> {
    if o.steps == 0 || o.repeats == 0 || o.rows < o.steps as u64 {
        return Err(BenchError::Server(
            "--steps and --repeats must be at least 1, and --rows at least --steps".into(),
        ));
    }
    let data = work.join("restart-data");
    let hot = work.join("restart-hot");
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&hot);
    let flags = [base_flags(o), hot_flags(&hot, o)].concat();
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let mut s = servers::start_tickdb(bin, work, "up", "restart", &flags)?;

    let pb = ProgressBar::new((o.steps + 1 + 3 * o.repeats) as u64);
    pb.set_style(
        ProgressStyle::with_template("restart {bar:30} {pos}/{len} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    // The live feed runs through the load and every checkpoint: the pause
    // is what it feels.
    let mut cmd = tickdb_cmd(bin);
    cmd.args(["feed", "--ilp-port", &s.ilp.to_string()])
        .args(["--http-port", &s.http.to_string()])
        .args(["--rate", &o.live_rate.to_string()])
        .args(["--symbols", &o.symbols.to_string()])
        .args(["--seed", &(o.seed + 1000).to_string()]);
    let mut live = Child::spawn(
        "tickdb feed (live)",
        &mut cmd,
        &work.join("restart-live.log"),
    )?;
    let mut checkpoints = Vec::new();
    let mut last_seq = 0;
    for k in 0..o.steps {
        pb.set_message(format!(
            "load step {} of {}, then a checkpoint",
            k + 1,
            o.steps
        ));
        let n = o.rows / o.steps as u64;
        prestress(bin, work, &s, o, n, o.seed + k as u64)?;
        live.check_alive()?;
        let rows = rdb_rows(&request_json(s.http, "GET", "/status")?);
        let ck = request_json(s.http, "POST", "/checkpoint")?;
        let num = |f: &str| ck[f].as_u64().unwrap_or(0);
        last_seq = num("seq");
        checkpoints.push(CheckpointRow {
            rows,
            pause_us: num("pause_us"),
            wait_us: num("wait_us"),
            duration_ms: num("duration_ms"),
            bytes_written: num("bytes_written"),
        });
        pb.inc(1);
    }
    pb.set_message("the journal tail, then kill -9");
    if o.tail_rows > 0 {
        prestress(bin, work, &s, o, o.tail_rows, o.seed + 999)?;
    }
    live.stop(Duration::from_secs(10));
    let rows = caught_up(&mut s)?;
    let tail_rows = rows.saturating_sub(checkpoints.last().map(|c| c.rows).unwrap_or(0));
    s.child.kill();
    pb.inc(1);
    let journal = data.join("journal");
    let journal_bytes = disk::dir_bytes(&journal);
    let store_bytes = disk::dir_bytes(&hot);

    let mut full = RestartRuns::default();
    let mut whole = RestartRuns::default();
    let mut trimmed = RestartRuns::default();
    let mut cold = disk::ColdReads::default();
    for r in 0..o.repeats {
        pb.set_message(format!("full journal replay ({}/{})", r + 1, o.repeats));
        restart_once(bin, work, None, o, rows, &mut full, &mut cold)?;
        pb.inc(1);
        pb.set_message(format!(
            "hot restart, whole journal ({}/{})",
            r + 1,
            o.repeats
        ));
        restart_once(bin, work, Some(&hot), o, rows, &mut whole, &mut cold)?;
        pb.inc(1);
    }
    // What --trim-journal (or POST /journal/trim) does after a checkpoint.
    tickdb_journal::trim(&tickdb_journal::FsStorage, &journal, last_seq)
        .map_err(|e| BenchError::Server(format!("trimming the journal: {e}")))?;
    let journal_trimmed_bytes = disk::dir_bytes(&journal);
    for r in 0..o.repeats {
        pb.set_message(format!(
            "hot restart, trimmed journal ({}/{})",
            r + 1,
            o.repeats
        ));
        restart_once(bin, work, Some(&hot), o, rows, &mut trimmed, &mut cold)?;
        pb.inc(1);
    }
    // The raw disk under the reload: the store's files read cold, as the
    // reload reads them (whole files from a shared queue, that many threads).
    let mut raw_read_mb_s = Vec::new();
    let mut mapped_read_mb_s = Vec::new();
    let store_files = disk::files_in(&hot)?;
    for _ in 0..o.repeats {
        cold.evict(&hot);
        let (_, mb_s) = disk::read_files(&store_files, o.parallelism)?;
        raw_read_mb_s.push(mb_s);
        cold.evict(&hot);
        let (_, mb_s) = disk::map_files(&store_files, o.parallelism)?;
        mapped_read_mb_s.push(mb_s);
    }
    pb.finish_and_clear();
    let _ = std::fs::remove_dir_all(&data);
    let _ = std::fs::remove_dir_all(&hot);
    Ok(RestartReport {
        options: o.clone(),
        checkpoints,
        rows,
        journal_bytes,
        journal_trimmed_bytes,
        store_bytes,
        tail_rows,
        full_replay: full,
        hot_whole_journal: whole,
        hot_trimmed_journal: trimmed,
        raw_read_mb_s,
        mapped_read_mb_s,
        cold: cold.how(),
    })
}

fn median(v: &[f64]) -> Option<f64> {
    Samples(v.to_vec()).median()
}

fn secs(x: f64) -> String {
    format!("{x:.2} s")
}

impl RestartReport {
    pub fn markdown(&self) -> String {
        let o = &self.options;
        let day = SEED_RATE * TRADING_DAY_S;
        let mut s = format!(
            "`tickdb up --fsync never --hot-restart DIR` loaded with {} rows of the feed's trades and quotes \
             (1:10, {} symbols) in {} prestress steps of {}-row updates (as a feed at 48,000 updates/s journals \
             them: {} rows per 1 ms tick), while a live feed sends {} updates/s; a checkpoint \
             (`POST /checkpoint`) after each step, under that feed. Then {} more rows (the journal tail: a \
             crash with the default {CHECKPOINT_INTERVAL_S} s schedule leaves half an interval on average, scaled \
             like the day) and kill -9. {} rows are {:.1} minutes of a feed at {} updates/s; a 6.5-hour day is \
             {} rows, which needs a machine with far more memory than this one (`--rows` sets the size).\n\n",
            si(o.rows as f64),
            o.symbols,
            o.steps,
            o.batch_rows,
            SEED_RATE_BATCH_ROWS,
            si(o.live_rate as f64),
            si(self.tail_rows as f64),
            si(self.rows as f64),
            self.rows as f64 / SEED_RATE as f64 / 60.0,
            si(SEED_RATE as f64),
            si(day as f64),
        );
        s.push_str("Checkpoints (the pause: updates wait while the cut pins every table's state; the rows are written after it):\n\n");
        s.push_str("| rows in the rdb | ingest pause | wait for the update in flight | whole checkpoint (fsyncs included) | written |\n|---|---|---|---|---|\n");
        for c in &self.checkpoints {
            s.push_str(&format!(
                "| {} | {} µs | {} µs | {} ms | {:.0} MB |\n",
                si(c.rows as f64),
                c.pause_us,
                c.wait_us,
                c.duration_ms,
                c.bytes_written as f64 / MB
            ));
        }
        let max_pause = self
            .checkpoints
            .iter()
            .map(|c| c.pause_us)
            .max()
            .unwrap_or(0);
        s.push_str(&format!(
            "\nLongest ingest pause: **{:.2} ms** (target: under 10 ms whatever the data size).\n\n",
            max_pause as f64 / 1000.0
        ));
        s.push_str(&format!(
            "Restarts of the crashed data directory, page cache {} before each (then the tickdb binary read \
             back into it, so that every restart reads its data cold and its program warm); {} each, median \
             (min–max), from starting the process until `/health` answers (the journal replayed, every row \
             queryable; each came back with exactly the {} rows held at the crash):\n\n",
            self.cold.unwrap_or("NOT emptied (no permission; warm reads)"),
            o.repeats,
            si(self.rows as f64),
        ));
        s.push_str("| restart | reads | seconds | of which store reload / table rebuild | speed-up over full replay |\n|---|---|---|---|---|\n");
        // Median restart time of a whole-journal replay over that of `r`.
        let speedup = |r: &RestartRuns| match (median(&self.full_replay.secs), median(&r.secs)) {
            (Some(f), Some(m)) if m > 0.0 => format!("{:.1}×", f / m),
            _ => "n/a".into(),
        };
        let tail = si(self.tail_rows as f64);
        let store = self.store_bytes as f64 / MB;
        let rows = [
            (
                "whole journal (no `--hot-restart`)",
                format!("journal {:.0} MB", self.journal_bytes as f64 / MB),
                &self.full_replay,
            ),
            (
                "Hot Restart, journal kept whole",
                format!(
                    "store {store:.0} MB, journal {:.0} MB (scanned), {tail} rows replayed",
                    self.journal_bytes as f64 / MB
                ),
                &self.hot_whole_journal,
            ),
            (
                "Hot Restart, journal trimmed behind the checkpoint",
                format!(
                    "store {store:.0} MB, journal {:.0} MB, {tail} rows replayed",
                    self.journal_trimmed_bytes as f64 / MB
                ),
                &self.hot_trimmed_journal,
            ),
        ];
        for (name, reads, r) in rows {
            s.push_str(&format!(
                "| {name} | {reads} | {} | {} | **{}** |\n",
                Samples(r.secs.clone()).describe(secs),
                match (median(&r.reload_secs), median(&r.restore_secs)) {
                    (Some(a), Some(b)) => format!("{} / {}", secs(a), secs(b)),
                    _ => String::new(),
                },
                speedup(r)
            ));
        }
        // The trimmed restarts' reload against the raw read of the same files.
        let reload_mb_s = median(&self.hot_trimmed_journal.reload_secs)
            .filter(|x| *x > 0.0)
            .map(|x| store / x);
        let raw = median(&self.raw_read_mb_s);
        if let (Some(r), Some(raw)) = (reload_mb_s, raw) {
            let raws = Samples(self.raw_read_mb_s.clone());
            // The spread is said in words here: a bare `*` inside the
            // sentence would mark nothing the reader was told about.
            let spread = match (raws.noisy(), raws.min(), raws.max()) {
                (true, Some(lo), Some(hi)) => format!(
                    " The raw reads spread {:.1}× from slowest to fastest (over {NOISY_SPREAD}×): \
                     the disk was noisy, so read the percentage as rough.",
                    hi / lo
                ),
                _ => String::new(),
            };
            s.push_str(&format!(
                "\nThe store's reload (Hot Restart, trimmed journal) read its {store:.0} MB at {r:.0} MB/s; a raw \
                 cold read of the same files with the same {} threads, in the same run, {} MB/s: **{:.0}%** of \
                 it.{spread}\n",
                o.parallelism,
                raws.range(|x| format!("{x:.0}")),
                100.0 * r / raw
            ));
            let maps = Samples(self.mapped_read_mb_s.clone());
            if let Some(mapped) = maps.median() {
                let why = if mapped >= raw {
                    "Where the files lie in large folios, one page-table entry maps 2 MiB, so mapping them \
                     costs less than copying them into a buffer; what separates the reload from this floor is \
                     checking and decoding every record (a CRC32C over every byte), and the journal's recovery \
                     scan, which reads the journal's tail on the same disk at the same time."
                } else {
                    "Here the mapping read the files more slowly than `read()` into one reused buffer, and a \
                     reload must keep what it read."
                };
                s.push_str(&format!(
                    "\nThe reload reads a chunk file by mapping it whole, advised huge pages and populated \
                     (`MADV_HUGEPAGE`, then `MADV_POPULATE_READ`), so that its images stay where they lie and \
                     become the tables' buffers. The same files mapped that way, cold, with nothing checked, in \
                     the same run: {} MB/s, {:.0}% of the raw read; the reload ran at **{:.0}%** of that. {why}\n",
                    maps.range(|x| format!("{x:.0}")),
                    100.0 * mapped / raw,
                    100.0 * r / mapped
                ));
            }
            let huge: Vec<f64> = self
                .hot_trimmed_journal
                .huge_mapped_bytes
                .iter()
                .map(|b| *b as f64 / MB)
                .collect();
            if let Some(h) = median(&huge) {
                s.push_str(&format!(
                    "\nOnce ready, each restarted rdb (trimmed journal) had {h:.0} MB of files mapped 2 MiB per \
                     page-table entry (median; `FilePmdMapped` in /proc/PID/smaps_rollup), of a {store:.0} MB \
                     store.\n"
                ));
            }
        }
        s.push_str(&format!(
            "\nTargets (reported, not asserted):\n\n\
             - Checkpoint ingest pause under 10 ms whatever the data size: at most {:.3} ms, from {} to {} rows.\n\
             - An rdb restart with Hot Restart at least 10× faster than replaying the whole journal: {} with the \
             journal trimmed behind the checkpoint (what `--trim-journal` keeps), {} with the journal kept whole, \
             whose recovery scan at start still reads all of it. A replay decodes and appends every row of \
             every update (records of {} rows here); a Hot Restart reads the store's chunk images, checks them \
             and makes each a sealed chunk as it is, so it costs little more than reading them: the store is \
             about as large as the journal, and its cold read bounds the speed-up{}.\n\
             - The store's reload at 90% or more of a raw cold read: {}.\n",
            max_pause as f64 / 1000.0,
            si(self.checkpoints.first().map(|c| c.rows).unwrap_or(0) as f64),
            si(self.checkpoints.last().map(|c| c.rows).unwrap_or(0) as f64),
            speedup(&self.hot_trimmed_journal),
            speedup(&self.hot_whole_journal),
            o.batch_rows,
            // The floor is the faster of the two ways of reading the files.
            match (
                [raw, median(&self.mapped_read_mb_s)]
                    .into_iter()
                    .flatten()
                    .reduce(f64::max),
                median(&self.full_replay.secs),
            ) {
                (Some(fastest), Some(full)) if fastest > 0.0 => format!(
                    " (at the faster of the raw and the mapped read, reading the store alone takes {:.2} s, \
                     {:.1}× less than the full replay)",
                    store / fastest,
                    full / (store / fastest)
                ),
                _ => String::new(),
            },
            match (reload_mb_s, raw, median(&self.mapped_read_mb_s)) {
                (Some(r), Some(raw), Some(mapped)) => format!(
                    "{:.0}% of the raw read ({:.0}% of the cold mapped read, which is itself {:.0}% of the raw read)",
                    100.0 * r / raw,
                    100.0 * r / mapped,
                    100.0 * mapped / raw
                ),
                (Some(r), Some(raw), None) => format!("{:.0}%", 100.0 * r / raw),
                _ => "not measured".into(),
            },
        ));
        s
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn scaled_tail() {
        // 2.5 minutes of a 6.5-hour day.
        assert_eq!(super::RestartOptions::scaled_tail(23_400_000), 150_000);
    }
}
