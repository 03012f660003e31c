//! ILP ingest rows/s over TCP and HTTP with 1 and 4 connections, 10k-row
//! batches, against QuestDB in the same run, in its default form and in the
//! form its documentation prescribes for this load (`QdbForm::Tuned`). One
//! client (this module) and the same pre-generated rows for every server. A
//! run ends when the server answers `select count(*)` with every row: the
//! time to be queryable. Every run's table is then checked against the rows
//! sent (count and `sum(size)`), so a server that dropped or changed rows
//! fails the benchmark instead of being timed.

use crate::child;
use crate::error::{BenchError, Result};
use crate::http::{exec_json, exec_scalar, HttpConn};
use crate::servers;
use crate::stats::{ratio, si, Samples};
use indicatif::{ProgressBar, ProgressStyle};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::io::Write;
use std::net::TcpStream;
use std::path::Path;
use std::time::{Duration, Instant};

/// Rows per request / per TCP write: the bulk-insert client of
/// Zero-Impact Crash Recovery for kdb+.
pub const BATCH_ROWS: usize = 10_000;
const SYMBOLS: usize = 500;
/// The tuned QuestDB table's `SYMBOL CAPACITY`: QuestDB wants a power of two
/// at or above the column's distinct values (SYMBOLS); its default is 256.
const QDB_SYMBOL_CAPACITY: usize = 512;
/// How long a run may take to become fully queryable before it fails.
const COUNT_TIMEOUT: Duration = Duration::from_secs(300);

#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Transport {
    Tcp,
    Http,
}

impl Transport {
    pub fn name(self) -> &'static str {
        match self {
            Transport::Tcp => "TCP",
            Transport::Http => "HTTP",
        }
    }
}

pub struct IngestOptions {
    pub rows: usize,
    pub repeats: usize,
    pub conns: Vec<usize>,
    pub seed: u64,
    pub questdb: bool,
}

/// What a server must hold after a run: the rows sent and their `size` sum.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Expected {
    pub rows: usize,
    pub size_sum: i64,
}

/// `rows` trade rows as ILP lines for `table`, in batches of BATCH_ROWS.
pub fn generate(table: &str, rows: usize, seed: u64) -> Vec<Vec<u8>> {
    generate_checked(table, rows, seed).0
}

/// `generate`, with what the server must hold once every batch is in.
pub fn generate_checked(table: &str, rows: usize, seed: u64) -> (Vec<Vec<u8>>, Expected) {
    let mut rng = StdRng::seed_from_u64(seed);
    let t0: i64 = 1_700_000_000_000_000_000;
    let mut out = Vec::with_capacity(rows.div_ceil(BATCH_ROWS));
    let mut price = vec![100.0f64; SYMBOLS];
    let mut size_sum = 0i64;
    let mut i = 0usize;
    while i < rows {
        let n = BATCH_ROWS.min(rows - i);
        let mut b = Vec::with_capacity(n * 64);
        for k in 0..n {
            let s = rng.random_range(0..SYMBOLS);
            price[s] = (price[s] + rng.random_range(-5..=5) as f64 * 0.01).max(0.01);
            let size: i64 = rng.random_range(1..=1000);
            size_sum += size;
            let _ = writeln!(
                b,
                "{table},sym=S{s:03} price={:.2},size={size}i {}",
                price[s],
                t0 + (i + k) as i64 * 1000
            );
        }
        out.push(b);
        i += n;
    }
    (out, Expected { rows, size_sum })
}

/// The server a run writes to: its name in errors, its HTTP and ILP ports.
struct Endpoint<'a> {
    who: &'a str,
    http: u16,
    ilp: u16,
}

/// What a run sends: the batches of ILP lines for `table`, and what the
/// table must hold once they are in.
struct Load<'a> {
    table: &'a str,
    batches: &'a [Vec<u8>],
    want: Expected,
}

