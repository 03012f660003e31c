//! Section 6 of the whitepaper, "Routing connections to multiple listeners
//! when one is busy" (its Figure 4): two single-threaded listeners share a
//! kdb+ IPC port; a client connects every 100 ms, sends one sync query and
//! closes; listener 1 is blocked for a while. In kdb+ the kernel keeps
//! handing connections to the blocked listener and the client hangs until
//! the block ends. Here each connection asks `s)select pg_backend_pid()`,
//! which needs the listener's only query slot (`--query-concurrency 1`), so
//! a connection that lands on the blocked listener waits behind the block,
//! as in kdb+. The block is `select pg_sleep(B)` sent to listener 1's own
//! `--admin-port` over HTTP.
//!
//! Each connection runs on a thread of its own (every 100 ms, whether or
//! not the previous one was answered), so every connection the kernel gives
//! the blocked listener is seen, not only the first one that would hang a
//! single-threaded q client.

use super::group::{self, Spec};
use super::q::{self, Q};
use super::Steering;
use crate::child;
use crate::error::Result;
use crate::http::{url_encode, HttpConn};
use crate::stats::Samples;
use indicatif::ProgressBar;
use serde::Serialize;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize)]
pub struct BusyOptions {
    /// How long listener 1 is blocked (the paper: 10 s).
    pub block_s: f64,
    /// Client connections this often (the paper: 100 ms).
    pub interval_s: f64,
    /// Seconds of client before the block and after it.
    pub around_s: f64,
    /// `--busy-query-ms` of the steering run.
    pub busy_query_ms: u64,
    /// Runs of the scenario, steering off and on each time.
    pub runs: usize,
}

