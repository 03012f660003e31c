//! `tickdb bench stack`: the Optane kdb+ study's test stack. Each stack is five
//! processes of this binary: `tickdb feed` → `tickdb tp` → `tickdb agg` →
//! `tickdb rdb` → `tickdb monitor`, on free loopback ports with its own
//! directory; the rdb holds its tables in DRAM or in fsmem (every table,
//! as the study's `.mutil.tblToDotM each tables[]`). Every stack of a
//! scenario runs at the same time on the same data (same seed).
//!
//! - Test 1: for each (monitor timer, tp timer), one DRAM stack against
//!   one fsmem stack: max and mean latency, aggregated-row latency, bytes
//!   in memory, average query time and queries per minute, with the study's
//!   comparison factor (the DRAM rdb of the same run is the reference).
//! - Test 2: N DRAM stacks (2), then as many fsmem stacks as fit in the
//!   DRAM those used: max latency, % of the machine's DRAM used, average
//!   query time and total queries per minute.
//!
//! - The study's scale (`--scale`): one DRAM stack preloaded with 65M rows,
//!   then 48,000 updates/s for 10 minutes with a 50 ms tp timer (every size
//!   overridable): bytes per row of trade and quote, tick latency, the
//!   as-of query's time, the rdb's RSS, the feed's rate and how long the
//!   preload took. A preload that would leave too little memory for the
//!   live run stops early and says how many rows it loaded and why.
//!
//! Every child is killed on Ctrl-C or any failure (`child`).

use crate::child::{self, free_port, Child};
use crate::error::{BenchError, Result};
use crate::http::exec_scalar;
use crate::machine::Machine;
use crate::servers::{self, Tickdb};
use crate::stats::Samples;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use tickdb_stack::feed::FeedSummary;
use tickdb_stack::monitor::{MonitorSummary, SUMMARY_FILE};

/// The feed runs this long before the monitor starts measuring.
const WARMUP: Duration = Duration::from_millis(1500);
/// ...and this long after the monitor stops, so every poll sees a live feed.
const TAIL: Duration = Duration::from_millis(1000);
/// How long the prestress of a stack may take.
const PRESTRESS_TIMEOUT: Duration = Duration::from_secs(3600);
/// How long the agg may take to fold the last ticks after the feed stops.
const BARS_TIMEOUT: Duration = Duration::from_secs(20);
/// fsmem stacks per core at most when Test 2 picks how many fit: each
/// stack is five busy processes.
const FSMEM_STACKS_PER_CORE: usize = 2;
/// Grace before a stopped server is killed.
const STOP_GRACE: Duration = Duration::from_secs(5);
/// The study's tables placed in fsmem in an fsmem stack: all of them.
const FSMEM_TABLES: [&str; 5] = ["trade", "quote", "trade_1m", "quote_1m", "daily"];
/// How often the prestress asks the rdbs how many rows they hold.
const PRESTRESS_POLL: Duration = Duration::from_millis(250);
/// How often the prestress's progress is logged without a terminal.
const PRESTRESS_LOG_EVERY: Duration = Duration::from_secs(10);
/// The prestress measures the rdb's memory per row once it holds this many
/// rows (before that the process's own baseline dominates).
const PRESTRESS_MEASURE_ROWS_MIN: u64 = 1_000_000;
/// Memory left free beyond what the live run is projected to need: the
/// prestress stops before MemAvailable would fall below it.
const MEM_HEADROOM_BYTES: u64 = 1 << 30;
/// The study's scale (`--scale`): one stack, 48,000 updates/s (its rate
/// for the March 9, 2020 crash), 65M rows preloaded, a 50 ms tp timer, 10 minutes measured.
pub const SCALE_RATE: u64 = 48_000;
pub const SCALE_SECONDS: f64 = 600.0;
pub const SCALE_TIMERS: Timers = Timers {
    monitor_ms: 300,
    tp_ms: 50,
};
/// Zero latency at the study's rate (`--zero-latency`): one stack at a
/// time with a zero tp timer and the monitor every 50 ms, 48,000
/// updates/s, 1M rows preloaded, 20 s measured, several runs per placement
/// (one run's maximum is one unlucky poll, so the median of runs is
/// reported beside each).
pub const ZERO_LATENCY_TIMERS: Timers = Timers {
    monitor_ms: 50,
    tp_ms: 0,
};
pub const ZERO_LATENCY_SECONDS: f64 = 20.0;
pub const ZERO_LATENCY_PRESTRESS_ROWS: u64 = 1_000_000;
pub const ZERO_LATENCY_RUNS: usize = 3;
/// Runs of each Test 1 scenario and of Test 2, by default: every figure of
/// their tables is the median over the runs.
pub const TEST_RUNS_DEFAULT: usize = 3;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Timers {
    pub monitor_ms: u64,
    pub tp_ms: u64,
}

/// `MONITOR_MS:TP_MS`, e.g. `300:50`.
pub fn parse_timers(s: &str) -> std::result::Result<Timers, String> {
    let (m, t) = s
        .split_once(':')
        .ok_or_else(|| format!("'{s}': expected MONITOR_MS:TP_MS, e.g. 300:50"))?;
    let m: u64 = m
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': bad monitor timer"))?;
    let t: u64 = t
        .trim()
        .parse()
        .map_err(|_| format!("'{s}': bad tp timer"))?;
    if m == 0 {
        return Err(format!("'{s}': the monitor timer must be at least 1 ms"));
    }
    Ok(Timers {
        monitor_ms: m,
        tp_ms: t,
    })
}

#[derive(Debug, Clone)]
pub struct StackOptions {
    /// Updates per second per stack.
    pub rate: u64,
    /// Measured seconds per scenario.
    pub seconds: f64,
    /// Rows preloaded into each stack.
    pub prestress: u64,
    pub symbols: usize,
    /// Test 1 scenarios.
    pub timers: Vec<Timers>,
    pub dram_rdbs: usize,
    /// Test 2's fsmem stacks; None: as many as fit.
    pub fsmem_rdbs: Option<usize>,
    pub test2_timers: Timers,
    /// Which tests to run: 1, 2 or both.
    pub tests: Vec<u8>,
    pub publish_ms: u64,
    pub seed: u64,
    pub fsync: String,
    /// Run the study's scale on one DRAM stack (at `rate`, `seconds`,
    /// `prestress` and the first of `timers`) instead of Tests 1 and 2.
    pub scale: bool,
    /// Runs of zero latency at the study's rate per placement, one stack
    /// at a time (at `rate`, `seconds`, `prestress` and
    /// `ZERO_LATENCY_TIMERS`), instead of Tests 1 and 2; 0: not this mode.
    pub zero_latency: usize,
    /// Runs of each Test 1 scenario and of Test 2 (at least 1): their
    /// tables give the median over the runs.
    pub runs: usize,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Placement {
    Dram,
    Fsmem,
}

impl Placement {
    fn name(self) -> &'static str {
        match self {
            Placement::Dram => "dram",
            Placement::Fsmem => "fsmem",
        }
    }
}

/// One table of an rdb's /status: rows and bytes held per domain.
#[derive(Debug, Clone, Default, Serialize)]
pub struct TableFigures {
    pub name: String,
    pub rows: u64,
    pub dram_bytes: u64,
    pub fsmem_bytes: u64,
}

impl TableFigures {
    /// Bytes per row in memory (both domains), None when empty.
    pub fn bytes_per_row(&self) -> Option<f64> {
        (self.rows > 0).then(|| (self.dram_bytes + self.fsmem_bytes) as f64 / self.rows as f64)
    }
}

/// Every table of an rdb's /status answer (`tables`), by name.
fn table_figures(st: &serde_json::Value) -> Vec<TableFigures> {
    let Some(tables) = st["tables"].as_object() else {
        return Vec::new();
    };
    tables
        .iter()
        .map(|(name, t)| TableFigures {
            name: name.clone(),
            rows: t["rows"].as_u64().unwrap_or(0),
            dram_bytes: t["dram_bytes"].as_u64().unwrap_or(0),
            fsmem_bytes: t["fsmem_bytes"].as_u64().unwrap_or(0),
        })
        .collect()
}

/// trade + quote rows in an rdb's /status answer.
fn tick_rows(st: &serde_json::Value) -> u64 {
    st["tables"]["trade"]["rows"].as_u64().unwrap_or(0)
        + st["tables"]["quote"]["rows"].as_u64().unwrap_or(0)
}

/// How one stack's prestress went, as the rdb saw it.
#[derive(Debug, Clone, Default, Serialize)]
pub struct PrestressLoad {
    /// Rows asked for (`--prestress`).
    pub asked_rows: u64,
    /// trade + quote rows the rdb held once the preload was in.
    pub rows: u64,
    /// From the feed's start until the rdb held them.
    pub seconds: f64,
    /// Why the preload stopped before `asked_rows`, if it did.
    pub stopped: Option<String>,
    /// The rdb's tables once the preload was in.
    pub tables: Vec<TableFigures>,
    /// The rdb's anonymous RSS once the preload was in.
    pub rss_anon_bytes: Option<u64>,
}

/// What one stack measured.
#[derive(Debug, Clone, Serialize)]
pub struct StackResult {
    pub name: String,
    pub placement: Placement,
    pub timers: Timers,
    pub monitor: MonitorSummary,
    pub feed: FeedSummary,
    pub prestress: FeedSummary,
    pub prestress_load: PrestressLoad,
    /// The rdb's tables once the feed stopped and the agg caught up.
    pub tables: Vec<TableFigures>,
    /// Σ trades of trade_1m = count(trade) and Σ quotes of quote_1m =
    /// count(quote) once the feed stopped: the agg saw every tick.
    pub bars_ok: bool,
    pub bars_note: String,
}

impl StackResult {
    /// The larger of the trade and quote max latencies.
    pub fn max_latency_ms(&self) -> Option<f64> {
        max_opt(
            self.monitor.trade_latency_ms.max,
            self.monitor.quote_latency_ms.max,
        )
    }

    /// The mean of the trade and quote mean latencies.
    pub fn mean_latency_ms(&self) -> Option<f64> {
        match (
            self.monitor.trade_latency_ms.mean,
            self.monitor.quote_latency_ms.mean,
        ) {
            (Some(a), Some(b)) => Some((a + b) / 2.0),
            (a, b) => a.or(b),
        }
    }

    pub fn max_agg_latency_ms(&self) -> Option<f64> {
        max_opt(
            self.monitor.agg_trade_latency_ms.max,
            self.monitor.agg_quote_latency_ms.max,
        )
    }
}

fn max_opt(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.max(b)),
        (a, b) => a.or(b),
    }
}

/// One Test 1 scenario: its DRAM and fsmem stacks of every run, in run
/// order (run i's two stacks ran at the same time).
#[derive(Debug, Clone, Serialize)]
pub struct Test1Row {
    pub timers: Timers,
    pub dram: Vec<StackResult>,
    pub fsmem: Vec<StackResult>,
}

