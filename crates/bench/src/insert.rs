//! `tickdb bench insert`: the bulk-insert client of Zero-Impact Crash Recovery for kdb+. One connection
//! posts 10,000-row `trade` inserts (ILP over HTTP; each request is
//! answered once journaled under the fsync policy) until N rows are
//! acknowledged; throughput in MB/s and rows/s; the server's CPU and RSS
//! sampled every second from /proc.
//!
//! `insert` is the reusable part: it runs against any server already
//! started (an HTTP port and a process id), so a later benchmark can
//! measure what log forwarding costs the primary by running it with
//! forwarding off and on.

use crate::child;
use crate::error::{BenchError, Result};
use crate::http::HttpConn;
use crate::ingest::{wait_rows, QdbForm, Transport};
use crate::servers;
use crate::stats::{si, Samples};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Rows per request: the 10k bulk insert of Zero-Impact Crash Recovery for kdb+.
pub const BATCH_ROWS: usize = 10_000;
/// Distinct rows generated up front; longer runs send them again (the
/// client's own work stays out of the measurement).
pub const GENERATED_ROWS_MAX: u64 = 2_000_000;
/// The server is sampled this often.
pub const SAMPLE_EVERY: Duration = Duration::from_secs(1);
/// How long QuestDB may take to apply an acknowledged insert to its table.
const COUNT_TIMEOUT: Duration = Duration::from_secs(120);
/// MB as in the MB/s of Zero-Impact Crash Recovery for kdb+: 10^6 bytes.
const MB: f64 = 1e6;

/// A server to insert into.
pub struct InsertTarget {
    pub http_port: u16,
    /// Sampled for CPU and RSS when given.
    pub pid: Option<u32>,
}

#[derive(Debug, Clone)]
pub struct InsertOptions {
    pub rows: u64,
    pub seed: u64,
}

/// One sample of the server process.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct ProcSample {
    pub t_s: f64,
    /// CPU over the last interval, % of one core.
    pub cpu_pct: f64,
    pub rss_bytes: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct InsertResult {
    pub rows: u64,
    /// ILP bytes sent.
    pub bytes: u64,
    pub seconds: f64,
    pub mb_s: f64,
    pub rows_s: f64,
    pub samples: Vec<ProcSample>,
}

impl InsertResult {
    pub fn cpu_avg(&self) -> Option<f64> {
        let n = self.samples.len();
        (n > 0).then(|| self.samples.iter().map(|s| s.cpu_pct).sum::<f64>() / n as f64)
    }
    pub fn cpu_max(&self) -> Option<f64> {
        self.samples.iter().map(|s| s.cpu_pct).reduce(f64::max)
    }
    pub fn rss_max(&self) -> Option<u64> {
        self.samples.iter().map(|s| s.rss_bytes).max()
    }
}

