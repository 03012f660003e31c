//! `tickdb monitor`: the monitor of the Optane kdb+ study. Every `--every-ms` it queries
//! an rdb over HTTP, like any client, and records:
//!
//! - trade and quote latency: the time the answer arrived minus the
//!   generation time (`time`) of the newest row the rdb shows. That is how
//!   stale the rdb is at the moment it is asked, generation → visible in a
//!   query, query time included (an upper bound). Per table, the run's max
//!   latency is the largest of these and its mean their average over the
//!   polls; with a tp timer of T ms and a steady feed they lie between the
//!   pipeline's latency L and L + T.
//! - aggregated-row latency: the same for `trade_1m` and `quote_1m`, from
//!   `last_time` (the newest tick folded into a bar), so it adds the agg's
//!   work, its publish interval and the second trip through the tp.
//! - the as-of join of all trades of one symbol with their prevailing
//!   quotes (`ASOF JOIN`, aggregated so that transferring rows does not
//!   dominate), timed end to end: the "average query time"; queries per
//!   minute counts how many of them completed.
//! - memory per domain (`dram`, `fsmem`) from the rdb's /status, and the
//!   rdb's RSS (from /status, or /proc/PID with --rdb-pid on the same host).
//!
//! It writes `monitor.csv` (one row per poll, flushed as it goes),
//! `summary.json`, and `latency.svg` and `memory.svg` into `--out`.
//! A poll never overlaps the previous one: if a poll takes longer than the
//! timer, the next starts at once (as a kdb+ timer does), which is what
//! makes queries per minute fall on a slow rdb.

use crate::clock::now_ns;
use crate::csv::{opt, CsvWriter};
use crate::error::{Result, StackError};
use crate::http::HttpClient;
use crate::plot::{Chart, Series};
use crate::procfs;
use crate::signal;
use indicatif::{ProgressBar, ProgressStyle};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub const CSV_FILE: &str = "monitor.csv";
pub const SUMMARY_FILE: &str = "summary.json";
pub const LATENCY_SVG: &str = "latency.svg";
pub const MEMORY_SVG: &str = "memory.svg";
/// Polls kept in memory for the plots and summary: a day at the Optane kdb+
/// study's 2 s timer. Beyond it the CSV keeps everything and the plots the
/// first ones.
pub const SAMPLES_MAX: usize = 50_000;
const MIB: f64 = 1024.0 * 1024.0;

pub const CSV_HEADER: [&str; 17] = [
    "unix_ms",
    "elapsed_s",
    "trade_latency_ms",
    "quote_latency_ms",
    "agg_trade_latency_ms",
    "agg_quote_latency_ms",
    "asof_ms",
    "asof_rows",
    "poll_ms",
    "trade_rows",
    "quote_rows",
    "new_trade_rows",
    "new_quote_rows",
    "dram_bytes",
    "fsmem_bytes",
    "rss_bytes",
    "rss_anon_bytes",
];

#[derive(clap::Args, Debug, Clone)]
pub struct MonitorArgs {
    /// The rdb's HTTP address (its --http-port), or several (the nodes of a
    /// failover group): the first that answers is polled, the next once it
    /// cannot be reached.
    #[arg(
        long,
        default_value = "127.0.0.1:8701",
        value_name = "HOST:PORT[,HOST:PORT...]"
    )]
    pub rdb: String,
    #[command(flatten)]
    pub auth: crate::client_auth::ClientAuthArgs,
    /// Poll the rdb this often (the Optane kdb+ study's monitor: every 2 s).
    #[arg(long, default_value_t = 2000)]
    pub every_ms: u64,
    /// Seconds to run (fractions allowed); without it, until Ctrl-C.
    #[arg(long, value_name = "SECONDS")]
    pub duration: Option<f64>,
    /// Directory for monitor.csv, summary.json, latency.svg, memory.svg.
    #[arg(long, default_value = "tickdb-monitor")]
    pub out: PathBuf,
    /// The rdb's process id: its RSS is read from /proc when the rdb's
    /// /status does not report it (the monitor then runs on the rdb's host).
    #[arg(long)]
    pub rdb_pid: Option<u32>,
    /// Symbol of the timed as-of join. Default: the most traded symbol at
    /// the first poll that sees trades.
    #[arg(long)]
    pub asof_sym: Option<String>,
    /// A name for this rdb in the plots and the summary.
    #[arg(long)]
    pub label: Option<String>,
}