/// One run of Test 2: the DRAM stacks together, then the fsmem stacks.
#[derive(Debug, Clone, Serialize)]
pub struct Test2Run {
    pub dram: Vec<StackResult>,
    pub fsmem: Vec<StackResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Test2 {
    pub timers: Timers,
    /// Every run, in order, with the same stack counts.
    pub runs: Vec<Test2Run>,
    /// How the number of fsmem stacks was chosen.
    pub fsmem_count_reason: String,
}

/// The median over runs of one figure of each run (runs without it left
/// out); None when no run has it.
fn median_of<T>(runs: &[T], f: impl Fn(&T) -> Option<f64>) -> Option<f64> {
    crate::stats::Samples(runs.iter().filter_map(f).collect()).median()
}

/// A table row's DRAM and fsmem cells and the study's comparison factor:
/// DRAM ÷ fsmem, or fsmem ÷ DRAM where more is better.
fn compared(
    d: Option<f64>,
    f: Option<f64>,
    show: &dyn Fn(Option<f64>) -> String,
    more_is_better: bool,
) -> [String; 3] {
    let c = if more_is_better {
        factor(f, d)
    } else {
        factor(d, f)
    };
    [show(d), show(f), c]
}

/// One figure of every run, in run order, as `ms` writes it.
fn each_run_ms(runs: &[StackResult], f: impl Fn(&StackResult) -> Option<f64>) -> String {
    runs.iter().map(|r| ms(f(r))).collect::<Vec<_>>().join(", ")
}

/// The study's scale on one DRAM stack (`--scale`), with the settings it
/// ran at (a report may put it beside Tests 1 and 2 run at other sizes).
#[derive(Debug, Clone, Serialize)]
pub struct ScaleRun {
    pub rate: u64,
    pub seconds: f64,
    pub symbols: usize,
    pub seed: u64,
    pub fsync: String,
    pub publish_ms: u64,
    pub machine: String,
    pub date: String,
    pub wall_seconds: f64,
    /// Every run, in order, each on a stack started afresh.
    pub runs: Vec<StackResult>,
}

/// Zero latency at the study's rate (`--zero-latency`): one stack at a
/// time, DRAM and fsmem alternating, the same settings every run.
#[derive(Debug, Clone, Serialize)]
pub struct ZeroLatencyRuns {
    pub rate: u64,
    pub seconds: f64,
    pub prestress: u64,
    pub symbols: usize,
    pub seed: u64,
    pub fsync: String,
    pub timers: Timers,
    pub machine: String,
    pub date: String,
    pub wall_seconds: f64,
    pub dram: Vec<StackResult>,
    pub fsmem: Vec<StackResult>,
}

#[derive(Debug, Clone, Serialize)]
pub struct StackReport {
    pub rate: u64,
    pub seconds: f64,
    pub prestress: u64,
    pub symbols: usize,
    pub publish_ms: u64,
    pub seed: u64,
    pub fsync: String,
    pub test1: Vec<Test1Row>,
    pub test2: Option<Test2>,
    /// The study's scale on one DRAM stack (`--scale`).
    pub scale: Option<ScaleRun>,
    /// Zero latency at the study's rate, one stack at a time
    /// (`--zero-latency`).
    pub zero_latency: Option<ZeroLatencyRuns>,
    pub machine: String,
    pub date: String,
    pub mem_total_bytes: Option<u64>,
    pub fsmem_fs: String,
    pub wall_seconds: f64,
}

struct Spec {
    name: String,
    placement: Placement,
    timers: Timers,
}

/// One stack's processes.
struct Running {
    spec: Spec,
    dir: PathBuf,
    tp: Tickdb,
    rdb: Child,
    rdb_http: u16,
    agg: Child,
    feed: Option<Child>,
    monitor: Option<Child>,
}

fn tickdb(bin: &Path) -> Command {
    let mut c = Command::new(bin);
    c.env("TICKDB_LOG", "info");
    c
}

fn start_stack(bin: &Path, work: &Path, spec: Spec, o: &StackOptions) -> Result<Running> {
    let dir = work.join(&spec.name);
    std::fs::create_dir_all(&dir).map_err(BenchError::io(format!("creating {}", dir.display())))?;
    let tp = servers::start_tickdb(
        bin,
        &dir,
        "tp",
        "tp",
        &[
            "--fsync",
            &o.fsync,
            "--publish-interval-ms",
            &spec.timers.tp_ms.to_string(),
        ],
    )?;
    let tp_addr = format!("127.0.0.1:{}", tp.tp);
    let rdb_http = free_port()?;
    let mut cmd = tickdb(bin);
    cmd.args(["rdb", "--tp", &tp_addr])
        .args(["--http-port", &rdb_http.to_string()])
        .args(["--pg-port", &free_port()?.to_string()]);
    if spec.placement == Placement::Fsmem {
        let fs = dir.join("fsmem");
        std::fs::create_dir_all(&fs).map_err(BenchError::io("creating the fsmem directory"))?;
        cmd.arg("--fsmem-dir").arg(&fs);
        for t in FSMEM_TABLES {
            cmd.args(["--fsmem", t]);
        }
    }
    let mut rdb = Child::spawn(
        &format!("{} rdb", spec.name),
        &mut cmd,
        &dir.join("rdb.log"),
    )?;
    servers::wait_http(&mut rdb, rdb_http, "/health")?;
    let mut cmd = tickdb(bin);
    cmd.args(["agg", "--tp", &tp_addr])
        .args(["--publish-ms", &o.publish_ms.to_string()]);
    let agg = Child::spawn(
        &format!("{} agg", spec.name),
        &mut cmd,
        &dir.join("agg.log"),
    )?;
    Ok(Running {
        spec,
        dir,
        tp,
        rdb,
        rdb_http,
        agg,
        feed: None,
        monitor: None,
    })
}

fn feed_cmd(bin: &Path, r: &Running, o: &StackOptions) -> Command {
    let mut cmd = tickdb(bin);
    cmd.args(["feed", "--host", "127.0.0.1"])
        .args(["--ilp-port", &r.tp.ilp.to_string()])
        .args(["--http-port", &r.tp.http.to_string()])
        .args(["--rate", &o.rate.to_string()])
        .args(["--symbols", &o.symbols.to_string()])
        .args(["--seed", &o.seed.to_string()]);
    cmd
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<T> {
    let text = std::fs::read_to_string(path)
        .map_err(BenchError::io(format!("reading {}", path.display())))?;
    serde_json::from_str(&text)
        .map_err(|e| BenchError::Protocol(format!("{}: {e}", path.display())))
}

fn status(port: u16) -> Result<serde_json::Value> {
    crate::http::request_json(port, "GET", "/status")
}

fn check_alive(stacks: &mut [Running]) -> Result<()> {
    for r in stacks.iter_mut() {
        r.tp.child.check_alive()?;
        r.rdb.check_alive()?;
        r.agg.check_alive()?;
    }
    Ok(())
}

/// One stack's prestress while it runs.
struct Preload {
    load: PrestressLoad,
    /// Rows the rdb must hold: asked for, or what the feed sent once it
    /// was stopped early.
    target_rows: u64,
    /// The rdb's anonymous RSS before the preload, the baseline of its
    /// memory per row.
    rss_anon_start: u64,
    feed_done: bool,
    done: bool,
}

/// Preloads every stack (in parallel) and waits until each rdb holds the
/// rows, showing the rdbs' progress. A stack whose preload would leave less
/// memory than the live run is projected to need (its rdb's memory per row
/// so far times the rows the live run adds, plus MEM_HEADROOM_BYTES) has
/// its feed stopped there, and says so.
fn prestress(
    bin: &Path,
    stacks: &mut [Running],
    o: &StackOptions,
    pb: &ProgressBar,
) -> Result<Vec<PrestressLoad>> {
    if o.prestress == 0 {
        return Ok(vec![PrestressLoad::default(); stacks.len()]);
    }
    pb.set_message(format!("prestress {} rows per stack", o.prestress));
    let mut loads = Vec::new();
    for r in stacks.iter_mut() {
        let st = status(r.rdb_http)?;
        let mut cmd = feed_cmd(bin, r, o);
        cmd.args(["--prestress", &o.prestress.to_string(), "--duration", "0"])
            .arg("--summary")
            .arg(r.dir.join("prestress.json"));
        r.feed = Some(Child::spawn(
            &format!("{} prestress", r.spec.name),
            &mut cmd,
            &r.dir.join("prestress.log"),
        )?);
        loads.push(Preload {
            load: PrestressLoad {
                asked_rows: o.prestress,
                ..Default::default()
            },
            target_rows: o.prestress,
            rss_anon_start: st["process"]["rss_anon_bytes"].as_u64().unwrap_or(0),
            feed_done: false,
            done: false,
        });
    }
    // Rows the live run adds to each rdb: what the memory must still hold.
    let live_rows = o.rate as f64 * (o.seconds + (WARMUP + TAIL).as_secs_f64());
    let t0 = Instant::now();
    let mut last_log = t0;
    while loads.iter().any(|l| !l.done) {
        child::check_interrupt()?;
        if t0.elapsed() > PRESTRESS_TIMEOUT {
            return Err(BenchError::Server(format!(
                "the prestress did not finish within {PRESTRESS_TIMEOUT:?}"
            )));
        }
        let mut held = 0u64;
        let mut want = 0u64;
        // Each rdb still being fed: (anonymous RSS now, at the start, rows).
        let mut growing = Vec::new();
        for (r, l) in stacks.iter_mut().zip(loads.iter_mut()) {
            r.tp.child.check_alive()?;
            r.rdb.check_alive()?;
            r.agg.check_alive()?;
            let st = status(r.rdb_http)?;
            let rows = tick_rows(&st);
            if !l.feed_done {
                if let Some(f) = r.feed.as_mut() {
                    if let Some(exit) = f.try_exit() {
                        if !exit.success() {
                            return Err(BenchError::Server(format!(
                                "{} prestress failed ({exit}):\n{}",
                                r.spec.name,
                                child::log_tail(&f.log)
                            )));
                        }
                        l.feed_done = true;
                        // What the feed sent, also when it was stopped early.
                        let sent: FeedSummary = read_json(&r.dir.join("prestress.json"))?;
                        l.target_rows = sent.prestress_rows;
                    } else if l.load.stopped.is_none() {
                        let anon = st["process"]["rss_anon_bytes"].as_u64().unwrap_or(0);
                        growing.push((anon, l.rss_anon_start, rows));
                    }
                }
            }
            if l.feed_done && !l.done && rows >= l.target_rows {
                l.done = true;
                l.load.rows = rows;
                l.load.seconds = t0.elapsed().as_secs_f64();
                l.load.tables = table_figures(&st);
                l.load.rss_anon_bytes = st["process"]["rss_anon_bytes"].as_u64();
            }
            held += rows.min(l.target_rows);
            want += l.target_rows;
        }
        // The memory every rdb still being fed will need for its live run.
        let short = tickdb_stack::procfs::mem_available_bytes()
            .and_then(|avail| memory_short(avail, &growing, live_rows));
        if let Some(why) = short {
            pb.suspend(|| eprintln!("the prestress stops early: {why}"));
            for (r, l) in stacks.iter_mut().zip(loads.iter_mut()) {
                if let (false, None, Some(f)) = (l.feed_done, &l.load.stopped, r.feed.as_ref()) {
                    l.load.stopped = Some(why.clone());
                    f.ask_to_stop();
                }
            }
        }
        let secs = t0.elapsed().as_secs_f64().max(1e-9);
        let per_s = held as f64 / secs;
        let eta = if per_s > 0.0 {
            format!(
                ", about {:.0} s to go",
                want.saturating_sub(held) as f64 / per_s
            )
        } else {
            String::new()
        };
        pb.set_message(format!(
            "prestress: the rdbs hold {held} of {want} rows ({:.1}%, {:.0} rows/s{eta})",
            held as f64 * 100.0 / want.max(1) as f64,
            per_s
        ));
        if pb.is_hidden() && last_log.elapsed() >= PRESTRESS_LOG_EVERY {
            // No terminal (a log): a line now and then.
            last_log = Instant::now();
            pb.suspend(|| {
                eprintln!("prestress: the rdbs hold {held} of {want} rows after {secs:.0} s")
            });
        }
        if loads.iter().any(|l| !l.done) {
            std::thread::sleep(PRESTRESS_POLL);
        }
    }
    for r in stacks.iter_mut() {
        r.feed = None;
    }
    Ok(loads.into_iter().map(|l| l.load).collect())
}

/// Why the preloads must stop now, if they must: MemAvailable (`avail`) is
/// below what the live runs are projected to need (`live_rows` per rdb at
/// each rdb's anonymous memory per row so far) plus MEM_HEADROOM_BYTES.
/// `growing`: each rdb still being preloaded, as (its anonymous RSS now,
/// before the preload, the rows it holds).
fn memory_short(avail: u64, growing: &[(u64, u64, u64)], live_rows: f64) -> Option<String> {
    if growing.is_empty() {
        return None;
    }
    let mut live_bytes = 0.0;
    let mut per_row_max = 0.0f64;
    let mut rows_min = u64::MAX;
    for &(anon, start, rows) in growing {
        // Until then the process's own baseline dominates its figure.
        if rows >= PRESTRESS_MEASURE_ROWS_MIN {
            let per_row = anon.saturating_sub(start) as f64 / rows as f64;
            live_bytes += per_row * live_rows;
            per_row_max = per_row_max.max(per_row);
        }
        rows_min = rows_min.min(rows);
    }
    let need = live_bytes as u64 + MEM_HEADROOM_BYTES;
    (avail < need).then(|| {
        format!(
            "at {} rows{} {} of memory was left (MemAvailable), and the live run's {} more rows{} need about {} at up to {per_row_max:.0} bytes of anonymous memory per row (what the rdb used so far), plus {} to spare",
            count(rows_min),
            if growing.len() > 1 { " (the least of any stack)," } else { "" },
            bytes(avail as f64),
            count(live_rows as u64),
            if growing.len() > 1 {
                format!(" in each of {} stacks", growing.len())
            } else {
                String::new()
            },
            bytes(live_bytes),
            bytes(MEM_HEADROOM_BYTES as f64)
        )
    })
}

/// Waits until the agg has folded every tick the rdb holds.
fn bars_check(r: &Running) -> (bool, String) {
    let t0 = Instant::now();
    let q = |sql: &str| exec_scalar(r.rdb_http, sql);
    let mut last = String::new();
    while t0.elapsed() < BARS_TIMEOUT {
        if child::check_interrupt().is_err() {
            break;
        }
        let got = (|| -> Result<(i64, i64, i64, i64)> {
            Ok((
                q("select count(*) from trade")?,
                q("select coalesce(sum(trades), 0) from trade_1m")?,
                q("select count(*) from quote")?,
                q("select coalesce(sum(quotes), 0) from quote_1m")?,
            ))
        })();
        match got {
            Ok((t, bt, qu, bq)) if t == bt && qu == bq => {
                return (
                    true,
                    format!("{t} trades and {qu} quotes, all folded into trade_1m and quote_1m"),
                )
            }
            Ok((t, bt, qu, bq)) => {
                last = format!(
                    "trade {t} vs Σ trade_1m.trades {bt}, quote {qu} vs Σ quote_1m.quotes {bq}"
                )
            }
            Err(e) => last = e.to_string(),
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    (false, last)
}

/// Runs one scenario: every stack at once, measured for `o.seconds`.
/// `o.zero_latency` runs of one stack per placement, DRAM and fsmem
/// alternating so that a machine getting busier or quieter meets both.
fn zero_latency_runs(
    bin: &Path,
    work: &Path,
    o: &StackOptions,
    machine: &Machine,
    pb: &ProgressBar,
) -> Result<ZeroLatencyRuns> {
    let t0 = Instant::now();
    let timers = ZERO_LATENCY_TIMERS;
    let (mut dram, mut fsmem) = (Vec::new(), Vec::new());
    for run in 1..=o.zero_latency {
        for placement in [Placement::Dram, Placement::Fsmem] {
            let spec = Spec {
                name: format!(
                    "zl-{}-{run}-m{}-tp{}",
                    placement.name(),
                    timers.monitor_ms,
                    timer_name(timers.tp_ms)
                ),
                placement,
                timers,
            };
            let got = scenario(bin, work, vec![spec], o, pb)?;
            let into = match placement {
                Placement::Dram => &mut dram,
                Placement::Fsmem => &mut fsmem,
            };
            into.extend(got);
        }
    }
    Ok(ZeroLatencyRuns {
        rate: o.rate,
        seconds: o.seconds,
        prestress: o.prestress,
        symbols: o.symbols,
        seed: o.seed,
        fsync: o.fsync.clone(),
        timers,
        machine: machine.summary(),
        date: crate::today_utc(),
        wall_seconds: t0.elapsed().as_secs_f64(),
        dram,
        fsmem,
    })
}

fn scenario(
    bin: &Path,
    work: &Path,
    specs: Vec<Spec>,
    o: &StackOptions,
    pb: &ProgressBar,
) -> Result<Vec<StackResult>> {
    let mut stacks = Vec::new();
    pb.set_message(format!("starting {} stacks", specs.len()));
    for s in specs {
        stacks.push(start_stack(bin, work, s, o)?);
    }
    let loads = prestress(bin, &mut stacks, o, pb)?;
    check_alive(&mut stacks)?;
    let names: Vec<&str> = stacks.iter().map(|r| r.spec.name.as_str()).collect();
    let label = names.join(" + ");
    pb.set_message(label.clone());
    let feed_secs = (WARMUP + TAIL).as_secs_f64() + o.seconds;
    for r in stacks.iter_mut() {
        let mut cmd = feed_cmd(bin, r, o);
        cmd.args(["--duration", &format!("{feed_secs:.3}")])
            .arg("--summary")
            .arg(r.dir.join("feed.json"));
        r.feed = Some(Child::spawn(
            &format!("{} feed", r.spec.name),
            &mut cmd,
            &r.dir.join("feed.log"),
        )?);
    }
    child::sleep(WARMUP)?;
    for r in stacks.iter_mut() {
        let mut cmd = tickdb(bin);
        cmd.args(["monitor", "--rdb", &format!("127.0.0.1:{}", r.rdb_http)])
            .args(["--every-ms", &r.spec.timers.monitor_ms.to_string()])
            .args(["--duration", &format!("{:.3}", o.seconds)])
            .args(["--label", &r.spec.name])
            .arg("--out")
            .arg(r.dir.join("monitor"));
        if let Some(pid) = r.rdb.pid() {
            cmd.args(["--rdb-pid", &pid.to_string()]);
        }
        r.monitor = Some(Child::spawn(
            &format!("{} monitor", r.spec.name),
            &mut cmd,
            &r.dir.join("monitor.log"),
        )?);
    }
    let t0 = Instant::now();
    let start_pos = pb.position();
    loop {
        child::check_interrupt()?;
        check_alive(&mut stacks)?;
        let mut running = 0;
        for r in stacks.iter_mut() {
            if let Some(m) = r.monitor.as_mut() {
                match m.check_alive() {
                    Ok(()) => running += 1,
                    Err(_) => {
                        let st = m.wait_exit(Duration::from_secs(5))?;
                        if !st.success() {
                            return Err(BenchError::Server(format!(
                                "{} monitor failed ({st}):\n{}",
                                r.spec.name,
                                child::log_tail(&m.log)
                            )));
                        }
                        r.monitor = None;
                    }
                }
            }
            if let Some(f) = r.feed.as_mut() {
                // A feed that ends before its duration has failed.
                if f.check_alive().is_err()
                    && t0.elapsed() + TAIL < Duration::from_secs_f64(o.seconds)
                {
                    return Err(BenchError::Server(format!(
                        "{} feed stopped early:\n{}",
                        r.spec.name,
                        child::log_tail(&f.log)
                    )));
                }
            }
        }
        let ms = (t0.elapsed().as_millis() as u64).min((o.seconds * 1000.0) as u64);
        pb.set_position(start_pos + ms);
        if running == 0 {
            break;
        }
        if t0.elapsed() > Duration::from_secs_f64(o.seconds) + Duration::from_secs(120) {
            return Err(BenchError::Server(format!(
                "{label}: the monitors did not finish"
            )));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    pb.set_position(start_pos + (o.seconds * 1000.0) as u64);
    let mut out = Vec::new();
    for r in stacks.iter_mut() {
        if let Some(mut f) = r.feed.take() {
            let st = f.wait_exit(TAIL + Duration::from_secs(30))?;
            if !st.success() {
                return Err(BenchError::Server(format!(
                    "{} feed failed ({st}):\n{}",
                    r.spec.name,
                    child::log_tail(&f.log)
                )));
            }
        }
    }
    pb.set_message(format!("{label}: checking the bars"));
    for (r, prestress_load) in stacks.iter_mut().zip(loads) {
        let monitor: MonitorSummary = read_json(&r.dir.join("monitor").join(SUMMARY_FILE))?;
        let feed: FeedSummary = read_json(&r.dir.join("feed.json"))?;
        let prestress: FeedSummary = if o.prestress > 0 {
            read_json(&r.dir.join("prestress.json"))?
        } else {
            FeedSummary::default()
        };
        let (bars_ok, bars_note) = bars_check(r);
        // Once the agg has folded every tick, the last ticks of the tp's
        // timer have arrived too.
        let tables = table_figures(&status(r.rdb_http)?);
        child::check_interrupt()?;
        out.push(StackResult {
            name: r.spec.name.clone(),
            placement: r.spec.placement,
            timers: r.spec.timers,
            monitor,
            feed,
            prestress,
            prestress_load,
            tables,
            bars_ok,
            bars_note,
        });
    }
    for r in stacks.iter_mut() {
        r.agg.stop(STOP_GRACE);
        r.rdb.stop(STOP_GRACE);
        r.tp.child.stop(STOP_GRACE);
        // The journals and fsmem files of a finished scenario are not
        // needed again; keep the logs and the monitor's files.
        let _ = std::fs::remove_dir_all(&r.tp.data_dir);
        let _ = std::fs::remove_dir_all(r.dir.join("fsmem"));
    }
    Ok(out)
}

fn timer_name(ms: u64) -> String {
    if ms == 0 {
        "0".into()
    } else {
        ms.to_string()
    }
}

/// Runs the tests `o.tests` asks for.
pub fn run(bin: &Path, work: &Path, o: &StackOptions) -> Result<StackReport> {
    let machine = Machine::probe(work);
    let started = Instant::now();
    let tests = !o.scale && o.zero_latency == 0;
    let do1 = tests && o.tests.contains(&1);
    let do2 = tests && o.tests.contains(&2);
    let runs = o.runs.max(1);
    let scenarios = if do1 { o.timers.len() * runs } else { 0 }
        + if do2 { 2 * runs } else { 0 }
        + if o.scale { runs } else { 0 }
        + 2 * o.zero_latency;
    let pb = ProgressBar::new((scenarios as f64 * o.seconds * 1000.0) as u64);
    pb.set_style(
        ProgressStyle::with_template("bench stack {bar:30} {percent}% {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut test1: Vec<Test1Row> = Vec::new();
    if do1 {
        test1 = o
            .timers
            .iter()
            .map(|t| Test1Row {
                timers: *t,
                dram: Vec::new(),
                fsmem: Vec::new(),
            })
            .collect();
    }
    // Rounds: every scenario once, then again, so that a machine that
    // drifts during the run weighs on every scenario alike.
    for run in 1..=if do1 { runs } else { 0 } {
        for (i, row) in test1.iter_mut().enumerate() {
            let t = row.timers;
            let tag = format!(
                "t1-{}-m{}-tp{}-r{run}",
                i + 1,
                t.monitor_ms,
                timer_name(t.tp_ms)
            );
            let mut res = scenario(
                bin,
                work,
                vec![
                    Spec {
                        name: format!("{tag}-dram"),
                        placement: Placement::Dram,
                        timers: t,
                    },
                    Spec {
                        name: format!("{tag}-fsmem"),
                        placement: Placement::Fsmem,
                        timers: t,
                    },
                ],
                o,
                &pb,
            )?;
            row.fsmem.push(res.pop().expect("two stacks"));
            row.dram.push(res.pop().expect("two stacks"));
        }
    }
    let mut test2 = None;
    if do2 {
        let t = o.test2_timers;
        let specs = |placement: Placement, n: usize, run: usize| -> Vec<Spec> {
            (0..n)
                .map(|i| Spec {
                    name: format!("t2-{}-{}-r{run}", placement.name(), i + 1),
                    placement,
                    timers: t,
                })
                .collect()
        };
        let mut all_runs = Vec::new();
        // The fsmem count is chosen once, from the first run, so that
        // every run compares the same stacks.
        let mut count: Option<(usize, String)> = None;
        for run in 1..=runs {
            let dram = scenario(
                bin,
                work,
                specs(Placement::Dram, o.dram_rdbs.max(1), run),
                o,
                &pb,
            )?;
            let n = count.get_or_insert_with(|| fsmem_count(o, &dram, &test1)).0;
            let fsmem = scenario(bin, work, specs(Placement::Fsmem, n, run), o, &pb)?;
            all_runs.push(Test2Run { dram, fsmem });
        }
        test2 = Some(Test2 {
            timers: t,
            runs: all_runs,
            fsmem_count_reason: count.map(|c| c.1).unwrap_or_default(),
        });
    }
    let mut scale = None;
    if o.scale {
        let t0 = Instant::now();
        let timers = o.timers.first().copied().unwrap_or(SCALE_TIMERS);
        let mut runs = Vec::new();
        for run in 0..o.runs.max(1) {
            let mut res = scenario(
                bin,
                work,
                vec![Spec {
                    name: format!(
                        "scale-dram-m{}-tp{}-run{}",
                        timers.monitor_ms,
                        timers.tp_ms,
                        run + 1
                    ),
                    placement: Placement::Dram,
                    timers,
                }],
                o,
                &pb,
            )?;
            runs.extend(res.pop());
        }
        scale = Some(ScaleRun {
            rate: o.rate,
            seconds: o.seconds,
            symbols: o.symbols,
            seed: o.seed,
            fsync: o.fsync.clone(),
            publish_ms: o.publish_ms,
            machine: machine.summary(),
            date: crate::today_utc(),
            wall_seconds: t0.elapsed().as_secs_f64(),
            runs,
        });
    }
    let zero_latency = if o.zero_latency > 0 {
        Some(zero_latency_runs(bin, work, o, &machine, &pb)?)
    } else {
        None
    };
    pb.finish_and_clear();
    let fsmem_fs = machine.fs.clone();
    Ok(StackReport {
        rate: o.rate,
        seconds: o.seconds,
        prestress: o.prestress,
        symbols: o.symbols,
        publish_ms: o.publish_ms,
        seed: o.seed,
        fsync: o.fsync.clone(),
        test1,
        test2,
        scale,
        zero_latency,
        machine: machine.summary(),
        date: crate::today_utc(),
        mem_total_bytes: tickdb_stack::procfs::mem_total_bytes(),
        fsmem_fs,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

/// Test 2's fsmem stack count: as given, or as many as fit in the DRAM
/// (anonymous RSS) the DRAM rdbs used, at an fsmem rdb's own anonymous RSS
/// each (measured in Test 1 when it ran), at most FSMEM_STACKS_PER_CORE
/// per core.
fn fsmem_count(o: &StackOptions, dram: &[StackResult], test1: &[Test1Row]) -> (usize, String) {
    if let Some(n) = o.fsmem_rdbs {
        return (n.max(1), format!("{n} fsmem rdbs, as asked (--fsmem-rdbs)"));
    }
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let cap = cores * FSMEM_STACKS_PER_CORE;
    let dram_anon: u64 = dram
        .iter()
        .filter_map(|r| r.monitor.rss_anon_bytes_max)
        .sum();
    let per_fsmem = test1
        .iter()
        .flat_map(|r| r.fsmem.iter())
        .filter_map(|r| r.monitor.rss_anon_bytes_max)
        .max()
        .or_else(|| {
            // No Test 1: a DRAM rdb's anonymous memory less its tables.
            dram.iter()
                .filter_map(|r| {
                    Some(
                        r.monitor
                            .rss_anon_bytes_max?
                            .saturating_sub(r.monitor.dram_bytes_max?),
                    )
                })
                .max()
        })
        .filter(|&b| b > 0);
    match per_fsmem {
        Some(per) => {
            let fit = (dram_anon / per) as usize;
            let n = fit.clamp(1, cap);
            (
                n,
                format!(
                    "{n} fsmem rdbs: the {} DRAM rdbs used {} of anonymous memory, an fsmem rdb {}, so {fit} fit; at most {FSMEM_STACKS_PER_CORE} stacks per core ({cores} cores) run here",
                    dram.len(),
                    bytes(dram_anon as f64),
                    bytes(per as f64)
                ),
            )
        }
        None => (
            dram.len().max(1),
            "as many fsmem rdbs as DRAM rdbs (their memory could not be read)".into(),
        ),
    }
}

pub fn ms(x: Option<f64>) -> String {
    match x {
        None => "n/a".into(),
        Some(v) if v >= 1000.0 => format!("{:.2} s", v / 1000.0),
        Some(v) if v >= 100.0 => format!("{v:.0} ms"),
        Some(v) if v >= 10.0 => format!("{v:.1} ms"),
        Some(v) => format!("{v:.2} ms"),
    }
}

pub fn bytes(b: f64) -> String {
    const K: f64 = 1024.0;
    if b >= K * K * K {
        format!("{:.2} GiB", b / (K * K * K))
    } else if b >= K * K {
        format!("{:.1} MiB", b / (K * K))
    } else if b >= K {
        format!("{:.1} KiB", b / K)
    } else {
        format!("{b:.0} B")
    }
}

/// The study's comparison factor: `better / worse` oriented so that above
/// 1 means fsmem did better. For lower-is-better measures pass
/// (dram, fsmem); for higher-is-better (fsmem, dram).
pub fn factor(num: Option<f64>, den: Option<f64>) -> String {
    match (num, den) {
        (Some(n), Some(d)) if d > 0.0 => {
            let f = n / d;
            if f >= 100.0 {
                format!("{f:.0}")
            } else if f >= 0.01 {
                format!("{f:.3}")
            } else {
                format!("{f:.2e}")
            }
        }
        (Some(n), Some(_)) if n > 0.0 => "∞".into(),
        _ => "n/a".into(),
    }
}

fn mean(xs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    let v: Vec<f64> = xs.flatten().collect();
    (!v.is_empty()).then(|| v.iter().sum::<f64>() / v.len() as f64)
}

fn maxf(xs: impl Iterator<Item = Option<f64>>) -> Option<f64> {
    xs.flatten().reduce(f64::max)
}

/// The rows of Test 1, in order (the tests check every one is there).
pub const TEST1_ROWS: [&str; 7] = [
    "Max latency",
    "Mean latency",
    "Max aggregated-row latency",
    "Bytes in memory (tables in DRAM)",
    "RSS anonymous (process DRAM)",
    "Average query time",
    "Queries per minute",
];

/// The rows of Test 2.
pub const TEST2_ROWS: [&str; 6] = [
    "Max latency",
    "Max aggregated-row latency",
    "% of the machine's DRAM used (RSS anonymous)",
    "Bytes in memory (tables in DRAM)",
    "Average query time",
    "Total queries per minute",
];

const FACTOR_NOTE: &str = "*Comparison is the Optane kdb+ study's factor, higher is better for fsmem: DRAM ÷ fsmem for latency, memory and query time, fsmem ÷ DRAM for queries per minute; 1 = the same. The reference is the DRAM rdb measured in the same run on the same data.";

impl StackReport {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        if !self.test1.is_empty() || self.test2.is_some() {
            s.push_str(&self.tests_markdown());
        }
        // A blank line ends the previous paragraph before each heading.
        let part = |s: &mut String, md: String| {
            if !s.is_empty() && !s.ends_with("\n\n") {
                s.push('\n');
            }
            s.push_str(&md);
        };
        if let Some(zl) = &self.zero_latency {
            part(&mut s, zl.markdown());
        }
        if let Some(sc) = &self.scale {
            part(&mut s, sc.markdown());
        }
        s.push_str(&self.targets());
        s
    }

    /// Tests 1 and 2: the introduction, their tables and checks.
    fn tests_markdown(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "The test stack of \"Using Intel Optane memory to expand the capacity of a typical realtime kdb market data system\" (Eoin Cunning and Nick McDaid; the Optane kdb+ study). Each stack is five processes: `tickdb feed` ({} updates/s, trades:quotes 1:10, {} symbols with Zipf activity, seed {}) → `tickdb tp` (`--fsync {}`, tp timer as given; 0 = zero-latency) → `tickdb agg` (minute bars and daily stats, published back every {} ms) → `tickdb rdb` → `tickdb monitor` (monitor timer as given). Each stack is preloaded with {} rows (`--prestress`), then measured for {} s. An fsmem stack's rdb holds every table in fsmem (`--fsmem-dir` on {}); on this machine that is an ordinary file system whose page cache is DRAM too, where production would use a DAX mount. Latency = time the monitor's query answered − generation time of the newest row it saw (max and mean over the polls, trade and quote together); aggregated-row latency the same from `last_time` of `trade_1m` and `quote_1m`; query time = the monitor's as-of join of one symbol's trades with their quotes. Measured on {}, {}, in {:.0} s.\n\n",
            self.rate,
            self.symbols,
            self.seed,
            self.fsync,
            self.publish_ms,
            self.prestress,
            self.seconds,
            self.fsmem_fs,
            self.machine,
            self.date,
            self.wall_seconds
        ));
        if !self.test1.is_empty() {
            s.push_str("### Test 1: a DRAM rdb against an fsmem rdb\n\n");
            s.push_str(
                "Each scenario runs one DRAM stack and one fsmem stack at the same time.\n\n",
            );
            s.push_str("| | Monitor timer | Tp timer | DRAM | fsmem | Comparison* |\n|---|---|---|---|---|---|\n");
            for r in &self.test1 {
                let m = r.timers.monitor_ms;
                let t = r.timers.tp_ms;
                // Each figure: the median over the runs of the scenario.
                let med = |f: &dyn Fn(&StackResult) -> Option<f64>| {
                    (median_of(&r.dram, f), median_of(&r.fsmem, f))
                };
                let bytes_or = |x: Option<f64>| x.map(bytes).unwrap_or("n/a".into());
                let qpm = |x: Option<f64>| x.map(|v| format!("{v:.0}")).unwrap_or("n/a".into());
                let line = |name: &str,
                            (d, f): (Option<f64>, Option<f64>),
                            show: &dyn Fn(Option<f64>) -> String,
                            more_is_better: bool| {
                    let [dv, fv, c] = compared(d, f, show, more_is_better);
                    format!("| {name} | {m} ms | {t} ms | {dv} | {fv} | {c} |\n")
                };
                s.push_str(&line(
                    TEST1_ROWS[0],
                    med(&|x| x.max_latency_ms()),
                    &ms,
                    false,
                ));
                s.push_str(&line(
                    TEST1_ROWS[1],
                    med(&|x| x.mean_latency_ms()),
                    &ms,
                    false,
                ));
                s.push_str(&line(
                    TEST1_ROWS[2],
                    med(&|x| x.max_agg_latency_ms()),
                    &ms,
                    false,
                ));
                s.push_str(&line(
                    TEST1_ROWS[3],
                    med(&|x| x.monitor.dram_bytes_max.map(|b| b as f64)),
                    &bytes_or,
                    false,
                ));
                s.push_str(&line(
                    TEST1_ROWS[4],
                    med(&|x| x.monitor.rss_anon_bytes_max.map(|b| b as f64)),
                    &bytes_or,
                    false,
                ));
                s.push_str(&line(
                    TEST1_ROWS[5],
                    med(&|x| x.monitor.asof_ms.mean),
                    &ms,
                    false,
                ));
                // More queries per minute is better: fsmem ÷ DRAM.
                s.push_str(&line(
                    TEST1_ROWS[6],
                    med(&|x| Some(x.monitor.queries_per_minute)),
                    &qpm,
                    true,
                ));
            }
            s.push_str(&format!("\n{FACTOR_NOTE}\n\n"));
            let runs = self.test1.first().map_or(0, |r| r.dram.len());
            if runs > 1 {
                let each: Vec<String> = self
                    .test1
                    .iter()
                    .map(|r| {
                        format!(
                            "{}:{} DRAM {}, fsmem {}",
                            r.timers.monitor_ms,
                            r.timers.tp_ms,
                            each_run_ms(&r.dram, |x| x.max_latency_ms()),
                            each_run_ms(&r.fsmem, |x| x.max_latency_ms())
                        )
                    })
                    .collect();
                s.push_str(&format!(
                    "Each figure is the median over {runs} runs of its scenario: the scenarios ran in {runs} rounds, each run starting its two stacks afresh (preload included). Max latency of every run, in run order (monitor timer:tp timer in ms): {}.\n\n",
                    each.join("; ")
                ));
            }
        }
        if let Some(t2) = &self.test2 {
            let first = t2.runs.first();
            let (nd, nf) = first.map_or((0, 0), |r| (r.dram.len(), r.fsmem.len()));
            s.push_str(&format!(
                "### Test 2: {nd} DRAM rdbs against {nf} fsmem rdbs\n\n\
                 The DRAM stacks run together, then the fsmem stacks together; monitor timer {} ms, tp timer {} ms. {}.\n\n",
                t2.timers.monitor_ms, t2.timers.tp_ms, t2.fsmem_count_reason
            ));
            s.push_str(&format!(
                "| | {nd} DRAM rdbs | {nf} fsmem rdbs | Comparison* |\n|---|---|---|---|\n"
            ));
            let total = self.mem_total_bytes.map(|b| b as f64);
            let pct = |rs: &[StackResult]| -> Option<f64> {
                let sum: u64 = rs.iter().filter_map(|r| r.monitor.rss_anon_bytes_max).sum();
                total.filter(|t| *t > 0.0).map(|t| sum as f64 * 100.0 / t)
            };
            let tab = |rs: &[StackResult]| -> Option<f64> {
                Some(
                    rs.iter()
                        .filter_map(|r| r.monitor.dram_bytes_max)
                        .sum::<u64>() as f64,
                )
            };
            let qpm = |rs: &[StackResult]| -> Option<f64> {
                Some(rs.iter().map(|r| r.monitor.queries_per_minute).sum())
            };
            let lat = |rs: &[StackResult]| maxf(rs.iter().map(|r| r.max_latency_ms()));
            let agg = |rs: &[StackResult]| maxf(rs.iter().map(|r| r.max_agg_latency_ms()));
            let q = |rs: &[StackResult]| mean(rs.iter().map(|r| r.monitor.asof_ms.mean));
            // A group's figure in each run, then the median over the runs.
            let med = |f: &dyn Fn(&[StackResult]) -> Option<f64>| {
                (
                    median_of(&t2.runs, |r| f(&r.dram)),
                    median_of(&t2.runs, |r| f(&r.fsmem)),
                )
            };
            let pctf = |x: Option<f64>| x.map(|v| format!("{v:.3}%")).unwrap_or("n/a".into());
            let line = |name: &str,
                        (d, f): (Option<f64>, Option<f64>),
                        show: &dyn Fn(Option<f64>) -> String,
                        more_is_better: bool| {
                let [dv, fv, c] = compared(d, f, show, more_is_better);
                format!("| {name} | {dv} | {fv} | {c} |\n")
            };
            let bytes_or = |x: Option<f64>| bytes(x.unwrap_or(0.0));
            let count_of = |x: Option<f64>| format!("{:.0}", x.unwrap_or(0.0));
            s.push_str(&line(TEST2_ROWS[0], med(&lat), &ms, false));
            s.push_str(&line(TEST2_ROWS[1], med(&agg), &ms, false));
            s.push_str(&line(TEST2_ROWS[2], med(&pct), &pctf, false));
            s.push_str(&line(TEST2_ROWS[3], med(&tab), &bytes_or, false));
            s.push_str(&line(TEST2_ROWS[4], med(&q), &ms, false));
            s.push_str(&line(TEST2_ROWS[5], med(&qpm), &count_of, true));
            s.push_str(&format!(
                "\n{FACTOR_NOTE} Total queries per minute adds up every rdb's monitor.\n\n"
            ));
            if t2.runs.len() > 1 {
                let each = |f: &dyn Fn(&Test2Run) -> Option<f64>| {
                    t2.runs
                        .iter()
                        .map(|r| ms(f(r)))
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                s.push_str(&format!(
                    "Each figure is the median over {} runs of Test 2, each starting its stacks afresh. Max latency of every run, in run order: DRAM {}, fsmem {}.\n\n",
                    t2.runs.len(),
                    each(&|r| lat(&r.dram)),
                    each(&|r| lat(&r.fsmem))
                ));
            }
        }
        let all: Vec<&StackResult> = self.all().collect();
        let bad: Vec<&StackResult> = all.iter().copied().filter(|r| !r.bars_ok).collect();
        if bad.is_empty() {
            s.push_str(&format!(
                "Aggregation check: in all {} stacks, once the feed stopped, Σ trades of `trade_1m` equalled the trade count and Σ quotes of `quote_1m` the quote count (the agg folded every tick).\n",
                all.len()
            ));
        } else {
            for r in bad {
                s.push_str(&format!(
                    "Aggregation check FAILED in {}: {}\n",
                    r.name, r.bars_note
                ));
            }
        }
        let rates: Vec<f64> = all.iter().map(|r| r.feed.rate_achieved).collect();
        if let (Some(lo), Some(hi)) = (
            rates.iter().copied().reduce(f64::min),
            rates.iter().copied().reduce(f64::max),
        ) {
            // Rounded alike, a range of one value reads as that value.
            let range = if format!("{lo:.0}") == format!("{hi:.0}") {
                format!("{lo:.0}")
            } else {
                format!("{lo:.0}–{hi:.0}")
            };
            s.push_str(&format!(
                "\nAchieved feed rates: {range} updates/s per stack (target {}).\n",
                self.rate
            ));
        }
        s
    }

    fn all(&self) -> impl Iterator<Item = &StackResult> {
        self.test1
            .iter()
            .flat_map(|r| r.dram.iter().chain(r.fsmem.iter()))
            .chain(
                self.test2
                    .iter()
                    .flat_map(|t| t.runs.iter())
                    .flat_map(|r| r.dram.iter().chain(r.fsmem.iter())),
            )
    }

    /// The targets next to what this run measured (reported, not
    /// asserted).
    fn targets(&self) -> String {
        let mut s = String::from("\nTargets (reported, not asserted):\n\n");
        let zl = self
            .zero_latency
            .as_ref()
            .map(|z| z.target())
            .unwrap_or_default();
        if self.test1.is_empty() && self.scale.is_none() && !zl.is_empty() {
            // A --zero-latency run alone: only what it measured.
            return format!("{s}- Zero-latency mode under 5 ms max: {zl}.\n");
        }
        let at = |tp: u64| self.test1.iter().find(|r| r.timers.tp_ms == tp);
        let rate = format!("at {} updates/s per stack", self.rate);
        // The study's scale, when it ran with a 50 ms tp timer.
        let scale50 = self
            .scale
            .as_ref()
            .filter(|sc| sc.runs.first().is_some_and(|r| r.timers.tp_ms == 50))
            .map(|sc| {
                format!(
                    "{} at {} updates/s on one DRAM stack preloaded with {} rows (`--scale`; the study's: 65M){}",
                    ms(sc.median(|r| r.max_latency_ms())),
                    count(sc.rate),
                    count(sc.median(|r| Some(r.prestress_load.rows as f64)).unwrap_or(0.0) as u64),
                    sc.runs_note()
                )
            });
        match (at(50), scale50) {
            (Some(r), sc) => s.push_str(&format!(
                "- Max tick latency with a 50 ms tp timer within 2× the timer (100 ms): {} (DRAM), {} (fsmem), {rate}{}; {}.\n",
                ms(median_of(&r.dram, |x| x.max_latency_ms())),
                ms(median_of(&r.fsmem, |x| x.max_latency_ms())),
                runs_note(r),
                sc.unwrap_or_else(|| "the target is at 48,000 updates/s".into())
            )),
            (None, Some(sc)) => s.push_str(&format!(
                "- Max tick latency with a 50 ms tp timer within 2× the timer (100 ms): {sc}.\n"
            )),
            (None, None) => s.push_str("- Max tick latency with a 50 ms tp timer: not measured (no 50 ms scenario).\n"),
        }
        if self.test1.is_empty() && self.scale.is_some() {
            // A --scale run alone: only what it measured.
            return s + &self.scale_targets();
        }
        let scale0 = self
            .scale
            .as_ref()
            .filter(|sc| sc.runs.first().is_some_and(|r| r.timers.tp_ms == 0))
            .map(|sc| {
                format!(
                    "; {} at {} updates/s on one DRAM stack (`--scale`){}",
                    ms(sc.median(|r| r.max_latency_ms())),
                    count(sc.rate),
                    sc.runs_note()
                )
            })
            .unwrap_or_default();
        let zl_clause = if zl.is_empty() {
            String::new()
        } else {
            format!("; {zl}")
        };
        match at(0) {
            Some(r) => s.push_str(&format!(
                "- Zero-latency mode under 5 ms max: {} (DRAM), {} (fsmem), {rate} (two stacks on the machine's cores at once{}){scale0}{zl_clause}.\n",
                ms(median_of(&r.dram, |x| x.max_latency_ms())),
                ms(median_of(&r.fsmem, |x| x.max_latency_ms())),
                if r.dram.len() > 1 {
                    format!(
                        "; the median of {} runs, every run: {} and {}",
                        r.dram.len(),
                        each_run_ms(&r.dram, |x| x.max_latency_ms()),
                        each_run_ms(&r.fsmem, |x| x.max_latency_ms())
                    )
                } else {
                    String::new()
                }
            )),
            None if !scale0.is_empty() || !zl.is_empty() => s.push_str(&format!(
                "- Zero-latency mode under 5 ms max{scale0}{zl_clause}.\n"
            )),
            None => s.push_str("- Zero-latency mode: not measured (no tp timer 0 scenario).\n"),
        }
        if let Some(r) = self.test1.first() {
            let rss = |x: &StackResult| x.monitor.rss_anon_bytes_max.map(|b| b as f64);
            let tab = |x: &StackResult| x.monitor.dram_bytes_max.map(|b| b as f64);
            let (d, f) = (median_of(&r.dram, rss), median_of(&r.fsmem, rss));
            let (dt, ft) = (median_of(&r.dram, tab), median_of(&r.fsmem, tab));
            let pct = |a: Option<f64>, b: Option<f64>| match (a, b) {
                (Some(a), Some(b)) if b > 0.0 => format!("{:.1}%", a * 100.0 / b),
                _ => "n/a".into(),
            };
            s.push_str(&format!(
                "- An fsmem rdb under 5% of the DRAM of a DRAM rdb: table data {} of the DRAM rdb's, anonymous RSS {} (the process's own baseline included).\n",
                pct(ft, dt),
                pct(f, d)
            ));
            let q: Vec<String> = self
                .test1
                .iter()
                .map(|r| {
                    let q = |x: &StackResult| x.monitor.asof_ms.mean;
                    factor(median_of(&r.fsmem, q), median_of(&r.dram, q))
                })
                .collect();
            s.push_str(&format!(
                "- fsmem query time no worse than 1.5× DRAM's (the study saw about 1.45×): fsmem ÷ DRAM = {} across the Test 1 scenarios.\n",
                q.join(", ")
            ));
        }
        let asof: Vec<(usize, Option<f64>, i64)> = self
            .all()
            .map(|r| {
                (
                    (r.prestress.prestress_rows) as usize,
                    r.monitor.asof_ms.mean,
                    r.monitor.asof_rows_last.unwrap_or(0),
                )
            })
            .collect();
        if let Some(best) = asof.iter().filter_map(|x| x.1).reduce(f64::min) {
            let worst = asof.iter().filter_map(|x| x.1).reduce(f64::max);
            s.push_str(&format!(
                "- The as-of monitor query under 5 ms on a prestressed rdb (the study saw about 47 ms): mean {}–{} here, on rdbs preloaded with {} rows (the study's: 65M).\n",
                ms(Some(best)),
                ms(worst),
                self.prestress
            ));
        }
        s + &self.scale_targets()
    }

    /// The targets line of the scale run's as-of query, if it ran.
    fn scale_targets(&self) -> String {
        let Some(sc) = &self.scale else {
            return String::new();
        };
        format!(
            "- The as-of monitor query under 5 ms at the study's scale: mean {}, max {}, on one DRAM rdb preloaded with {} rows (`--scale`; the study's: 65M) then fed {} updates/s for {} s{}.\n",
            ms(sc.median(|r| r.monitor.asof_ms.mean)),
            ms(sc.median(|r| r.monitor.asof_ms.max)),
            count(sc.median(|r| Some(r.prestress_load.rows as f64)).unwrap_or(0.0) as u64),
            count(sc.rate),
            sc.seconds,
            sc.runs_note()
        )
    }
}

/// " (the median of N runs)" after a Test 1 figure, when its scenario ran
/// more than once.
fn runs_note(r: &Test1Row) -> String {
    if r.dram.len() > 1 {
        format!(" (the median of {} runs)", r.dram.len())
    } else {
        String::new()
    }
}

/// The count with thousands separators.
fn count(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

impl ZeroLatencyRuns {
    fn median(runs: &[StackResult], f: impl Fn(&StackResult) -> Option<f64>) -> Option<f64> {
        crate::stats::Samples(runs.iter().filter_map(f).collect()).median()
    }

    /// Each run's max tick latency, in run order.
    fn maxima(runs: &[StackResult]) -> String {
        let v: Vec<String> = runs.iter().map(|r| ms(r.max_latency_ms())).collect();
        if v.is_empty() {
            "n/a".into()
        } else {
            v.join(", ")
        }
    }

    /// Runs per placement.
    fn runs(&self) -> usize {
        self.dram.len().max(self.fsmem.len())
    }

    /// The clause the targets line gets: the medians of the runs' maxima.
    fn target(&self) -> String {
        format!(
            "{} (DRAM), {} (fsmem) at {} updates/s, one stack at a time (`--zero-latency`: the median of {} each; every run: {} and {})",
            ms(Self::median(&self.dram, StackResult::max_latency_ms)),
            ms(Self::median(&self.fsmem, StackResult::max_latency_ms)),
            count(self.rate),
            runs_text(self.runs()),
            Self::maxima(&self.dram),
            Self::maxima(&self.fsmem),
        )
    }

    /// The zero-latency subsection of the stack section.
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "### Zero latency at {} updates/s\n\n\
             One stack at a time (`tickdb bench stack --zero-latency`), DRAM and fsmem rdbs alternating, {} each: \
             a zero tp timer (the tp publishes every update as it journals it, `--fsync {}`), the monitor polling every {} ms, \
             {} updates/s ({}trades:quotes 1:10, {} symbols, seed {}), each stack preloaded with {} rows, \
             then {} s measured. On {}, {}, in {:.0} s in all. Tick latency as in Test 1: the time the monitor's query answered − \
             the generation time of the newest row it saw, trade and quote together, max and mean over the polls.\n\n",
            count(self.rate),
            runs_text(self.runs()),
            self.fsync,
            self.timers.monitor_ms,
            count(self.rate),
            if self.rate == SCALE_RATE {
                "the Optane kdb+ study's rate; "
            } else {
                ""
            },
            self.symbols,
            self.seed,
            count(self.prestress),
            self.seconds,
            self.machine,
            self.date,
            self.wall_seconds,
        );
        s.push_str("| rdb | max tick latency, each run | max, median of the runs | mean, median of the runs | polls per run |\n|---|---|---|---|---|\n");
        for (label, runs) in [("DRAM", &self.dram), ("fsmem", &self.fsmem)] {
            let polls: Vec<String> = runs
                .iter()
                .map(|r| r.monitor.trade_latency_ms.n.to_string())
                .collect();
            s.push_str(&format!(
                "| {label} | {} | {} | {} | {} |\n",
                Self::maxima(runs),
                ms(Self::median(runs, StackResult::max_latency_ms)),
                ms(Self::median(runs, StackResult::mean_latency_ms)),
                polls.join(", ")
            ));
        }
        s.push_str(
            "\nA poll's latency includes the monitor's own query for the newest rows (an SQL statement over HTTP, \
             planned and run at every poll), the time since the newest trade was generated (one row in eleven is a \
             trade) and any wait for a core: the feed, the tp, the agg, the rdb and the monitor share the machine's cores.\n",
        );
        s
    }
}

/// "1 run", "3 runs".
fn runs_text(n: usize) -> String {
    format!("{n} run{}", if n == 1 { "" } else { "s" })
}

/// The rows of the scale subsection, in order (the tests check every one
/// is there).
pub const SCALE_ROWS: [&str; 11] = [
    "Prestress",
    "Rows at the end",
    "Bytes per row in memory: trade",
    "Bytes per row in memory: quote",
    "The agg's tables in memory",
    "Max tick latency",
    "Mean tick latency",
    "Max aggregated-row latency",
    "As-of query time",
    "RSS of the rdb (max)",
    "Achieved feed rate",
];

impl ScaleRun {
    /// One figure's median over the runs.
    pub fn median(&self, f: impl Fn(&StackResult) -> Option<f64>) -> Option<f64> {
        median_of(&self.runs, f)
    }

    fn samples(&self, f: impl Fn(&StackResult) -> Option<f64>) -> Samples {
        self.runs.iter().filter_map(f).collect()
    }

    /// " (the median of N runs)", when there were more than one.
    pub fn runs_note(&self) -> String {
        if self.runs.len() > 1 {
            format!(" (the median of {} runs)", self.runs.len())
        } else {
            String::new()
        }
    }

    /// The scale subsection of the stack section.
    pub fn markdown(&self) -> String {
        let mut s = String::from("### The study's scale on one stack\n\n");
        let Some(first) = self.runs.first() else {
            s.push_str("No run completed.\n");
            return s;
        };
        let t = first.timers;
        let load = &first.prestress_load;
        s.push_str(&format!(
            "One DRAM stack at the Optane kdb+ study's sizes (`tickdb bench stack --scale`): preloaded with {} rows (`--prestress`), then {} updates/s (trades:quotes 1:10, {} symbols, seed {}) for {} s with a {} ms tp timer (`--fsync {}`), the agg publishing every {} ms and the monitor polling every {} ms. The study ran four such stacks at once for 30 minutes on a 56-core server with 374 GiB; this is one stack on {}, {}, in {:.0} s in all. Bytes per row = a table's bytes in memory (its columns, symbol index and dictionary, and the unwritten rest of its newest chunk) ÷ its rows, from the rdb's /status once the feed stopped.\n\n",
            count(load.asked_rows.max(first.prestress.prestress_rows)),
            count(self.rate),
            self.symbols,
            self.seed,
            self.seconds,
            t.tp_ms,
            self.fsync,
            self.publish_ms,
            t.monitor_ms,
            self.machine,
            self.date,
            self.wall_seconds
        ));
        let n = self.runs.len();
        if n > 1 {
            s.push_str(&format!(
                "{} (`--runs`), one after the other, each on a stack started afresh with the same feed: a column for each run, then each figure's median (min–max) over the runs, `*` marking a spread over 1.3×.\n\n",
                runs_text(n)
            ));
        }
        for (k, r) in self.runs.iter().enumerate() {
            let load = &r.prestress_load;
            if let Some(why) = &load.stopped {
                s.push_str(&format!(
                    "**The prestress{} stopped short of {} rows**: {why}. The rdb held {} rows once what was in flight had arrived.\n\n",
                    if n > 1 { format!(" of run {}", k + 1) } else { String::new() },
                    count(load.asked_rows),
                    count(load.rows)
                ));
            }
        }
        let cells: Vec<[String; 11]> = self.runs.iter().map(|r| self.cells(r)).collect();
        let medians = self.medians();
        if n > 1 {
            let heads: Vec<String> = (1..=n).map(|k| format!("run {k}")).collect();
            s.push_str(&format!(
                "| | {} | median (min–max) |\n|---|{}---|\n",
                heads.join(" | "),
                "---|".repeat(n)
            ));
        } else {
            s.push_str("| | One DRAM stack |\n|---|---|\n");
        }
        for (i, name) in SCALE_ROWS.iter().enumerate() {
            let each: Vec<&str> = cells.iter().map(|c| c[i].as_str()).collect();
            if n > 1 {
                s.push_str(&format!(
                    "| {name} | {} | {} |\n",
                    each.join(" | "),
                    medians[i]
                ));
            } else {
                s.push_str(&format!("| {name} | {} |\n", each.join(" | ")));
            }
        }
        let polls: Vec<String> = self
            .runs
            .iter()
            .map(|r| r.monitor.polls.to_string())
            .collect();
        let failed: Vec<String> = self
            .runs
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.bars_ok)
            .map(|(k, r)| format!("run {}: {}", k + 1, r.bars_note))
            .collect();
        s.push_str(&format!(
            "\nLatency max / mean over {} polls{}; tick latency as in Test 1 (the time the monitor's query answered − the generation time of the newest row it saw). Aggregation check: {}.\n",
            polls.join(", "),
            if n > 1 { " (run by run)" } else { "" },
            if failed.is_empty() {
                format!(
                    "passed{} ({})",
                    if n > 1 { " in every run" } else { "" },
                    self.runs.iter().map(|r| r.bars_note.as_str()).collect::<Vec<_>>().join("; ")
                )
            } else {
                format!("FAILED ({})", failed.join("; "))
            }
        ));
        s
    }

    fn table<'a>(r: &'a StackResult, name: &str) -> Option<&'a TableFigures> {
        r.tables.iter().find(|x| x.name == name)
    }

    /// A table's bytes per row in memory.
    fn per_row(r: &StackResult, name: &str) -> Option<f64> {
        Self::table(r, name)?.bytes_per_row()
    }

    /// The agg's tables: every table but the ticks.
    fn aggs(r: &StackResult) -> impl Iterator<Item = &TableFigures> {
        r.tables
            .iter()
            .filter(|x| x.name != "trade" && x.name != "quote")
    }

    /// Trade and quote rows at the end.
    fn ticks(r: &StackResult) -> u64 {
        ["trade", "quote"]
            .iter()
            .filter_map(|n| Self::table(r, n))
            .map(|x| x.rows)
            .sum()
    }

    fn agg_bytes(r: &StackResult) -> u64 {
        Self::aggs(r).map(|x| x.dram_bytes + x.fsmem_bytes).sum()
    }

    /// Rows per second of the preload, until the rdb held them.
    fn preload_rate(r: &StackResult) -> Option<f64> {
        let l = &r.prestress_load;
        (l.rows > 0).then(|| l.rows as f64 / l.seconds.max(1e-9))
    }

    /// The medians column, row by row as `SCALE_ROWS`.
    fn medians(&self) -> [String; 11] {
        let c = |x: f64| count(x.round() as u64);
        let b = |x: f64| format!("{x:.1} B");
        let m = |x: f64| ms(Some(x));
        let d = |f: &dyn Fn(&StackResult) -> Option<f64>, fmt: fn(f64) -> String| {
            self.samples(f).describe(fmt)
        };
        [
            format!("{} rows/s", d(&Self::preload_rate, c)),
            d(&|r| Some(Self::ticks(r) as f64), c),
            d(&|r| Self::per_row(r, "trade"), b),
            d(&|r| Self::per_row(r, "quote"), b),
            d(&|r| Some(Self::agg_bytes(r) as f64), bytes),
            d(&|r| r.max_latency_ms(), m),
            d(&|r| r.mean_latency_ms(), m),
            d(&|r| r.max_agg_latency_ms(), m),
            format!(
                "mean {}, max {}",
                d(&|r| r.monitor.asof_ms.mean, m),
                d(&|r| r.monitor.asof_ms.max, m)
            ),
            format!(
                "{} in all, {} anonymous",
                d(&|r| r.monitor.rss_bytes_max.map(|x| x as f64), bytes),
                d(&|r| r.monitor.rss_anon_bytes_max.map(|x| x as f64), bytes)
            ),
            format!("{} updates/s", d(&|r| Some(r.feed.rate_achieved), c)),
        ]
    }

    /// One run's cells, row by row as `SCALE_ROWS`.
    fn cells(&self, r: &StackResult) -> [String; 11] {
        let load = &r.prestress_load;
        let per_row = |name: &str| match Self::table(r, name) {
            Some(x) => match x.bytes_per_row() {
                Some(b) => format!(
                    "{b:.1} B ({} for {} rows)",
                    bytes((x.dram_bytes + x.fsmem_bytes) as f64),
                    count(x.rows)
                ),
                None => "n/a (no rows)".into(),
            },
            None => "n/a (the rdb did not report it)".into(),
        };
        let ticks = |name: &str| Self::table(r, name).map(|x| x.rows).unwrap_or(0);
        let agg_names: Vec<&str> = Self::aggs(r).map(|x| x.name.as_str()).collect();
        let rows_end = Self::ticks(r);
        let prestress = match Self::preload_rate(r) {
            Some(rate) => format!(
                "{} rows in the rdb {:.1} s after the feed started ({} rows/s); the feed sent them in {:.1} s over ILP/HTTP",
                count(load.rows),
                load.seconds,
                // Rounded, as the medians column rounds it.
                count(rate.round() as u64),
                r.prestress.prestress_seconds
            ),
            None => "none".into(),
        };
        let m = &r.monitor;
        let lat = |st: &tickdb_stack::monitor::Stat| format!("{} / {}", ms(st.max), ms(st.mean));
        let rss = format!(
            "{} in all, {} anonymous{}",
            m.rss_bytes_max
                .map(|b| bytes(b as f64))
                .unwrap_or("n/a".into()),
            m.rss_anon_bytes_max
                .map(|b| bytes(b as f64))
                .unwrap_or("n/a".into()),
            match (m.rss_anon_bytes_max, rows_end) {
                (Some(a), n) if n > 0 => format!(
                    " ({:.1} B per trade or quote row, every table and the process included)",
                    a as f64 / n as f64
                ),
                _ => String::new(),
            }
        );
        [
            prestress,
            format!(
                "{} (trade {}, quote {})",
                count(rows_end),
                count(ticks("trade")),
                count(ticks("quote"))
            ),
            per_row("trade"),
            per_row("quote"),
            format!(
                "{} ({}: every published version of a bar is kept)",
                bytes(Self::agg_bytes(r) as f64),
                agg_names.join(", ")
            ),
            format!(
                "{} (trade {}, quote {})",
                ms(r.max_latency_ms()),
                ms(m.trade_latency_ms.max),
                ms(m.quote_latency_ms.max)
            ),
            format!(
                "{} (trade {}, quote {})",
                ms(r.mean_latency_ms()),
                ms(m.trade_latency_ms.mean),
                ms(m.quote_latency_ms.mean)
            ),
            format!(
                "{} (trade_1m / quote_1m max / mean: {}, {})",
                ms(r.max_agg_latency_ms()),
                lat(&m.agg_trade_latency_ms),
                lat(&m.agg_quote_latency_ms)
            ),
            format!(
                "mean {}, max {}, {} queries ({:.0} per minute) joining {}'s {} trades with their quotes",
                ms(m.asof_ms.mean),
                ms(m.asof_ms.max),
                m.asof_ms.n,
                m.queries_per_minute,
                if m.asof_sym.is_empty() { "one symbol" } else { m.asof_sym.as_str() },
                m.asof_rows_last.map(|n| count(n.max(0) as u64)).unwrap_or("n/a".into())
            ),
            rss,
            format!(
                "{} updates/s (target {})",
                count(r.feed.rate_achieved.round() as u64),
                count(self.rate)
            ),
        ]
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tickdb_stack::monitor::Stat;

    #[test]
    fn parses_timers_and_formats() {
        assert_eq!(
            parse_timers("300:50"),
            Ok(Timers {
                monitor_ms: 300,
                tp_ms: 50
            })
        );
        assert!(parse_timers("300").is_err());
        assert!(parse_timers("0:50").is_err());
        assert_eq!(ms(Some(0.5)), "0.50 ms");
        assert_eq!(ms(Some(1500.0)), "1.50 s");
        assert_eq!(bytes(2048.0), "2.0 KiB");
        assert_eq!(factor(Some(2.0), Some(4.0)), "0.500");
        assert_eq!(factor(Some(1e6), Some(1.0)), "1000000");
        assert_eq!(factor(Some(5.0), Some(0.0)), "∞");
        assert_eq!(factor(None, Some(1.0)), "n/a");
        assert_eq!(count(0), "0");
        assert_eq!(count(999), "999");
        assert_eq!(count(65_000_000), "65,000,000");
    }

    #[test]
    fn the_preload_stops_when_the_live_run_would_not_fit() {
        const G: u64 = 1 << 30;
        // 2M rows at 50 bytes each so far; 30M live rows need 1.5 GB.
        let one = [((100 << 20) + 100_000_000, 100 << 20, 2_000_000)];
        let live = 30e6;
        assert!(memory_short(10 * G, &one, live).is_none());
        let why = memory_short(2 * G, &one, live).unwrap();
        assert!(
            why.starts_with("at 2,000,000 rows 2.00 GiB") && why.contains("50 bytes"),
            "{why}"
        );
        // Two such stacks need twice that: 3 GB and the headroom.
        let two = [one[0], one[0]];
        assert!(memory_short(3 * G, &one, live).is_none());
        let why = memory_short(3 * G, &two, live).unwrap();
        assert!(why.contains("in each of 2 stacks"), "{why}");
        // Before the per-row figure means anything, only the headroom counts.
        let early = [(one[0].0, one[0].1, 1000)];
        assert!(memory_short(2 * G, &early, live).is_none());
        assert!(memory_short(G / 2, &early, live).is_some());
        assert!(memory_short(0, &[], live).is_none());
    }

    fn result(name: &str) -> StackResult {
        StackResult {
            name: name.into(),
            placement: Placement::Dram,
            timers: SCALE_TIMERS,
            monitor: MonitorSummary::default(),
            feed: FeedSummary::default(),
            prestress: FeedSummary::default(),
            prestress_load: PrestressLoad {
                asked_rows: 1000,
                rows: 1000,
                seconds: 2.0,
                ..Default::default()
            },
            tables: vec![
                TableFigures {
                    name: "trade".into(),
                    rows: 100,
                    dram_bytes: 3600,
                    fsmem_bytes: 0,
                },
                TableFigures {
                    name: "quote".into(),
                    rows: 900,
                    dram_bytes: 45_000,
                    fsmem_bytes: 0,
                },
            ],
            bars_ok: true,
            bars_note: "ok".into(),
        }
    }

    fn scale_run() -> ScaleRun {
        ScaleRun {
            rate: 48_000,
            seconds: 600.0,
            symbols: 2000,
            seed: 42,
            fsync: "never".into(),
            publish_ms: 100,
            machine: "m".into(),
            date: "d".into(),
            wall_seconds: 1.0,
            runs: vec![result("scale")],
        }
    }

    #[test]
    fn the_scale_subsection_has_every_row() {
        let sc = scale_run();
        let md = sc.markdown();
        for row in SCALE_ROWS {
            assert!(md.contains(&format!("| {row} |")), "{row}: {md}");
        }
        assert!(
            md.contains("| Bytes per row in memory: trade | 36.0 B"),
            "{md}"
        );
        assert!(
            md.contains("| Bytes per row in memory: quote | 50.0 B"),
            "{md}"
        );
        assert!(!md.contains("stopped short"));
        let mut short = sc.clone();
        short.runs[0].prestress_load.stopped = Some("no room".into());
        assert!(short
            .markdown()
            .contains("**The prestress stopped short of 1,000 rows**: no room."));
    }

    #[test]
    fn the_scale_subsection_gives_each_run_and_the_medians() {
        let mut sc = scale_run();
        // Three runs: the quote table's bytes per row 50, 40 and 60 B; the
        // as-of mean 100, 300 and 200 ms; the second run's bars wrong.
        let mut second = result("scale-2");
        second.tables[1].dram_bytes = 36_000;
        second.bars_ok = false;
        second.bars_note = "3 trades missing".into();
        let mut third = result("scale-3");
        third.tables[1].dram_bytes = 54_000;
        for (r, mean) in [&mut sc.runs[0], &mut second, &mut third]
            .into_iter()
            .zip([100.0, 300.0, 200.0])
        {
            r.monitor.asof_ms = Stat {
                n: 10,
                max: Some(2.0 * mean),
                mean: Some(mean),
            };
        }
        sc.runs.extend([second, third]);
        let md = sc.markdown();
        assert!(
            md.contains("| | run 1 | run 2 | run 3 | median (min–max) |\n|---|---|---|---|---|\n"),
            "{md}"
        );
        assert!(
            md.contains("| Bytes per row in memory: quote | 50.0 B (43.9 KiB for 900 rows) | 40.0 B (35.2 KiB for 900 rows) | 60.0 B (52.7 KiB for 900 rows) | 50.0 B (40.0 B–60.0 B) * |"),
            "{md}"
        );
        assert!(
            md.contains("| mean 200 ms (100 ms–300 ms) *, max 400 ms (200 ms–600 ms) * |"),
            "{md}"
        );
        assert!(
            md.contains("Aggregation check: FAILED (run 2: 3 trades missing)."),
            "{md}"
        );
        // The targets quote the medians, and say so.
        let report = StackReport {
            scale: Some(sc),
            ..report(Vec::new(), None)
        };
        let t = report.targets();
        assert!(
            t.contains("mean 200 ms, max 400 ms, on one DRAM rdb preloaded with 1,000 rows")
                && t.contains("(the median of 3 runs)"),
            "{t}"
        );
    }

    fn zero_latency_runs() -> ZeroLatencyRuns {
        let run = |name: &str, placement: Placement, max_ms: f64, mean_ms: f64| {
            let mut r = result(name);
            r.placement = placement;
            r.timers = ZERO_LATENCY_TIMERS;
            r.monitor.trade_latency_ms = Stat {
                n: 400,
                max: Some(max_ms),
                mean: Some(mean_ms),
            };
            r.monitor.quote_latency_ms = Stat {
                n: 400,
                max: Some(max_ms - 1.0),
                mean: Some(mean_ms),
            };
            r
        };
        ZeroLatencyRuns {
            rate: 48_000,
            seconds: 20.0,
            prestress: 1_000_000,
            symbols: 2000,
            seed: 42,
            fsync: "never".into(),
            timers: ZERO_LATENCY_TIMERS,
            machine: "m".into(),
            date: "d".into(),
            wall_seconds: 200.0,
            dram: vec![
                run("d1", Placement::Dram, 6.0, 1.0),
                run("d2", Placement::Dram, 4.0, 1.5),
                run("d3", Placement::Dram, 5.0, 2.0),
            ],
            fsmem: vec![
                run("f1", Placement::Fsmem, 3.0, 1.0),
                run("f2", Placement::Fsmem, 9.0, 3.0),
                run("f3", Placement::Fsmem, 4.5, 2.0),
            ],
        }
    }

    /// Every run is listed in run order, beside the medians of the runs'
    /// maxima and means; the targets line quotes the medians.
    #[test]
    fn the_zero_latency_subsection_lists_every_run_and_the_medians() {
        let zl = zero_latency_runs();
        let md = zl.markdown();
        assert!(
            md.contains("| DRAM | 6.00 ms, 4.00 ms, 5.00 ms | 5.00 ms | 1.50 ms | 400, 400, 400 |"),
            "{md}"
        );
        assert!(
            md.contains("| fsmem | 3.00 ms, 9.00 ms, 4.50 ms | 4.50 ms | 2.00 ms |"),
            "{md}"
        );
        assert!(md.contains("3 runs each"), "{md}");
        assert!(md.contains("(the Optane kdb+ study's rate; trades"), "{md}");
        let alone = StackReport {
            rate: 48_000,
            prestress: 1_000_000,
            zero_latency: Some(zl),
            ..report(Vec::new(), None)
        };
        let md = alone.markdown();
        assert!(!md.contains("### Test 1"), "{md}");
        assert!(
            md.contains("- Zero-latency mode under 5 ms max: 5.00 ms (DRAM), 4.50 ms (fsmem) at 48,000 updates/s"),
            "{md}"
        );
        assert!(!md.contains("50 ms tp timer"), "{md}");
    }

    /// A report of Tests 1 and 2 at the default sizes, on a made-up machine.
    fn report(test1: Vec<Test1Row>, test2: Option<Test2>) -> StackReport {
        StackReport {
            rate: 8000,
            seconds: 20.0,
            prestress: 1000,
            symbols: 2000,
            publish_ms: 100,
            seed: 42,
            fsync: "never".into(),
            test1,
            test2,
            scale: None,
            zero_latency: None,
            machine: "m".into(),
            date: "d".into(),
            mem_total_bytes: None,
            fsmem_fs: "ext4".into(),
            wall_seconds: 1.0,
        }
    }

    /// Tests 1 and 2 give the median over their runs, the comparison factor
    /// of the medians, and every run's max latency.
    #[test]
    fn tests_1_and_2_give_the_median_of_their_runs() {
        let zl = zero_latency_runs();
        let (dram, fsmem) = (zl.dram.clone(), zl.fsmem.clone());
        let report = report(
            vec![Test1Row {
                timers: ZERO_LATENCY_TIMERS,
                dram: dram.clone(),
                fsmem: fsmem.clone(),
            }],
            Some(Test2 {
                timers: ZERO_LATENCY_TIMERS,
                runs: vec![
                    Test2Run {
                        dram: vec![dram[0].clone(), dram[1].clone()],
                        fsmem: vec![fsmem[0].clone()],
                    },
                    Test2Run {
                        dram: vec![dram[1].clone(), dram[1].clone()],
                        fsmem: vec![fsmem[1].clone()],
                    },
                ],
                fsmem_count_reason: "as asked".into(),
            }),
        );
        let md = report.markdown();
        // DRAM maxima 6, 4, 5 and fsmem 3, 9, 4.5: medians 5 and 4.5.
        assert!(
            md.contains("| Max latency | 50 ms | 0 ms | 5.00 ms | 4.50 ms | 1.111 |"),
            "{md}"
        );
        assert!(
            md.contains("Each figure is the median over 3 runs of its scenario")
                && md.contains(
                    "50:0 DRAM 6.00 ms, 4.00 ms, 5.00 ms, fsmem 3.00 ms, 9.00 ms, 4.50 ms"
                ),
            "{md}"
        );
        // Test 2: the group's max per run (6 then 4; 3 then 9), then the
        // median of the runs.
        assert!(
            md.contains("| Max latency | 5.00 ms | 6.00 ms | 0.833 |"),
            "{md}"
        );
        assert!(
            md.contains("median over 2 runs of Test 2")
                && md.contains("DRAM 6.00 ms, 4.00 ms, fsmem 3.00 ms, 9.00 ms"),
            "{md}"
        );
        assert!(
            md.contains("### Test 2: 2 DRAM rdbs against 1 fsmem rdbs"),
            "{md}"
        );
        assert!(
            md.contains("- Zero-latency mode under 5 ms max: 5.00 ms (DRAM), 4.50 ms (fsmem), at 8000 updates/s per stack (two stacks on the machine's cores at once; the median of 3 runs, every run: 6.00 ms, 4.00 ms, 5.00 ms and 3.00 ms, 9.00 ms, 4.50 ms)"),
            "{md}"
        );
        assert!(md.contains("Aggregation check: in all 12 stacks"), "{md}");
    }

    #[test]
    fn every_heading_of_the_section_starts_its_own_paragraph() {
        let report = StackReport {
            scale: Some(scale_run()),
            zero_latency: Some(zero_latency_runs()),
            ..report(
                vec![Test1Row {
                    timers: ZERO_LATENCY_TIMERS,
                    dram: vec![result("dram")],
                    fsmem: vec![result("fsmem")],
                }],
                None,
            )
        };
        let md = report.markdown();
        assert!(md.contains("### The study's scale on one stack"), "{md}");
        assert!(md.contains("### Zero latency at 48,000 updates/s"), "{md}");
        for (at, _) in md.match_indices("\n#") {
            assert!(
                md[..at].ends_with('\n'),
                "no blank line before a heading:\n{md}"
            );
        }
    }
}
