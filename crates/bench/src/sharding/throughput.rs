//! Query throughput of rdbs sharing one PostgreSQL port (`rp,PORT`): 1, 2
//! and 4 single-threaded rdbs (`--query-threads 1 --query-concurrency 1`),
//! driven by many psycopg clients (`pg_driver.py`, run with the repository's
//! `.venv/bin/python` or `python3`), each reconnecting every N queries so
//! that the kernel spreads the connections. Every rdb must give the same
//! answer to the query, and so must the answers the clients got.

use super::group::{self, Member, Spec};
use crate::child::{self, Child};
use crate::error::{BenchError, Result};
use indicatif::ProgressBar;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

pub const DRIVER: &str = include_str!("pg_driver.py");
pub const QUERY: &str = "select sym, count(*) as n, sum(size) as volume, avg(price) as avg_price, \
                         min(price) as low, max(price) as high from trade group by sym order by sym";
/// Two float aggregates of the same rows agree to this (relative): the
/// order of a sum depends on how each rdb chunked its rows.
const FLOAT_TOLERANCE: f64 = 1e-9;

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputOptions {
    pub rdbs: Vec<usize>,
    pub seconds: f64,
    pub clients: usize,
    pub per_conn: usize,
    /// Rounds of every setup in turn (1, 2, 4 rdbs, then again); the
    /// report gives medians over them.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct Cell {
    /// Which round (0-based).
    pub run: usize,
    pub rdbs: usize,
    pub queries: u64,
    pub qps: f64,
    pub connections: u64,
    /// Connections per rdb pid.
    pub per_rdb: BTreeMap<String, u64>,
    pub errors: u64,
    pub error_examples: Vec<String>,
    /// The rdbs' CPU seconds over the phase ÷ its seconds (cores busy).
    pub server_cores: Option<f64>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ThroughputRun {
    pub python: String,
    /// Why the section did not run, if it did not.
    pub skipped: Option<String>,
    pub cells: Vec<Cell>,
    /// Rows of the query's answer (symbols).
    pub answer_rows: usize,
    pub failures: Vec<String>,
}

/// `.venv/bin/python` of the repository (found from the current directory
/// or the binary's), else `python3`.
pub fn python() -> PathBuf {
    let mut roots = Vec::new();
    if let Ok(d) = std::env::current_dir() {
        roots.extend(d.ancestors().map(Path::to_path_buf));
    }
    if let Ok(e) = std::env::current_exe() {
        roots.extend(e.ancestors().skip(1).map(Path::to_path_buf));
    }
    roots
        .into_iter()
        .map(|r| r.join(".venv/bin/python"))
        .find(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

/// Why psycopg cannot be used, if it cannot.
fn psycopg_missing(py: &Path) -> Option<String> {
    match Command::new(py).args(["-c", "import psycopg"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "`{} -c 'import psycopg'` failed: {}",
            py.display(),
            String::from_utf8_lossy(&o.stderr)
                .trim()
                .lines()
                .last()
                .unwrap_or("")
        )),
        Err(e) => Some(format!("cannot run {}: {e}", py.display())),
    }
}

/// Two answers (JSON rows) equal: the same symbols and counts, the float
/// aggregates to FLOAT_TOLERANCE.
pub fn same_rows(a: &serde_json::Value, b: &serde_json::Value) -> bool {
    let (Some(a), Some(b)) = (a.as_array(), b.as_array()) else {
        return false;
    };
    a.len() == b.len()
        && a.iter().zip(b).all(|(x, y)| {
            let (Some(x), Some(y)) = (x.as_array(), y.as_array()) else {
                return false;
            };
            x.len() == y.len()
                && x.iter()
                    .zip(y)
                    .all(|(u, v)| match (u.as_f64(), v.as_f64()) {
                        (Some(p), Some(q)) if !(u.is_i64() && v.is_i64()) => {
                            (p - q).abs() <= FLOAT_TOLERANCE * p.abs().max(q.abs()).max(1.0)
                        }
                        _ => u == v,
                    })
        })
}

pub fn run_throughput(
    bin: &Path,
    dir: &Path,
    tp: u16,
    o: &ThroughputOptions,
    pb: &ProgressBar,
) -> Result<ThroughputRun> {
    let py = python();
    let mut out = ThroughputRun {
        python: py.display().to_string(),
        skipped: None,
        cells: Vec::new(),
        answer_rows: 0,
        failures: Vec::new(),
    };
    if let Some(why) = psycopg_missing(&py) {
        eprintln!("sharding throughput: skipped: {why}");
        out.skipped = Some(why);
        return Ok(out);
    }
    // Every group at once (they load in parallel); idle groups cost nothing.
    let mut groups: Vec<(usize, Spec, Vec<Member>)> = Vec::new();
    for &n in &o.rdbs {
        let spec = Spec {
            tp,
            ports: group::Ports::fresh()?,
            shared: true,
            flags: [
                "--query-threads",
                "1",
                "--query-concurrency",
                "1",
                "--no-busy-steering",
            ]
            .map(String::from)
            .to_vec(),
        };
        let names: Vec<String> = (1..=n).map(|k| format!("throughput-{n}-{k}")).collect();
        let members = group::start_all(bin, dir, &names, &spec)?;
        groups.push((n, spec, members));
    }
    // The same answer from every rdb.
    let mut reference: Option<serde_json::Value> = None;
    for (_, _, members) in &groups {
        for m in members {
            let rows = m.exec(QUERY)?;
            match &reference {
                None => reference = Some(rows),
                Some(r) if same_rows(r, &rows) => {}
                Some(r) => out.failures.push(format!(
                    "throughput: {} answered {} rows that differ from the first rdb's {} rows",
                    m.name,
                    rows.as_array().map_or(0, Vec::len),
                    r.as_array().map_or(0, Vec::len)
                )),
            }
        }
    }
    let reference = reference.unwrap_or_default();
    out.answer_rows = reference.as_array().map_or(0, Vec::len);
    let script = dir.join("pg_driver.py");
    std::fs::write(&script, DRIVER).map_err(BenchError::io("writing pg_driver.py"))?;
    let results = dir.join("pg_driver.jsonl");
    // A results file of an earlier run in the same --work-dir would read
    // as phases already done (and their CPU be taken at the start).
    match std::fs::remove_file(&results) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(BenchError::io("removing an old pg_driver.jsonl")(e))
        }
        _ => {}
    }
    // Round after round, every setup in turn: a slow spell of the machine
    // falls on every setup, not on one.
    let runs = o.runs.max(1);
    let ports: Vec<String> = (0..runs)
        .flat_map(|_| groups.iter().map(|(_, s, _)| s.ports.pg.to_string()))
        .collect();
    let phases = ports.len();
    let mut cmd = Command::new(&py);
    cmd.arg(&script)
        .args(["--ports", &ports.join(",")])
        .args(["--seconds", &o.seconds.to_string()])
        .args(["--clients", &o.clients.to_string()])
        .args(["--per-conn", &o.per_conn.to_string()])
        .args(["--query", QUERY])
        .arg("--out")
        .arg(&results);
    let cpu = |gs: &[(usize, Spec, Vec<Member>)]| -> Vec<Option<f64>> {
        gs.iter()
            .map(|(_, _, ms)| {
                ms.iter()
                    .map(|m| tickdb_stack::procfs::cpu_seconds(m.pid))
                    .sum::<Option<f64>>()
            })
            .collect()
    };
    let cpu0 = cpu(&groups);
    let mut driver = Child::spawn("pg_driver.py", &mut cmd, &dir.join("pg_driver.log"))?;
    // Each phase: the clients' start (0.5 s), the measured seconds, the
    // clients' exit. Every group's CPU is read as each phase ends, so that
    // a phase's cost is its group's CPU since the phase before it ended.
    let mut cpu_at: Vec<Vec<Option<f64>>> = Vec::with_capacity(phases);
    let phase_ms = (o.seconds * 1000.0) as u64 + 700;
    let t0 = std::time::Instant::now();
    let limit = Duration::from_secs_f64((o.seconds + 120.0) * phases as f64);
    let status = loop {
        child::check_interrupt()?;
        let done_lines = std::fs::read_to_string(&results)
            .map(|t| t.lines().count())
            .unwrap_or(0);
        while cpu_at.len() < done_lines.min(phases) {
            cpu_at.push(cpu(&groups));
        }
        pb.set_position((t0.elapsed().as_millis() as u64).min(phase_ms * phases as u64));
        match driver.wait_exit(Duration::from_millis(50)) {
            Ok(st) => break st,
            Err(BenchError::Interrupted) => return Err(BenchError::Interrupted),
            Err(_) if t0.elapsed() < limit => {}
            Err(e) => return Err(e),
        }
    };
    // The last phase's line may have come just before the driver exited.
    let done_lines = std::fs::read_to_string(&results)
        .map(|t| t.lines().count())
        .unwrap_or(0);
    while cpu_at.len() < done_lines.min(phases) {
        cpu_at.push(cpu(&groups));
    }
    if !status.success() {
        return Err(BenchError::Server(format!(
            "pg_driver.py exited {status}; log {}:\n{}",
            driver.log.display(),
            child::log_tail(&driver.log)
        )));
    }
    let text =
        std::fs::read_to_string(&results).map_err(BenchError::io("reading pg_driver.jsonl"))?;
    for (i, line) in text.lines().enumerate() {
        let v: serde_json::Value = serde_json::from_str(line)
            .map_err(|e| BenchError::Protocol(format!("pg_driver.jsonl: {e}")))?;
        let g = i % groups.len().max(1);
        let n = groups.get(g).map_or(0, |x| x.0);
        let pids: BTreeMap<String, u64> = v["pids"]
            .as_object()
            .map(|m| {
                m.iter()
                    .map(|(k, v)| (k.clone(), v.as_u64().unwrap_or(0)))
                    .collect()
            })
            .unwrap_or_default();
        let members = groups.get(g).map(|x| &x.2[..]).unwrap_or(&[]);
        for p in pids.keys() {
            if !members.iter().any(|m| m.pid.to_string() == *p) {
                out.failures.push(format!(
                    "throughput, {n} rdbs: a client reached pid {p}, not an rdb of the group"
                ));
            }
        }
        if !same_rows(&v["sample"], &reference) {
            out.failures.push(format!(
                "throughput, {n} rdbs: a client's answer differs from the rdbs' ({} rows against {})",
                v["sample"].as_array().map_or(0, Vec::len),
                out.answer_rows
            ));
        }
        if v["row_counts"] != serde_json::json!([out.answer_rows]) {
            out.failures.push(format!(
                "throughput, {n} rdbs: answers had {} rows; every one should have {}",
                v["row_counts"], out.answer_rows
            ));
        }
        let errors = v["error_count"].as_u64().unwrap_or(0);
        let examples: Vec<String> = v["errors"]
            .as_array()
            .map(|a| {
                a.iter()
                    .filter_map(|e| e.as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        if errors > 0 {
            out.failures.push(format!(
                "throughput, {n} rdbs: {errors} client errors (first: {})",
                examples.first().map(String::as_str).unwrap_or("")
            ));
        }
        let queries = v["queries"].as_u64().unwrap_or(0);
        let before = if i == 0 {
            Some(&cpu0)
        } else {
            cpu_at.get(i - 1)
        };
        let server_cores = match (
            before.and_then(|c| c.get(g)).copied().flatten(),
            cpu_at.get(i).and_then(|c| c.get(g)).copied().flatten(),
        ) {
            (Some(a), Some(b)) => Some((b - a) / o.seconds),
            _ => None,
        };
        out.cells.push(Cell {
            run: i / groups.len().max(1),
            rdbs: n,
            queries,
            qps: queries as f64 / o.seconds,
            connections: v["connections"].as_u64().unwrap_or(0),
            per_rdb: pids,
            errors,
            error_examples: examples,
            server_cores,
        });
    }
    if out.cells.len() != phases {
        out.failures.push(format!(
            "throughput: the driver reported {} phases of {phases}",
            out.cells.len(),
        ));
    }
    for (_, _, ms) in groups.iter_mut() {
        group::stop_all(ms);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn compares_answers_with_a_float_tolerance() {
        let a = json!([["S000", 10, 500, 100.25, 99.0, 101.5]]);
        assert!(super::same_rows(
            &a,
            &json!([["S000", 10, 500, 100.25 + 1e-12, 99.0, 101.5]])
        ));
        assert!(!super::same_rows(
            &a,
            &json!([["S000", 11, 500, 100.25, 99.0, 101.5]])
        ));
        assert!(!super::same_rows(
            &a,
            &json!([["S001", 10, 500, 100.25, 99.0, 101.5]])
        ));
        assert!(!super::same_rows(&a, &json!([])));
        assert!(!super::same_rows(&a, &json!(null)));
    }
}