/// Max and mean of one measure over the polls that had it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Stat {
    pub n: u64,
    pub max: Option<f64>,
    pub mean: Option<f64>,
}

impl Stat {
    pub fn of(values: impl Iterator<Item = Option<f64>>) -> Stat {
        let (mut n, mut sum, mut max) = (0u64, 0.0, f64::MIN);
        for v in values.flatten().filter(|v| v.is_finite()) {
            n += 1;
            sum += v;
            max = max.max(v);
        }
        if n == 0 {
            return Stat::default();
        }
        Stat {
            n,
            max: Some(max),
            mean: Some(sum / n as f64),
        }
    }
}

/// One poll.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Sample {
    pub unix_ms: i64,
    pub elapsed_s: f64,
    pub trade_latency_ms: Option<f64>,
    pub quote_latency_ms: Option<f64>,
    pub agg_trade_latency_ms: Option<f64>,
    pub agg_quote_latency_ms: Option<f64>,
    pub asof_ms: Option<f64>,
    pub asof_rows: Option<i64>,
    pub poll_ms: f64,
    pub trade_rows: Option<u64>,
    pub quote_rows: Option<u64>,
    pub new_trade_rows: Option<i64>,
    pub new_quote_rows: Option<i64>,
    pub dram_bytes: Option<u64>,
    pub fsmem_bytes: Option<u64>,
    pub rss_bytes: Option<u64>,
    pub rss_anon_bytes: Option<u64>,
}

impl Sample {
    fn csv_row(&self) -> Vec<String> {
        let u = |x: Option<u64>| x.map(|v| v.to_string()).unwrap_or_default();
        let i = |x: Option<i64>| x.map(|v| v.to_string()).unwrap_or_default();
        vec![
            self.unix_ms.to_string(),
            format!("{:.3}", self.elapsed_s),
            opt(self.trade_latency_ms, 3),
            opt(self.quote_latency_ms, 3),
            opt(self.agg_trade_latency_ms, 3),
            opt(self.agg_quote_latency_ms, 3),
            opt(self.asof_ms, 3),
            i(self.asof_rows),
            format!("{:.3}", self.poll_ms),
            u(self.trade_rows),
            u(self.quote_rows),
            i(self.new_trade_rows),
            i(self.new_quote_rows),
            u(self.dram_bytes),
            u(self.fsmem_bytes),
            u(self.rss_bytes),
            u(self.rss_anon_bytes),
        ]
    }
}

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct MonitorSummary {
    pub label: String,
    pub rdb: String,
    pub every_ms: u64,
    pub seconds: f64,
    pub polls: u64,
    pub errors: u64,
    pub trade_latency_ms: Stat,
    pub quote_latency_ms: Stat,
    pub agg_trade_latency_ms: Stat,
    pub agg_quote_latency_ms: Stat,
    /// The as-of join's time: its mean is the average query time.
    pub asof_ms: Stat,
    pub asof_sym: String,
    pub asof_rows_last: Option<i64>,
    /// As-of queries completed per minute.
    pub queries_per_minute: f64,
    pub dram_bytes_max: Option<u64>,
    pub dram_bytes_last: Option<u64>,
    pub fsmem_bytes_max: Option<u64>,
    pub fsmem_bytes_last: Option<u64>,
    pub rss_bytes_max: Option<u64>,
    pub rss_anon_bytes_max: Option<u64>,
    pub trade_rows_last: Option<u64>,
    pub quote_rows_last: Option<u64>,
    /// The machine's memory, for "% of DRAM".
    pub mem_total_bytes: Option<u64>,
    pub interrupted: bool,
}