/// One connection of the client.
#[derive(Debug, Clone, Serialize)]
pub struct Conn {
    /// When it was opened, seconds since the block started.
    pub t: f64,
    /// Connect to answer, seconds.
    pub wait_s: Option<f64>,
    pub pid: Option<i64>,
    pub error: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct BusyRun {
    /// Which run (0-based).
    pub run: usize,
    pub steering: Steering,
    pub blocked_pid: u32,
    pub other_pid: u32,
    /// When listener 1's `/status` first showed the block running, and
    /// when its answer came back, seconds after it was sent.
    pub block_running_s: Option<f64>,
    pub block_end_s: f64,
    pub block_status: u16,
    /// Connections opened while listener 1 was blocked.
    pub during: usize,
    pub to_blocked: usize,
    pub to_other: usize,
    pub failed: usize,
    /// Of `to_blocked`, those opened `busy_query_ms` or more after the
    /// block started running.
    pub to_blocked_after_busy_ms: usize,
    /// The longest wait of a connection opened that late in the block.
    pub max_wait_after_busy_ms_s: Option<f64>,
    /// Waits of the connections opened during the block, seconds.
    pub p50_wait_s: Option<f64>,
    pub p99_wait_s: Option<f64>,
    pub max_wait_s: Option<f64>,
    /// The longest wait of a connection that went to the blocked listener.
    pub blocked_max_wait_s: Option<f64>,
    /// Connections outside the block: to listener 1, to listener 2.
    pub outside: (usize, usize),
    /// Sockets listening on the shared port during the block (`/proc/net/tcp`):
    /// the fewest, and when listener 1's went away / came back (seconds
    /// since the block started).
    pub listeners_min: Option<usize>,
    pub left_at_s: Option<f64>,
    pub back_at_s: Option<f64>,
    pub busy_query_ms: u64,
    pub conns: Vec<Conn>,
    pub failures: Vec<String>,
}

/// One run (`run`, 0-based) of one steering mode.
pub fn run_busy(
    bin: &Path,
    dir: &Path,
    tp: u16,
    run: usize,
    s: Steering,
    o: &BusyOptions,
    pb: &ProgressBar,
) -> Result<BusyRun> {
    let spec = Spec {
        tp,
        ports: group::Ports::fresh()?,
        shared: true,
        flags: s.flags(Some(o.busy_query_ms)),
    };
    let names = [1, 2].map(|k| format!("busy-{run}-{}-{k}", s.short()));
    let mut members = group::start_all(bin, dir, &names, &spec)?;
    let (blocked_pid, other_pid, admin1) = (members[0].pid, members[1].pid, members[0].admin);
    let port = spec.ports.ipc;
    let around = Duration::from_secs_f64(o.around_s);
    let block = Duration::from_secs_f64(o.block_s);
    let t_start = Instant::now();
    let block_at = t_start + around;
    let end = block_at + block + around;
    let conns: Arc<Mutex<Vec<Conn>>> = Arc::new(Mutex::new(Vec::new()));
    let rel = move |t: Instant| -> f64 {
        if t >= block_at {
            t.duration_since(block_at).as_secs_f64()
        } else {
            -block_at.duration_since(t).as_secs_f64()
        }
    };
    let answer_timeout = block + Duration::from_secs(30);
    let (block_result, samples, running_at) = std::thread::scope(|sc| {
        // When listener 1 shows the block running (its admin /status).
        let watcher = sc.spawn(move || -> Option<f64> {
            if child::sleep(block_at.saturating_duration_since(Instant::now())).is_err() {
                return None;
            }
            while Instant::now() < block_at + block {
                let running = crate::http::request_json(admin1, "GET", "/status")
                    .ok()
                    .and_then(|st| st["queries"]["running"].as_u64())
                    .unwrap_or(0);
                if running > 0 {
                    return Some(rel(Instant::now()));
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            None
        });
        let blocker = sc.spawn(move || -> (f64, u16) {
            if child::sleep(block_at.saturating_duration_since(Instant::now())).is_err() {
                return (0.0, 0);
            }
            let path = format!(
                "/exec?query={}",
                url_encode(&format!("select pg_sleep({})", o.block_s))
            );
            let status = HttpConn::connect(admin1)
                .and_then(|mut c| c.request("GET", &path, b""))
                .map(|(st, _)| st)
                .unwrap_or(0);
            (rel(Instant::now()), status)
        });
        let sampler = sc.spawn(move || {
            let mut v = Vec::new();
            while Instant::now() < end && child::check_interrupt().is_ok() {
                v.push((rel(Instant::now()), group::listeners_on(port)));
                std::thread::sleep(Duration::from_millis(20));
            }
            v
        });
        let mut clients = Vec::new();
        let mut due = t_start;
        while due < end && child::check_interrupt().is_ok() {
            let now = Instant::now();
            if now < due {
                std::thread::sleep((due - now).min(Duration::from_millis(20)));
                pb.set_position(t_start.elapsed().as_millis() as u64);
                continue;
            }
            let conns = conns.clone();
            clients.push(sc.spawn(move || {
                let t = Instant::now();
                let mut c = Conn {
                    t: rel(t),
                    wait_s: None,
                    pid: None,
                    error: None,
                };
                match Q::connect(port, answer_timeout)
                    .and_then(|mut q| q.query("s)select pg_backend_pid()", answer_timeout))
                {
                    Ok(k) => {
                        c.wait_s = Some(t.elapsed().as_secs_f64());
                        c.pid = q::int_of(&k);
                        if c.pid.is_none() {
                            c.error = Some("pg_backend_pid() did not answer one integer".into());
                        }
                    }
                    Err(e) => c.error = Some(e.to_string()),
                }
                conns.lock().unwrap_or_else(|e| e.into_inner()).push(c);
            }));
            due += Duration::from_secs_f64(o.interval_s);
        }
        for h in clients {
            let _ = h.join();
        }
        let b = blocker.join().unwrap_or((0.0, 0));
        let v = sampler.join().unwrap_or_default();
        let r = watcher.join().unwrap_or(None);
        (b, v, r)
    });
    child::check_interrupt()?;
    group::stop_all(&mut members);
    let (block_end_s, block_status) = block_result;
    let mut conns = conns.lock().unwrap_or_else(|e| e.into_inner()).clone();
    conns.sort_by(|a, b| a.t.total_cmp(&b.t));
    let during_block = |c: &&Conn| c.t >= 0.0 && c.t < block_end_s;
    let during: Vec<&Conn> = conns.iter().filter(during_block).collect();
    let is = |c: &Conn, pid: u32| c.pid == Some(i64::from(pid));
    let waits = Samples(during.iter().filter_map(|c| c.wait_s).collect());
    let busy_s = running_at.unwrap_or(0.0) + o.busy_query_ms as f64 / 1000.0;
    let to_blocked: Vec<&&Conn> = during.iter().filter(|c| is(c, blocked_pid)).collect();
    let mut failures = Vec::new();
    let failed: Vec<&Conn> = conns.iter().filter(|c| c.error.is_some()).collect();
    if let Some(c) = failed.first() {
        let refused = failed
            .iter()
            .filter(|c| {
                c.error
                    .as_deref()
                    .is_some_and(|e| e.starts_with("connect:") && e.contains("refused"))
            })
            .count();
        failures.push(format!(
            "section 6, run {}, {}: {} of {} connections failed (first, opened at {:+.2} s into the block: {}){}",
            run + 1,
            s.label(),
            failed.len(),
            conns.len(),
            c.t,
            c.error.as_deref().unwrap_or(""),
            if refused > 0 {
                format!("; {refused} connect(s) refused: no member listened on the shared port then, though a member must never close the last listener")
            } else {
                String::new()
            }
        ));
    }
    let strangers = conns
        .iter()
        .filter(|c| c.pid.is_some() && !is(c, blocked_pid) && !is(c, other_pid))
        .count();
    if strangers > 0 {
        failures.push(format!(
            "section 6, run {}, {}: {strangers} connections answered by a pid that is not a listener",
            run + 1,
            s.label()
        ));
    }
    if block_status != 200 {
        failures.push(format!(
            "section 6, run {}, {}: the block (select pg_sleep({}) on listener 1's admin port) answered HTTP {block_status}",
            run + 1,
            s.label(),
            o.block_s
        ));
    }
    // Listener 1's socket leaving the port: the count drops below 2.
    let in_block: Vec<&(f64, usize)> = samples
        .iter()
        .filter(|(t, _)| *t >= 0.0 && *t < block_end_s)
        .collect();
    let left_at_s = in_block.iter().find(|(_, n)| *n < 2).map(|(t, _)| *t);
    let back_at_s = left_at_s.and_then(|_| {
        samples
            .iter()
            .find(|(t, n)| *t >= block_end_s - 0.05 && *n >= 2)
            .map(|(t, _)| *t)
    });
    Ok(BusyRun {
        run,
        steering: s,
        blocked_pid,
        other_pid,
        block_running_s: running_at,
        block_end_s,
        block_status,
        during: during.len(),
        to_blocked: to_blocked.len(),
        to_other: during.iter().filter(|c| is(c, other_pid)).count(),
        failed: during.iter().filter(|c| c.error.is_some()).count(),
        to_blocked_after_busy_ms: to_blocked.iter().filter(|c| c.t >= busy_s).count(),
        max_wait_after_busy_ms_s: during
            .iter()
            .filter(|c| c.t >= busy_s)
            .filter_map(|c| c.wait_s)
            .reduce(f64::max),
        p50_wait_s: waits.median(),
        p99_wait_s: waits.percentile(99.0),
        max_wait_s: waits.max(),
        blocked_max_wait_s: to_blocked.iter().filter_map(|c| c.wait_s).reduce(f64::max),
        outside: (
            conns
                .iter()
                .filter(|c| !during_block(c) && is(c, blocked_pid))
                .count(),
            conns
                .iter()
                .filter(|c| !during_block(c) && is(c, other_pid))
                .count(),
        ),
        listeners_min: in_block.iter().map(|(_, n)| *n).min(),
        left_at_s,
        back_at_s,
        busy_query_ms: o.busy_query_ms,
        conns,
        failures,
    })
}
