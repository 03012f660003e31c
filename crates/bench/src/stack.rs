//! `tickdb bench stack`: the Optane kdb+ study's test stack. Each stack is five
//! processes of this binary: `tickdb feed` → `tickdb tp` → `tickdb agg` →
//! `tickdb rdb` → `tickdb monitor`, on free loopback ports with its own
//! directory; the rdb holds its tables in DRAM or in fsmem (every table,
//! as the seed's `.mutil.tblToDotM each tables[]`). Every stack of a
//! scenario runs at the same time on the same data (same seed).
//!
//! - Test 1: for each (monitor timer, tp timer), one DRAM stack against
//!   one fsmem stack: max and mean latency, aggregated-row latency, bytes
//!   in memory, average query time and queries per minute, with the seed's
//!   comparison factor (the DRAM rdb of the same run is the reference).
//! - Test 2: N DRAM stacks (2), then as many fsmem stacks as fit in the
//!   DRAM those used: max latency, % of the machine's DRAM used, average
//!   query time and total queries per minute.
//!
//! Every child is killed on Ctrl-C or any failure (`child`).

use crate::child::{self, free_port, Child};
use crate::error::{BenchError, Result};
use crate::http::exec_scalar;
use crate::machine::Machine;
use crate::servers::{self, Tickdb};
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
/// The seed's tables placed in fsmem in an fsmem stack: all of them.
const FSMEM_TABLES: [&str; 5] = ["trade", "quote", "trade_1m", "quote_1m", "daily"];

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