impl MonitorSummary {
    pub fn from_samples(a: &MonitorArgs, samples: &[Sample], seconds: f64) -> MonitorSummary {
        let last = |f: fn(&Sample) -> Option<u64>| samples.iter().rev().find_map(f);
        let max = |f: fn(&Sample) -> Option<u64>| samples.iter().filter_map(f).max();
        let asof = Stat::of(samples.iter().map(|s| s.asof_ms));
        MonitorSummary {
            label: a.label.clone().unwrap_or_else(|| a.rdb.clone()),
            rdb: a.rdb.clone(),
            every_ms: a.every_ms,
            seconds,
            polls: samples.len() as u64,
            errors: 0,
            trade_latency_ms: Stat::of(samples.iter().map(|s| s.trade_latency_ms)),
            quote_latency_ms: Stat::of(samples.iter().map(|s| s.quote_latency_ms)),
            agg_trade_latency_ms: Stat::of(samples.iter().map(|s| s.agg_trade_latency_ms)),
            agg_quote_latency_ms: Stat::of(samples.iter().map(|s| s.agg_quote_latency_ms)),
            asof_ms: asof,
            asof_sym: String::new(),
            asof_rows_last: samples.iter().rev().find_map(|s| s.asof_rows),
            queries_per_minute: if seconds > 0.0 {
                asof.n as f64 * 60.0 / seconds
            } else {
                0.0
            },
            dram_bytes_max: max(|s| s.dram_bytes),
            dram_bytes_last: last(|s| s.dram_bytes),
            fsmem_bytes_max: max(|s| s.fsmem_bytes),
            fsmem_bytes_last: last(|s| s.fsmem_bytes),
            rss_bytes_max: max(|s| s.rss_bytes),
            rss_anon_bytes_max: max(|s| s.rss_anon_bytes),
            trade_rows_last: last(|s| s.trade_rows),
            quote_rows_last: last(|s| s.quote_rows),
            mem_total_bytes: procfs::mem_total_bytes(),
            interrupted: false,
        }
    }
}