/// Sends every batch over `conns` connections, waits until the table holds
/// every row (the clock stops there), then checks it against what was sent
/// (`check_table`).
fn one_run(to: &Endpoint, transport: Transport, conns: usize, load: &Load) -> Result<f64> {
    let (who, http, ilp) = (to.who, to.http, to.ilp);
    let (table, batches, want) = (load.table, load.batches, load.want);
    let t0 = Instant::now();
    let results: Vec<Result<()>> = std::thread::scope(|s| {
        let hs: Vec<_> = (0..conns)
            .map(|c| {
                s.spawn(move || -> Result<()> {
                    let mine = batches.iter().skip(c).step_by(conns);
                    match transport {
                        Transport::Tcp => {
                            let mut sock = TcpStream::connect(("127.0.0.1", ilp))
                                .map_err(BenchError::io("ILP TCP connect"))?;
                            sock.set_nodelay(true).map_err(BenchError::io("nodelay"))?;
                            for b in mine {
                                sock.write_all(b).map_err(BenchError::io("ILP TCP write"))?;
                            }
                            sock.flush().map_err(BenchError::io("ILP TCP flush"))?;
                        }
                        Transport::Http => {
                            let mut conn = HttpConn::connect(http)?;
                            for b in mine {
                                let (status, body) = conn.request("POST", "/write", b)?;
                                if status != 204 {
                                    return Err(BenchError::Server(format!(
                                        "POST /write: HTTP {status}: {}",
                                        String::from_utf8_lossy(&body)
                                    )));
                                }
                            }
                        }
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err(BenchError::Server("a client thread panicked".into())))
            })
            .collect()
    });
    for r in results {
        r?;
    }
    wait_rows(http, who, table, want.rows as u64, t0 + COUNT_TIMEOUT)?;
    let rows_s = want.rows as f64 / t0.elapsed().as_secs_f64();
    let sql = format!("select count(*), sum(size) from {table}");
    check_table(&exec_json(http, &sql)?, who, table, want)?;
    Ok(rows_s)
}

/// Polls `select count(*)` until `table` holds at least `rows` rows, and
/// answers that count; fails at `deadline`, naming the last answer. An error
/// answer is polled again: QuestDB answers "table does not exist" until its
/// first commit.
pub(crate) fn wait_rows(
    http: u16,
    who: &str,
    table: &str,
    rows: u64,
    deadline: Instant,
) -> Result<i64> {
    let sql = format!("select count(*) from {table}");
    loop {
        child::check_interrupt()?;
        let last = match exec_scalar(http, &sql) {
            Ok(n) if n >= 0 && n as u64 >= rows => return Ok(n),
            Ok(n) => format!("{n} rows"),
            Err(e) => e.to_string(),
        };
        if Instant::now() > deadline {
            return Err(BenchError::Server(format!(
                "{who}: {table} did not come to hold the {rows} rows sent in time; last answer: {last}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Checks the answer to `select count(*), sum(size)` against what was sent:
/// the same count and `sum(size)` (the timed wait only saw the count reach
/// it).
fn check_table(answer: &serde_json::Value, who: &str, table: &str, want: Expected) -> Result<()> {
    let row = &answer["dataset"][0];
    let (n, sum) = (row[0].as_i64(), row[1].as_i64());
    if n != Some(want.rows as i64) || sum != Some(want.size_sum) {
        return Err(BenchError::Server(format!(
            "{who}: {table} holds count {} and sum(size) {} after the run; {} rows with sum(size) {} were sent",
            row[0], row[1], want.rows, want.size_sum
        )));
    }
    Ok(())
}

/// How QuestDB is set up for a case.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum QdbForm {
    /// As it ships: the table auto-created by ILP, default thread pools.
    Default,
    /// What QuestDB's documentation prescribes for this load: the table
    /// created before the run with its symbol column sized to its distinct
    /// values (CREATE TABLE reference, "Symbol capacity"), and over TCP one
    /// ILP I/O worker thread per connection (ILP TCP receiver, "Capacity
    /// planning": "The ideal ratio is 1:1"). For ILP over HTTP its capacity
    /// planning guide says ILP "is optimal out-of-the box".
    Tuned,
}

impl QdbForm {
    pub fn name(self) -> &'static str {
        match self {
            QdbForm::Default => "QuestDB default",
            QdbForm::Tuned => "QuestDB tuned",
        }
    }

    /// How the form is set up, in a report's words.
    pub fn describe(self) -> &'static str {
        match self {
            QdbForm::Default => "(default: WAL, no fsync on commit)",
            QdbForm::Tuned => "(tuned: table created first, `sym SYMBOL CAPACITY 512`)",
        }
    }

    /// Lines for server.conf.
    pub fn server_conf(self, t: Transport, conns: usize) -> String {
        match (self, t) {
            (QdbForm::Tuned, Transport::Tcp) => format!("line.tcp.io.worker.count={conns}\n"),
            _ => String::new(),
        }
    }

    /// Prepares `table` before its run.
    pub fn prepare(self, http: u16, table: &str) -> Result<()> {
        if self == QdbForm::Tuned {
            // The schema ILP would create (a WAL table partitioned by day,
            // `timestamp` designated), with the symbol capacity given.
            exec_json(
                http,
                &format!(
                    "CREATE TABLE {table} (sym SYMBOL CAPACITY {QDB_SYMBOL_CAPACITY}, price DOUBLE, \
                     size LONG, timestamp TIMESTAMP) TIMESTAMP(timestamp) PARTITION BY DAY WAL"
                ),
            )?;
        }
        Ok(())
    }
}

#[derive(Default)]
pub struct CaseResult {
    pub transport: &'static str,
    pub conns: usize,
    pub never: Samples,
    pub always: Samples,
    pub questdb: Samples,
    pub questdb_tuned: Samples,
}

impl CaseResult {
    /// The better of QuestDB's two forms, by median, and its name.
    pub fn questdb_best(&self) -> Option<(f64, &'static str)> {
        let d = self.questdb.median().map(|m| (m, "default"));
        let t = self.questdb_tuned.median().map(|m| (m, "tuned"));
        match (d, t) {
            (Some(d), Some(t)) => Some(if t.0 > d.0 { t } else { d }),
            (d, t) => d.or(t),
        }
    }
}

pub struct IngestReport {
    pub cases: Vec<CaseResult>,
    pub rows: usize,
    pub repeats: usize,
    pub questdb_note: String,
}

/// One QuestDB form for one case: a fresh server set up for it, one
/// untimed run (the JVM compiles its ingest path during the first), then
/// `repeats` timed runs, each into a new table.
fn questdb_case(
    work: &Path,
    form: QdbForm,
    t: Transport,
    conns: usize,
    o: &IngestOptions,
    samples: &mut Samples,
    pb: &ProgressBar,
) -> Result<()> {
    let mut q = servers::start_questdb_with(work, &form.server_conf(t, conns))?;
    let result = (|| -> Result<()> {
        for run in 0..=o.repeats {
            let table = if run == 0 {
                "warmup".to_string()
            } else {
                format!("trade_{run}")
            };
            pb.set_message(format!("{} {} ×{conns} {table}", form.name(), t.name()));
            form.prepare(q.http, &table)?;
            let (data, want) = generate_checked(&table, o.rows, o.seed);
            q.child.check_alive()?;
            let to = Endpoint {
                who: form.name(),
                http: q.http,
                ilp: q.ilp,
            };
            let load = Load {
                table: &table,
                batches: &data,
                want,
            };
            let r = one_run(&to, t, conns, &load)?;
            if run > 0 {
                samples.push(r);
                pb.inc(1);
            }
        }
        Ok(())
    })();
    q.child.stop(Duration::from_secs(20));
    result
}

pub fn run(bin: &Path, work: &Path, o: &IngestOptions) -> Result<IngestReport> {
    let transports = [Transport::Tcp, Transport::Http];
    let mut qdb_note = String::new();
    let mut questdb = o.questdb;
    if !o.questdb {
        qdb_note = "QuestDB not measured (--no-questdb)".into();
    } else if let Some(why) = servers::questdb_missing()? {
        qdb_note = format!("QuestDB not measured: {why}");
        questdb = false;
    }
    let per_case = 2 + 2 * usize::from(questdb);
    let total = transports.len() * o.conns.len() * o.repeats * per_case;
    let pb = ProgressBar::new(total as u64);
    pb.set_style(
        ProgressStyle::with_template("ingest {bar:30} {pos}/{len} runs {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let (trade, want) = generate_checked("trade", o.rows, o.seed);
    let mut cases = Vec::new();
    for t in transports {
        for &conns in &o.conns {
            let mut c = CaseResult {
                transport: t.name(),
                conns,
                ..Default::default()
            };
            for _ in 0..o.repeats {
                for (fsync, samples) in [("never", &mut c.never), ("always", &mut c.always)] {
                    pb.set_message(format!("tickdb {} ×{conns} fsync {fsync}", t.name()));
                    let mut s = servers::start_tickdb(
                        bin,
                        work,
                        "up",
                        &format!("ingest-{fsync}"),
                        &["--fsync", fsync],
                    )?;
                    let who = format!("tickdb --fsync {fsync}");
                    let to = Endpoint {
                        who: &who,
                        http: s.http,
                        ilp: s.ilp,
                    };
                    let load = Load {
                        table: "trade",
                        batches: &trade,
                        want,
                    };
                    let r = one_run(&to, t, conns, &load);
                    s.child.stop(Duration::from_secs(10));
                    let _ = std::fs::remove_dir_all(&s.data_dir);
                    samples.push(r?);
                    pb.inc(1);
                }
            }
            if questdb {
                for (form, samples) in [
                    (QdbForm::Default, &mut c.questdb),
                    (QdbForm::Tuned, &mut c.questdb_tuned),
                ] {
                    questdb_case(work, form, t, conns, o, samples, &pb)?;
                }
            }
            cases.push(c);
        }
    }
    pb.finish_and_clear();
    Ok(IngestReport {
        cases,
        rows: o.rows,
        repeats: o.repeats,
        questdb_note: qdb_note,
    })
}

impl IngestReport {
    pub fn markdown(&self) -> String {
        let mut s = String::new();
        s.push_str(&format!(
            "{} trade rows per run in {}-row batches (ILP text, ns timestamps), {} run(s) per cell: \
             median (min–max) rows/s until `select count(*)` returns every row; `*` marks a spread over 1.3×. \
             After each run the table's count and `sum(size)` are checked against the rows sent.\n\n",
            self.rows, BATCH_ROWS, self.repeats
        ));
        s.push_str(
            "| transport | connections | tickdb `--fsync never` | tickdb `--fsync always` | QuestDB default | QuestDB tuned | \
             ratio never/best QuestDB | ratio always/best QuestDB |\n|---|---|---|---|---|---|---|---|\n",
        );
        for c in &self.cases {
            let best = c.questdb_best();
            let best_name = best.map(|(_, n)| format!(" ({n})")).unwrap_or_default();
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {}{best_name} | {}{best_name} |\n",
                c.transport,
                c.conns,
                c.never.describe(si),
                c.always.describe(si),
                c.questdb.describe(si),
                c.questdb_tuned.describe(si),
                ratio(c.never.median(), best.map(|b| b.0)),
                ratio(c.always.median(), best.map(|b| b.0)),
            ));
        }
        if !self.questdb_note.is_empty() {
            s.push_str(&format!("\n{}\n", self.questdb_note));
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_ratio_is_against_the_faster_questdb_form() {
        let mut c = CaseResult::default();
        assert_eq!(c.questdb_best(), None);
        c.questdb = Samples(vec![2.0e6, 3.0e6, 2.5e6]);
        assert_eq!(c.questdb_best(), Some((2.5e6, "default")));
        c.questdb_tuned = Samples(vec![2.6e6]);
        assert_eq!(c.questdb_best(), Some((2.6e6, "tuned")));
        c.questdb = Samples::default();
        assert_eq!(c.questdb_best(), Some((2.6e6, "tuned")));
    }

    #[test]
    fn a_table_that_lost_or_changed_rows_fails_the_check() {
        let want = Expected {
            rows: 3,
            size_sum: 60,
        };
        let answer = |n: i64, sum: serde_json::Value| serde_json::json!({"dataset": [[n, sum]]});
        assert!(check_table(&answer(3, 60.into()), "x", "t", want).is_ok());
        for (n, sum) in [
            (2, 60.into()),
            (3, 59.into()),
            (4, 60.into()),
            (3, serde_json::Value::Null),
        ] {
            let err = check_table(&answer(n, sum), "QuestDB tuned", "t", want).unwrap_err();
            assert!(
                err.to_string().contains("QuestDB tuned: t holds count"),
                "{err}"
            );
        }
        assert!(check_table(&serde_json::json!({"error": "no table"}), "x", "t", want).is_err());
    }

    #[test]
    fn the_expected_sum_is_the_sum_of_the_lines_sent() {
        let (b, want) = generate_checked("t", 12_345, 3);
        let text = String::from_utf8(b.concat()).unwrap();
        let sum: i64 = text
            .lines()
            .map(|l| {
                let size = l.split(",size=").nth(1).unwrap();
                size.split('i').next().unwrap().parse::<i64>().unwrap()
            })
            .sum();
        assert_eq!(
            want,
            Expected {
                rows: 12_345,
                size_sum: sum
            }
        );
    }

    #[test]
    fn generates_whole_batches_of_valid_lines() {
        let b = generate("trade", 25_000, 7);
        assert_eq!(b.len(), 3);
        let text = String::from_utf8(b.concat()).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines.len(), 25_000);
        assert!(lines[0].starts_with("trade,sym=S"));
        assert!(lines
            .iter()
            .all(|l| l.contains(" price=") && l.contains(",size=")));
        assert_eq!(
            generate("trade", 10, 7),
            generate("trade", 10, 7),
            "same seed, same data"
        );
    }
}