/// What one stack measured.
#[derive(Debug, Clone, Serialize)]
pub struct StackResult {
    pub name: String,
    pub placement: Placement,
    pub timers: Timers,
    pub monitor: MonitorSummary,
    pub feed: FeedSummary,
    pub prestress: FeedSummary,
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

#[derive(Debug, Clone, Serialize)]
pub struct Test1Row {
    pub timers: Timers,
    pub dram: StackResult,
    pub fsmem: StackResult,
}

#[derive(Debug, Clone, Serialize)]
pub struct Test2 {
    pub timers: Timers,
    pub dram: Vec<StackResult>,
    pub fsmem: Vec<StackResult>,
    /// How the number of fsmem stacks was chosen.
    pub fsmem_count_reason: String,
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

/// Preloads every stack (in parallel) and waits until each rdb holds it.
fn prestress(bin: &Path, stacks: &mut [Running], o: &StackOptions, pb: &ProgressBar) -> Result<()> {
    if o.prestress == 0 {
        return Ok(());
    }
    pb.set_message(format!("prestress {} rows per stack", o.prestress));
    for r in stacks.iter_mut() {
        let mut cmd = feed_cmd(bin, r, o);
        cmd.args(["--prestress", &o.prestress.to_string(), "--duration", "0"])
            .arg("--summary")
            .arg(r.dir.join("prestress.json"));
        r.feed = Some(Child::spawn(
            &format!("{} prestress", r.spec.name),
            &mut cmd,
            &r.dir.join("prestress.log"),
        )?);
    }
    for r in stacks.iter_mut() {
        let mut f = r.feed.take().expect("spawned above");
        let st = f.wait_exit(PRESTRESS_TIMEOUT)?;
        if !st.success() {
            return Err(BenchError::Server(format!(
                "{} prestress failed ({st}):\n{}",
                r.spec.name,
                child::log_tail(&f.log)
            )));
        }
    }
    let t0 = Instant::now();
    for r in stacks.iter_mut() {
        loop {
            child::check_interrupt()?;
            r.rdb.check_alive()?;
            let st = status(r.rdb_http)?;
            let rows = st["tables"]["trade"]["rows"].as_u64().unwrap_or(0)
                + st["tables"]["quote"]["rows"].as_u64().unwrap_or(0);
            if rows >= o.prestress {
                break;
            }
            if t0.elapsed() > PRESTRESS_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "{}: the rdb holds {rows} of {} prestress rows",
                    r.spec.name, o.prestress
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
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
    prestress(bin, &mut stacks, o, pb)?;
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
    for r in stacks.iter_mut() {
        let monitor: MonitorSummary = read_json(&r.dir.join("monitor").join(SUMMARY_FILE))?;
        let feed: FeedSummary = read_json(&r.dir.join("feed.json"))?;
        let prestress: FeedSummary = if o.prestress > 0 {
            read_json(&r.dir.join("prestress.json"))?
        } else {
            FeedSummary::default()
        };
        let (bars_ok, bars_note) = bars_check(r);
        child::check_interrupt()?;
        out.push(StackResult {
            name: r.spec.name.clone(),
            placement: r.spec.placement,
            timers: r.spec.timers,
            monitor,
            feed,
            prestress,
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
    let do1 = o.tests.contains(&1);
    let do2 = o.tests.contains(&2);
    let scenarios = if do1 { o.timers.len() } else { 0 } + if do2 { 2 } else { 0 };
    let pb = ProgressBar::new((scenarios as f64 * o.seconds * 1000.0) as u64);
    pb.set_style(
        ProgressStyle::with_template("bench stack {bar:30} {percent}% {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut test1 = Vec::new();
    if do1 {
        for (i, t) in o.timers.iter().enumerate() {
            let tag = format!("t1-{}-m{}-tp{}", i + 1, t.monitor_ms, timer_name(t.tp_ms));
            let mut res = scenario(
                bin,
                work,
                vec![
                    Spec {
                        name: format!("{tag}-dram"),
                        placement: Placement::Dram,
                        timers: *t,
                    },
                    Spec {
                        name: format!("{tag}-fsmem"),
                        placement: Placement::Fsmem,
                        timers: *t,
                    },
                ],
                o,
                &pb,
            )?;
            let fsmem = res.pop().expect("two stacks");
            let dram = res.pop().expect("two stacks");
            test1.push(Test1Row {
                timers: *t,
                dram,
                fsmem,
            });
        }
    }
    let mut test2 = None;
    if do2 {
        let t = o.test2_timers;
        let specs = |placement: Placement, n: usize| -> Vec<Spec> {
            (0..n)
                .map(|i| Spec {
                    name: format!("t2-{}-{}", placement.name(), i + 1),
                    placement,
                    timers: t,
                })
                .collect()
        };
        let dram = scenario(
            bin,
            work,
            specs(Placement::Dram, o.dram_rdbs.max(1)),
            o,
            &pb,
        )?;
        let (n, reason) = fsmem_count(o, &dram, &test1);
        let fsmem = scenario(bin, work, specs(Placement::Fsmem, n), o, &pb)?;
        test2 = Some(Test2 {
            timers: t,
            dram,
            fsmem,
            fsmem_count_reason: reason,
        });
    }
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
        .filter_map(|r| r.fsmem.monitor.rss_anon_bytes_max)
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

/// The seed's comparison factor: `better / worse` oriented so that above
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
                let (d, f) = (&r.dram, &r.fsmem);
                let m = r.timers.monitor_ms;
                let t = r.timers.tp_ms;
                let row = |name: &str, dv: String, fv: String, c: String| {
                    format!("| {name} | {m} ms | {t} ms | {dv} | {fv} | {c} |\n")
                };
                s.push_str(&row(
                    TEST1_ROWS[0],
                    ms(d.max_latency_ms()),
                    ms(f.max_latency_ms()),
                    factor(d.max_latency_ms(), f.max_latency_ms()),
                ));
                s.push_str(&row(
                    TEST1_ROWS[1],
                    ms(d.mean_latency_ms()),
                    ms(f.mean_latency_ms()),
                    factor(d.mean_latency_ms(), f.mean_latency_ms()),
                ));
                s.push_str(&row(
                    TEST1_ROWS[2],
                    ms(d.max_agg_latency_ms()),
                    ms(f.max_agg_latency_ms()),
                    factor(d.max_agg_latency_ms(), f.max_agg_latency_ms()),
                ));
                let db = d.monitor.dram_bytes_max.map(|b| b as f64);
                let fb = f.monitor.dram_bytes_max.map(|b| b as f64);
                s.push_str(&row(
                    TEST1_ROWS[3],
                    db.map(bytes).unwrap_or("n/a".into()),
                    fb.map(bytes).unwrap_or("n/a".into()),
                    factor(db, fb),
                ));
                let da = d.monitor.rss_anon_bytes_max.map(|b| b as f64);
                let fa = f.monitor.rss_anon_bytes_max.map(|b| b as f64);
                s.push_str(&row(
                    TEST1_ROWS[4],
                    da.map(bytes).unwrap_or("n/a".into()),
                    fa.map(bytes).unwrap_or("n/a".into()),
                    factor(da, fa),
                ));
                s.push_str(&row(
                    TEST1_ROWS[5],
                    ms(d.monitor.asof_ms.mean),
                    ms(f.monitor.asof_ms.mean),
                    factor(d.monitor.asof_ms.mean, f.monitor.asof_ms.mean),
                ));
                s.push_str(&row(
                    TEST1_ROWS[6],
                    format!("{:.0}", d.monitor.queries_per_minute),
                    format!("{:.0}", f.monitor.queries_per_minute),
                    factor(
                        Some(f.monitor.queries_per_minute),
                        Some(d.monitor.queries_per_minute),
                    ),
                ));
            }
            s.push_str(&format!("\n{FACTOR_NOTE}\n\n"));
        }
        if let Some(t2) = &self.test2 {
            let (nd, nf) = (t2.dram.len(), t2.fsmem.len());
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
            let (d, f) = (&t2.dram[..], &t2.fsmem[..]);
            let pctf = |x: Option<f64>| x.map(|v| format!("{v:.3}%")).unwrap_or("n/a".into());
            let lines = [
                (
                    TEST2_ROWS[0],
                    ms(lat(d)),
                    ms(lat(f)),
                    factor(lat(d), lat(f)),
                ),
                (
                    TEST2_ROWS[1],
                    ms(agg(d)),
                    ms(agg(f)),
                    factor(agg(d), agg(f)),
                ),
                (
                    TEST2_ROWS[2],
                    pctf(pct(d)),
                    pctf(pct(f)),
                    factor(pct(d), pct(f)),
                ),
                (
                    TEST2_ROWS[3],
                    bytes(tab(d).unwrap_or(0.0)),
                    bytes(tab(f).unwrap_or(0.0)),
                    factor(tab(d), tab(f)),
                ),
                (TEST2_ROWS[4], ms(q(d)), ms(q(f)), factor(q(d), q(f))),
                (
                    TEST2_ROWS[5],
                    format!("{:.0}", qpm(d).unwrap_or(0.0)),
                    format!("{:.0}", qpm(f).unwrap_or(0.0)),
                    factor(qpm(f), qpm(d)),
                ),
            ];
            for (name, a, b, c) in lines {
                s.push_str(&format!("| {name} | {a} | {b} | {c} |\n"));
            }
            s.push_str(&format!(
                "\n{FACTOR_NOTE} Total queries per minute adds up every rdb's monitor.\n\n"
            ));
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
            s.push_str(&format!(
                "\nAchieved feed rates: {lo:.0}–{hi:.0} updates/s per stack (target {}).\n",
                self.rate
            ));
        }
        s.push_str(&self.targets());
        s
    }

    fn all(&self) -> impl Iterator<Item = &StackResult> {
        self.test1.iter().flat_map(|r| [&r.dram, &r.fsmem]).chain(
            self.test2
                .iter()
                .flat_map(|t| t.dram.iter().chain(t.fsmem.iter())),
        )
    }

    /// The targets next to what this run measured (reported, not
    /// asserted).
    fn targets(&self) -> String {
        let mut s = String::from("\nTargets (reported, not asserted):\n\n");
        let at = |tp: u64| self.test1.iter().find(|r| r.timers.tp_ms == tp);
        let rate = format!("at {} updates/s per stack", self.rate);
        match at(50) {
            Some(r) => s.push_str(&format!(
                "- Max tick latency with a 50 ms tp timer within 2× the timer (100 ms): {} (DRAM), {} (fsmem), {rate}; the target is at 48,000 updates/s.\n",
                ms(r.dram.max_latency_ms()),
                ms(r.fsmem.max_latency_ms())
            )),
            None => s.push_str("- Max tick latency with a 50 ms tp timer: not measured (no 50 ms scenario).\n"),
        }
        match at(0) {
            Some(r) => s.push_str(&format!(
                "- Zero-latency mode under 5 ms max: {} (DRAM), {} (fsmem), {rate}.\n",
                ms(r.dram.max_latency_ms()),
                ms(r.fsmem.max_latency_ms())
            )),
            None => s.push_str("- Zero-latency mode: not measured (no tp timer 0 scenario).\n"),
        }
        if let Some(r) = self.test1.first() {
            let d = r.dram.monitor.rss_anon_bytes_max.map(|b| b as f64);
            let f = r.fsmem.monitor.rss_anon_bytes_max.map(|b| b as f64);
            let dt = r.dram.monitor.dram_bytes_max.map(|b| b as f64);
            let ft = r.fsmem.monitor.dram_bytes_max.map(|b| b as f64);
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
                .map(|r| factor(r.fsmem.monitor.asof_ms.mean, r.dram.monitor.asof_ms.mean))
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
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
    }
}