/// A SQL string literal.
fn sql_str(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

/// `dataset[0][i]` as an i64, None when null or absent.
fn cell_i64(v: &serde_json::Value, i: usize) -> Option<i64> {
    v["dataset"][0][i].as_i64()
}

fn is_missing_table(e: &StackError) -> bool {
    matches!(e, StackError::Server(m) if m.contains("not found"))
}

/// The queries of one poll, and what they remember between polls.
struct Poller {
    http: HttpClient,
    rdb_pid: Option<u32>,
    asof_sym: Option<String>,
    newest_trade: i64,
    newest_quote: i64,
    /// False once the rdb said it has no agg tables.
    agg_tables: bool,
    started: Instant,
}

impl Poller {
    /// Newest `time` in `table` (only rows newer than `after` are read, so
    /// time-range pruning keeps it to the newest chunks) and the rows newer.
    fn newest(&mut self, table: &str, after: i64) -> Result<(Option<i64>, i64)> {
        let sql = format!(
            "select cast(max(time) as bigint), count(*) from {table} where time > to_timestamp_nanos({after})"
        );
        let v = self.http.exec(&sql)?;
        Ok((cell_i64(&v, 0), cell_i64(&v, 1).unwrap_or(0)))
    }

    fn newest_last_time(&mut self, table: &str) -> Result<Option<i64>> {
        let v = self.http.exec(&format!(
            "select cast(max(last_time) as bigint) from {table}"
        ))?;
        Ok(cell_i64(&v, 0))
    }

    fn pick_asof_sym(&mut self) -> Result<Option<String>> {
        let v = self.http.exec(
            "select sym, count(*) as n from trade group by sym order by n desc, sym limit 1",
        )?;
        Ok(v["dataset"][0][0].as_str().map(|s| s.to_string()))
    }

    /// Learns each table's newest time before the first sample. Without
    /// it the first poll's queries would read every preloaded row (nothing
    /// to be newer than yet), and its latency would time that scan instead
    /// of the rows that arrived since the last look, as every later poll's does.
    fn prime(&mut self) -> Result<()> {
        if let (Some(t), _) = self.newest("trade", self.newest_trade)? {
            self.newest_trade = t;
        }
        if let (Some(t), _) = self.newest("quote", self.newest_quote)? {
            self.newest_quote = t;
        }
        Ok(())
    }

    fn poll(&mut self) -> Result<Sample> {
        let t0 = Instant::now();
        let mut s = Sample {
            unix_ms: now_ns() / 1_000_000,
            elapsed_s: self.started.elapsed().as_secs_f64(),
            ..Default::default()
        };
        let ms = |ns: i64| ns as f64 / 1e6;

        let (newest, n) = self.newest("trade", self.newest_trade)?;
        if let Some(t) = newest {
            self.newest_trade = t;
        }
        s.new_trade_rows = Some(n);
        if self.newest_trade > 0 {
            s.trade_latency_ms = Some(ms(now_ns() - self.newest_trade));
        }
        let (newest, n) = self.newest("quote", self.newest_quote)?;
        if let Some(t) = newest {
            self.newest_quote = t;
        }
        s.new_quote_rows = Some(n);
        if self.newest_quote > 0 {
            s.quote_latency_ms = Some(ms(now_ns() - self.newest_quote));
        }

        if self.agg_tables {
            match self.newest_last_time("trade_1m") {
                Ok(t) => s.agg_trade_latency_ms = t.map(|t| ms(now_ns() - t)),
                Err(e) if is_missing_table(&e) => {
                    tracing::warn!("monitor: no agg tables on this rdb ({e}); not measuring aggregated latency");
                    self.agg_tables = false;
                }
                Err(e) => return Err(e),
            }
        }
        if self.agg_tables {
            s.agg_quote_latency_ms = self.newest_last_time("quote_1m")?.map(|t| ms(now_ns() - t));
        }

        if self.asof_sym.is_none() && self.newest_trade > 0 {
            self.asof_sym = self.pick_asof_sym()?;
            if let Some(sym) = &self.asof_sym {
                tracing::info!(
                    "monitor: timing the as-of join of {sym}'s trades with their quotes"
                );
            }
        }
        if let Some(sym) = self.asof_sym.clone() {
            let sql = format!(
                "select count(*), sum(q.bid) from trade t asof join quote q \
                 match_condition (t.time >= q.time) on t.sym = q.sym where t.sym = {}",
                sql_str(&sym)
            );
            let q0 = Instant::now();
            let v = self.http.exec(&sql)?;
            s.asof_ms = Some(q0.elapsed().as_secs_f64() * 1e3);
            s.asof_rows = cell_i64(&v, 0);
        }

        let st = self.http.get_json("/status")?;
        let mem = &st["memory"];
        s.dram_bytes = mem["dram"].as_u64();
        s.fsmem_bytes = mem["fsmem"].as_u64();
        s.trade_rows = st["tables"]["trade"]["rows"].as_u64();
        s.quote_rows = st["tables"]["quote"]["rows"].as_u64();
        let from_status = st["process"]["rss_bytes"]
            .as_u64()
            .map(|rss| procfs::ProcMem {
                rss_bytes: rss,
                rss_anon_bytes: st["process"]["rss_anon_bytes"].as_u64().unwrap_or(0),
                rss_file_bytes: st["process"]["rss_file_bytes"].as_u64().unwrap_or(0),
            });
        if let Some(m) = self.rdb_pid.and_then(procfs::proc_mem).or(from_status) {
            s.rss_bytes = Some(m.rss_bytes);
            s.rss_anon_bytes = Some(m.rss_anon_bytes);
        }
        s.poll_ms = t0.elapsed().as_secs_f64() * 1e3;
        Ok(s)
    }
}

fn charts(label: &str, samples: &[Sample]) -> (Chart, Chart) {
    let series = |name: &str, f: &dyn Fn(&Sample) -> Option<f64>| Series {
        name: name.to_string(),
        points: samples.iter().map(|s| (s.elapsed_s, f(s))).collect(),
    };
    let latency = Chart {
        title: format!("{label}: latency and query time"),
        x_label: "seconds".into(),
        y_label: "milliseconds".into(),
        series: vec![
            series("trade latency", &|s| s.trade_latency_ms),
            series("quote latency", &|s| s.quote_latency_ms),
            series("trade_1m latency", &|s| s.agg_trade_latency_ms),
            series("quote_1m latency", &|s| s.agg_quote_latency_ms),
            series("as-of join time", &|s| s.asof_ms),
        ],
    };
    let mib = |x: Option<u64>| x.map(|v| v as f64 / MIB);
    let memory = Chart {
        title: format!("{label}: memory"),
        x_label: "seconds".into(),
        y_label: "MiB".into(),
        series: vec![
            series("dram (tables)", &|s| mib(s.dram_bytes)),
            series("fsmem (tables)", &|s| mib(s.fsmem_bytes)),
            series("RSS", &|s| mib(s.rss_bytes)),
            series("RSS anonymous", &|s| mib(s.rss_anon_bytes)),
        ],
    };
    (latency, memory)
}

fn ms_text(x: Option<f64>) -> String {
    x.map(|v| format!("{v:.1} ms"))
        .unwrap_or_else(|| "-".into())
}

fn write_file(path: &Path, text: &str) -> Result<()> {
    std::fs::write(path, text).map_err(StackError::io(format!("writing {}", path.display())))
}

/// Runs the monitor until `--duration` ends or Ctrl-C; writes its files.
pub fn run(a: MonitorArgs) -> Result<MonitorSummary> {
    signal::install();
    if a.every_ms == 0 {
        return Err(StackError::BadInput("--every-ms must be at least 1".into()));
    }
    std::fs::create_dir_all(&a.out)
        .map_err(StackError::io(format!("creating {}", a.out.display())))?;
    let csv_path = a.out.join(CSV_FILE);
    let file = std::fs::File::create(&csv_path)
        .map_err(StackError::io(format!("creating {}", csv_path.display())))?;
    let mut csv = CsvWriter::new(std::io::BufWriter::new(file), &CSV_HEADER)
        .map_err(StackError::io("writing the CSV header"))?;
    let every = Duration::from_millis(a.every_ms);
    let duration = a.duration.map(Duration::from_secs_f64);
    let started = Instant::now();
    let mut p = Poller {
        http: HttpClient::new(&a.rdb).with_auth(a.auth.http_header()),
        rdb_pid: a.rdb_pid,
        asof_sym: a.asof_sym.clone(),
        newest_trade: 0,
        newest_quote: 0,
        agg_tables: true,
        started,
    };
    tracing::info!(
        "monitor: polling rdb {} every {} ms{}; writing {}",
        a.rdb,
        a.every_ms,
        a.duration
            .map(|d| format!(" for {d} s"))
            .unwrap_or_else(|| " until Ctrl-C".into()),
        a.out.display()
    );
    // A bar on a terminal only (indicatif draws nothing otherwise).
    let pb = match duration {
        Some(d) => ProgressBar::new(d.as_millis() as u64),
        None => ProgressBar::new_spinner(),
    };
    pb.set_style(
        ProgressStyle::with_template("monitor {bar:30} {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    if let Err(e) = p.prime() {
        // The first poll then reads every row, and says so in its latency.
        tracing::warn!("monitor: could not learn the tables' newest times before polling: {e}");
    }
    let mut samples: Vec<Sample> = Vec::new();
    let mut errors = 0u64;
    let mut next = started;
    let mut interrupted = false;
    loop {
        if duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        if !signal::sleep_until(next) {
            interrupted = true;
            break;
        }
        if duration.is_some_and(|d| started.elapsed() >= d) {
            break;
        }
        match p.poll() {
            Ok(s) => {
                csv.row(&s.csv_row())
                    .and_then(|_| csv.flush())
                    .map_err(StackError::io(format!("writing {}", csv_path.display())))?;
                pb.set_position(started.elapsed().as_millis() as u64);
                pb.set_message(format!(
                    "poll {}: trade {} quote {} as-of {}",
                    samples.len() + 1,
                    ms_text(s.trade_latency_ms),
                    ms_text(s.quote_latency_ms),
                    ms_text(s.asof_ms)
                ));
                if samples.len() < SAMPLES_MAX {
                    samples.push(s);
                }
            }
            Err(e) => {
                errors += 1;
                tracing::warn!("monitor: poll failed: {e}");
            }
        }
        next += every;
        let now = Instant::now();
        if next < now {
            // The poll took longer than the timer: start the next one now.
            next = now;
        }
    }
    pb.finish_and_clear();
    let seconds = started.elapsed().as_secs_f64();
    let mut summary = MonitorSummary::from_samples(&a, &samples, seconds);
    summary.errors = errors;
    summary.asof_sym = p.asof_sym.clone().unwrap_or_default();
    summary.interrupted = interrupted;
    let (lat, mem) = charts(&summary.label, &samples);
    write_file(&a.out.join(LATENCY_SVG), &lat.to_svg())?;
    write_file(&a.out.join(MEMORY_SVG), &mem.to_svg())?;
    let text = serde_json::to_string_pretty(&summary).unwrap_or_default();
    write_file(&a.out.join(SUMMARY_FILE), &text)?;
    println!("{text}");
    if samples.is_empty() && errors > 0 {
        return Err(StackError::Server(format!(
            "monitor: every poll of {} failed ({errors})",
            a.rdb
        )));
    }
    Ok(summary)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stats_and_summary() {
        let st = Stat::of([Some(1.0), None, Some(3.0), Some(f64::NAN)].into_iter());
        assert_eq!(
            st,
            Stat {
                n: 2,
                max: Some(3.0),
                mean: Some(2.0)
            }
        );
        assert_eq!(Stat::of(std::iter::empty()), Stat::default());
        let a = MonitorArgs {
            rdb: "h:1".into(),
            auth: Default::default(),
            every_ms: 100,
            duration: None,
            out: PathBuf::from("x"),
            rdb_pid: None,
            asof_sym: None,
            label: None,
        };
        let samples: Vec<Sample> = (0..30)
            .map(|i| Sample {
                elapsed_s: i as f64 * 0.1,
                trade_latency_ms: Some(i as f64),
                asof_ms: Some(2.0),
                dram_bytes: Some(100 + i),
                ..Default::default()
            })
            .collect();
        let s = MonitorSummary::from_samples(&a, &samples, 3.0);
        assert_eq!(s.queries_per_minute, 600.0);
        assert_eq!(s.trade_latency_ms.max, Some(29.0));
        assert_eq!(s.dram_bytes_max, Some(129));
        assert_eq!(s.dram_bytes_last, Some(129));
        assert_eq!(s.quote_latency_ms.n, 0);
        assert_eq!(s.label, "h:1");
    }

    #[test]
    fn csv_rows_match_the_header_and_plots_render() {
        let s = Sample {
            unix_ms: 5,
            trade_latency_ms: Some(1.5),
            ..Default::default()
        };
        let row = s.csv_row();
        assert_eq!(row.len(), CSV_HEADER.len());
        assert_eq!(row[2], "1.500");
        assert_eq!(row[3], "");
        let (l, m) = charts("rdb <1>", &[s.clone(), s]);
        assert!(l.to_svg().contains("rdb &lt;1&gt;"));
        assert!(m.to_svg().ends_with("</svg>\n"));
        assert_eq!(sql_str("O'Neil"), "'O''Neil'");
    }
}