/// Samples `pid` every SAMPLE_EVERY until `stop`; the last sample covers
/// the tail of the run.
pub(crate) fn sampler(pid: u32, stop: Arc<AtomicBool>, out: Arc<Mutex<Vec<ProcSample>>>) {
    use tickdb_stack::procfs::{cpu_seconds, proc_mem};
    let t0 = Instant::now();
    let mut last_t = t0;
    let mut last_cpu = cpu_seconds(pid).unwrap_or(0.0);
    loop {
        let mut stopped = false;
        let next = last_t + SAMPLE_EVERY;
        while Instant::now() < next {
            if stop.load(Ordering::Relaxed) {
                stopped = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let now = Instant::now();
        let (Some(cpu), Some(mem)) = (cpu_seconds(pid), proc_mem(pid)) else {
            return;
        };
        let dt = (now - last_t).as_secs_f64();
        if dt > 0.05 {
            if let Ok(mut v) = out.lock() {
                v.push(ProcSample {
                    t_s: (now - t0).as_secs_f64(),
                    cpu_pct: (cpu - last_cpu) / dt * 100.0,
                    rss_bytes: mem.rss_bytes,
                });
            }
        }
        last_t = now;
        last_cpu = cpu;
        if stopped {
            return;
        }
    }
}

/// Inserts `o.rows` trade rows into `target` over one HTTP connection in
/// BATCH_ROWS-row requests; returns once every row is acknowledged.
pub fn insert(target: &InsertTarget, o: &InsertOptions, pb: &ProgressBar) -> Result<InsertResult> {
    insert_into(target, o, "trade", pb)
}

/// `insert` into the table named `table`.
pub fn insert_into(
    target: &InsertTarget,
    o: &InsertOptions,
    table: &str,
    pb: &ProgressBar,
) -> Result<InsertResult> {
    let distinct = o.rows.min(GENERATED_ROWS_MAX) as usize;
    let batches = crate::ingest::generate(table, distinct, o.seed);
    let stop = Arc::new(AtomicBool::new(false));
    let samples = Arc::new(Mutex::new(Vec::new()));
    let sampling = target.pid.map(|pid| {
        let (stop, samples) = (stop.clone(), samples.clone());
        std::thread::spawn(move || sampler(pid, stop, samples))
    });
    let result = (|| -> Result<(u64, u64, f64)> {
        let mut conn = HttpConn::connect(target.http_port)?;
        let t0 = Instant::now();
        let (mut rows, mut bytes) = (0u64, 0u64);
        let mut i = 0usize;
        while rows < o.rows {
            child::check_interrupt()?;
            let b = &batches[i % batches.len()];
            i += 1;
            let n = b.iter().filter(|&&c| c == b'\n').count() as u64;
            // The last request may need only part of a batch.
            let (body, n) = if rows + n > o.rows {
                let want = (o.rows - rows) as usize;
                let cut = b
                    .iter()
                    .enumerate()
                    .filter(|(_, &c)| c == b'\n')
                    .nth(want - 1)
                    .map(|(k, _)| k + 1)
                    .unwrap_or(b.len());
                (&b[..cut], want as u64)
            } else {
                (&b[..], n)
            };
            let (status, answer) = conn.request("POST", "/write", body)?;
            if status != 204 {
                return Err(BenchError::Server(format!(
                    "POST /write: HTTP {status}: {}",
                    String::from_utf8_lossy(&answer)
                )));
            }
            rows += n;
            bytes += body.len() as u64;
            pb.set_position(rows);
        }
        Ok((rows, bytes, t0.elapsed().as_secs_f64()))
    })();
    stop.store(true, Ordering::Relaxed);
    if let Some(h) = sampling {
        let _ = h.join();
    }
    let (rows, bytes, seconds) = result?;
    let samples = samples.lock().map(|v| v.clone()).unwrap_or_default();
    Ok(InsertResult {
        rows,
        bytes,
        seconds,
        mb_s: bytes as f64 / MB / seconds.max(1e-9),
        rows_s: rows as f64 / seconds.max(1e-9),
        samples,
    })
}

#[derive(Debug, Clone)]
pub struct InsertBenchOptions {
    pub rows: u64,
    /// Timed inserts per server; each server's figures are its median run's.
    pub runs: usize,
    pub fsync: Vec<String>,
    pub questdb: bool,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct InsertCase {
    pub server: String,
    /// The median run by rows/s (the lower middle one of an even count).
    pub result: InsertResult,
    /// rows/s of every run, in run order.
    pub runs_rows_s: Vec<f64>,
    /// Bytes the tp journaled during the run (its /status), for the ratio
    /// to the raw disk.
    pub journal_bytes: Option<u64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct InsertReport {
    pub rows: u64,
    pub runs: usize,
    pub dd_mb_s: Option<f64>,
    pub cases: Vec<InsertCase>,
    pub questdb_note: String,
    pub machine: String,
    pub date: String,
}

fn tp_bytes(port: u16) -> Option<u64> {
    let (code, body) = HttpConn::connect(port)
        .ok()?
        .request("GET", "/status", b"")
        .ok()?;
    if code != 200 {
        return None;
    }
    let v: serde_json::Value = serde_json::from_slice(&body).ok()?;
    v["tp"]["bytes"].as_u64()
}

/// Runs the insert against `tickdb up` under each fsync policy, QuestDB
/// with the same client and data, and dd on the same file system.
pub fn run(bin: &Path, work: &Path, o: &InsertBenchOptions) -> Result<InsertReport> {
    let machine = crate::machine::Machine::probe(work);
    let dd_mb = (o.rows / 40_000).clamp(64, 1024);
    let dd_mb_s = match crate::disk::dd(work, dd_mb) {
        // `disk::dd` counts MiB; this report's MB are 10^6 bytes.
        Ok(v) => Some(v * crate::disk::MB / MB),
        Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
        Err(e) => {
            eprintln!("dd not measured: {e}");
            None
        }
    };
    let bar = |what: &str| {
        let pb = ProgressBar::new(o.rows);
        pb.set_style(
            ProgressStyle::with_template(&format!(
                "insert, {what} {{bar:30}} {{human_pos}}/{{human_len}} rows {{per_sec}}"
            ))
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        pb
    };
    let opts = InsertOptions {
        rows: o.rows,
        seed: o.seed,
    };
    let mut cases = Vec::new();
    let runs = o.runs.max(1);
    for policy in &o.fsync {
        let name = format!("tickdb up --fsync {policy}");
        let mut done = Vec::with_capacity(runs);
        for run in 1..=runs {
            let mut s = servers::start_tickdb(
                bin,
                work,
                "up",
                &format!("insert-{policy}"),
                &["--fsync", policy],
            )?;
            let before = tp_bytes(s.http);
            let target = InsertTarget {
                http_port: s.http,
                pid: s.child.pid(),
            };
            let pb = bar(&format!("{name}, run {run}/{runs}"));
            let r = insert(&target, &opts, &pb);
            pb.finish_and_clear();
            let r = r.and_then(|r| wait_count(s.http, &name, "trade", opts.rows).map(|()| r));
            let after = tp_bytes(s.http);
            s.child.stop(Duration::from_secs(10));
            let _ = std::fs::remove_dir_all(&s.data_dir);
            let journal_bytes = match (before, after) {
                (Some(b), Some(a)) => Some(a.saturating_sub(b)),
                _ => None,
            };
            done.push((r?, journal_bytes));
        }
        cases.push(median_case(name, done));
    }
    let mut questdb_note = String::new();
    if !o.questdb {
        questdb_note = "QuestDB not measured (--no-questdb).".into();
    } else if let Some(why) = servers::questdb_missing()? {
        questdb_note = format!("QuestDB not measured: {why}");
    } else {
        for form in [QdbForm::Default, QdbForm::Tuned] {
            let done = questdb_insert(work, form, &opts, runs, &bar)?;
            cases.push(median_case(
                format!("QuestDB {} {}", servers::QUESTDB_VERSION, form.describe()),
                done.into_iter().map(|r| (r, None)).collect(),
            ));
        }
    }
    Ok(InsertReport {
        rows: o.rows,
        runs,
        dd_mb_s,
        cases,
        questdb_note,
        machine: machine.summary(),
        date: crate::today_utc(),
    })
}

/// A server's case from its runs: the median run by rows/s, and every
/// run's rows/s.
fn median_case(server: String, mut done: Vec<(InsertResult, Option<u64>)>) -> InsertCase {
    let runs_rows_s = done.iter().map(|(r, _)| r.rows_s).collect();
    done.sort_by(|a, b| a.0.rows_s.total_cmp(&b.0.rows_s));
    let (result, journal_bytes) = done.swap_remove((done.len() - 1) / 2);
    InsertCase {
        server,
        result,
        runs_rows_s,
        journal_bytes,
    }
}

/// QuestDB in one form: a fresh server, one untimed insert into another
/// table (its JVM compiles the ingest path during the first), then `runs`
/// timed inserts, each into a table of its own whose count is checked once
/// QuestDB has applied it.
fn questdb_insert(
    work: &Path,
    form: QdbForm,
    opts: &InsertOptions,
    runs: usize,
    bar: &dyn Fn(&str) -> ProgressBar,
) -> Result<Vec<InsertResult>> {
    let mut q = servers::start_questdb_with(work, &form.server_conf(Transport::Http, 1))?;
    let result = (|| -> Result<Vec<InsertResult>> {
        let target = InsertTarget {
            http_port: q.http,
            pid: q.child.pid(),
        };
        let mut done = Vec::with_capacity(runs);
        for run in 0..=runs {
            let (table, what) = if run == 0 {
                ("warmup".to_string(), format!("{} warm-up", form.name()))
            } else {
                (
                    format!("trade_{run}"),
                    format!("{}, run {run}/{runs}", form.name()),
                )
            };
            form.prepare(q.http, &table)?;
            let pb = bar(&what);
            let r = insert_into(&target, opts, &table, &pb);
            pb.finish_and_clear();
            let r = r?;
            wait_count(q.http, form.name(), &table, opts.rows)?;
            if run > 0 {
                done.push(r);
            }
        }
        Ok(done)
    })();
    q.child.stop(Duration::from_secs(20));
    result
}

/// Waits until `table` holds the `rows` rows acknowledged (QuestDB applies
/// them asynchronously), and fails if it then holds another number.
fn wait_count(http: u16, who: &str, table: &str, rows: u64) -> Result<()> {
    let n = wait_rows(http, who, table, rows, Instant::now() + COUNT_TIMEOUT)?;
    if n as u64 != rows {
        return Err(BenchError::Server(format!(
            "{who}: {table} holds {n} rows after the insert; {rows} were acknowledged"
        )));
    }
    Ok(())
}

/// The rows of the insert table, first column (the tests check them).
pub const INSERT_ROWS_PREFIX: &str = "tickdb up --fsync";

impl InsertReport {
    pub fn markdown(&self) -> String {
        let mut s = format!(
            "The client of Zero-Impact Crash Recovery for kdb+: one connection inserts {} `trade` rows in {BATCH_ROWS}-row requests (ILP over HTTP, each answered once journaled), until every row is acknowledged, {} times per server: rows/s is the median (min–max; `*` marks a spread over 1.3×), and the other figures are the median run's. MB/s counts the ILP bytes sent (10^6 bytes); CPU (% of one core) and RSS of the server process are sampled every second from /proc. The server is `tickdb up` (tp + rdb in one process, like its kdb+ primary, which logs and holds the table). Peers measured in the same run: the raw disk (`dd conv=fdatasync`{}) for the journal's write rate, and QuestDB with the same client and rows in two forms, each a fresh server that first takes one untimed insert into another table (its JVM compiles the ingest path during it), then inserts each run into a table of its own (tickdb starts fresh for every run): as it ships, and tuned as its documentation prescribes for this load (the table created first with its symbol column sized to the 500 symbols, from the CREATE TABLE reference's \"Symbol capacity\"; its capacity planning guide calls ILP over HTTP \"optimal out-of-the box\"). After each insert the server's table must hold exactly the rows acknowledged (QuestDB applies acknowledged rows to its table asynchronously, so its count is checked once applied). rows/s ÷ QuestDB is against the better QuestDB form. Measured on {}, {}.\n\n",
            self.rows,
            self.runs,
            self.dd_mb_s
                .map(|v| format!(": {v:.0} MB/s"))
                .unwrap_or_else(|| ", not measured".into()),
            self.machine,
            self.date
        );
        s.push_str("| server | MB/s | rows/s | CPU avg | CPU max | RSS max | journal MB/s | journal ÷ dd | rows/s ÷ QuestDB |\n|---|---|---|---|---|---|---|---|---|\n");
        // Against the better of QuestDB's forms.
        let qdb = self
            .cases
            .iter()
            .filter(|c| c.server.starts_with("QuestDB"))
            .map(|c| c.result.rows_s)
            .reduce(f64::max);
        for c in &self.cases {
            let r = &c.result;
            let jmb = c.journal_bytes.map(|b| b as f64 / MB / r.seconds.max(1e-9));
            let pct = |x: Option<f64>| x.map(|v| format!("{v:.0}%")).unwrap_or("n/a".into());
            s.push_str(&format!(
                "| {} | {:.1} | {} | {} | {} | {} | {} | {} | {} |\n",
                c.server,
                r.mb_s,
                Samples(c.runs_rows_s.clone()).describe(si),
                pct(r.cpu_avg()),
                pct(r.cpu_max()),
                r.rss_max()
                    .map(|b| crate::stack::bytes(b as f64))
                    .unwrap_or("n/a".into()),
                jmb.map(|v| format!("{v:.1}")).unwrap_or("—".into()),
                match (jmb, self.dd_mb_s) {
                    (Some(j), Some(d)) if d > 0.0 => format!("{:.2}×", j / d),
                    _ => "—".into(),
                },
                match qdb {
                    Some(q) if q > 0.0 && !c.server.starts_with("QuestDB") =>
                        format!("{:.2}×", r.rows_s / q),
                    _ => "—".into(),
                }
            ));
        }
        if !self.questdb_note.is_empty() {
            s.push_str(&format!("\n{}\n", self.questdb_note));
        }
        s
    }
}
