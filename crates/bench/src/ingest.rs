//! ILP ingest rows/s over TCP and HTTP with 1 and 4 connections, 10k-row
//! batches, against QuestDB in the same run. One client (this module) and
//! the same pre-generated rows for both servers. A run ends when the server
//! answers `select count(*)` with every row: the time to be queryable.

use crate::child;
use crate::error::{BenchError, Result};
use crate::http::{exec_scalar, HttpConn};
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

/// `rows` trade rows as ILP lines for `table`, in batches of BATCH_ROWS.
pub fn generate(table: &str, rows: usize, seed: u64) -> Vec<Vec<u8>> {
    let mut rng = StdRng::seed_from_u64(seed);
    let t0: i64 = 1_700_000_000_000_000_000;
    let mut out = Vec::with_capacity(rows.div_ceil(BATCH_ROWS));
    let mut price = vec![100.0f64; SYMBOLS];
    let mut i = 0usize;
    while i < rows {
        let n = BATCH_ROWS.min(rows - i);
        let mut b = Vec::with_capacity(n * 64);
        for k in 0..n {
            let s = rng.random_range(0..SYMBOLS);
            price[s] = (price[s] + rng.random_range(-5..=5) as f64 * 0.01).max(0.01);
            let size: i64 = rng.random_range(1..=1000);
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
    out
}

/// Sends every batch over `conns` connections, then waits for the count.
fn one_run(
    transport: Transport,
    http: u16,
    ilp: u16,
    conns: usize,
    table: &str,
    batches: &[Vec<u8>],
    rows: usize,
) -> Result<f64> {
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
    let sql = format!("select count(*) from {table}");
    loop {
        child::check_interrupt()?;
        // QuestDB answers "table does not exist" until its first commit.
        if let Ok(n) = exec_scalar(http, &sql) {
            if n as usize >= rows {
                break;
            }
        }
        if t0.elapsed() > COUNT_TIMEOUT {
            return Err(BenchError::Server(format!(
                "{table}: rows not all visible after {COUNT_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    Ok(rows as f64 / t0.elapsed().as_secs_f64())
}

#[derive(Default)]
pub struct CaseResult {
    pub transport: &'static str,
    pub conns: usize,
    pub never: Samples,
    pub always: Samples,
    pub questdb: Samples,
}

pub struct IngestReport {
    pub cases: Vec<CaseResult>,
    pub rows: usize,
    pub repeats: usize,
    pub questdb_note: String,
}

pub fn run(bin: &Path, work: &Path, o: &IngestOptions) -> Result<IngestReport> {
    let transports = [Transport::Tcp, Transport::Http];
    let mut qdb_note = String::new();
    let mut qdb = None;
    if o.questdb {
        match servers::start_questdb(work) {
            Ok(q) => qdb = Some(q),
            Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
            Err(e) => qdb_note = format!("QuestDB not measured: {e}"),
        }
    } else {
        qdb_note = "QuestDB not measured (--no-questdb)".into();
    }
    let per_case = 2 + usize::from(qdb.is_some());
    let total = transports.len() * o.conns.len() * o.repeats * per_case;
    let pb = ProgressBar::new(total as u64);
    pb.set_style(
        ProgressStyle::with_template("ingest {bar:30} {pos}/{len} runs {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let trade = generate("trade", o.rows, o.seed);
    let mut cases = Vec::new();
    let mut qrun = 0;
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
                    let r = one_run(t, s.http, s.ilp, conns, "trade", &trade, o.rows)?;
                    samples.push(r);
                    s.child.stop(Duration::from_secs(10));
                    let _ = std::fs::remove_dir_all(&s.data_dir);
                    pb.inc(1);
                }
                if let Some(q) = qdb.as_mut() {
                    pb.set_message(format!("QuestDB {} ×{conns}", t.name()));
                    qrun += 1;
                    let table = format!("trade_{qrun}");
                    let data = generate(&table, o.rows, o.seed);
                    q.child.check_alive()?;
                    c.questdb
                        .push(one_run(t, q.http, q.ilp, conns, &table, &data, o.rows)?);
                    pb.inc(1);
                }
            }
            cases.push(c);
        }
    }
    pb.finish_and_clear();
    if let Some(mut q) = qdb {
        q.child.stop(Duration::from_secs(20));
    }
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
             median (min–max) rows/s until `select count(*)` returns every row; `*` marks a spread over 1.3×.\n\n",
            self.rows, BATCH_ROWS, self.repeats
        ));
        s.push_str("| transport | connections | tickdb `--fsync never` | tickdb `--fsync always` | QuestDB (default, nosync) | ratio never/QuestDB | ratio always/QuestDB |\n|---|---|---|---|---|---|---|\n");
        for c in &self.cases {
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} |\n",
                c.transport,
                c.conns,
                c.never.describe(si),
                c.always.describe(si),
                c.questdb.describe(si),
                ratio(c.never.median(), c.questdb.median()),
                ratio(c.always.median(), c.questdb.median()),
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
