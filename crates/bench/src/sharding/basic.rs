//! Section 3 of the whitepaper, "Basic sharding implementation in kdb+":
//! four listeners on one port, a client that opens 1000 connections (all
//! kept open) and asks `.z.i` on each. How many each listener got, and how
//! often two consecutive connections went to the same one (the 0b's of the
//! paper's `differ`).

use super::group::{self, Spec};
use super::q::{self, Q};
use super::Steering;
use crate::child;
use crate::error::{BenchError, Result};
use indicatif::ProgressBar;
use serde::Serialize;
use std::path::Path;
use std::time::Duration;

/// The paper's split over its 4 listeners, in percent.
pub const PAPER_SHARES: [f64; 4] = [25.0, 25.7, 24.5, 24.8];

#[derive(Debug, Clone, Serialize)]
pub struct BasicOptions {
    pub listeners: usize,
    pub connections: usize,
    /// Runs, each on listeners of its own.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct BasicRun {
    /// Which run (0-based).
    pub run: usize,
    pub listeners: usize,
    pub connections: usize,
    /// Connections per listener, in the order they were started: (pid, n).
    pub per_listener: Vec<(u32, usize)>,
    /// Consecutive connections that went to the same listener (of
    /// `connections - 1` pairs).
    pub same_as_previous: usize,
    /// The paper's `differ` of the first 20 connections, as 1s and 0s.
    pub differ_head: String,
    /// The longest run of consecutive connections to one listener.
    pub longest_run: usize,
    pub seconds: f64,
    pub failures: Vec<String>,
}

/// One run (`run`, 0-based).
pub fn run_basic(
    bin: &Path,
    dir: &Path,
    tp: u16,
    run: usize,
    o: &BasicOptions,
    pb: &ProgressBar,
) -> Result<BasicRun> {
    let mut flags = Steering::Off.flags(None);
    // Single-threaded listeners are not needed here: `.z.i` takes no query slot.
    flags.retain(|f| f == "--no-busy-steering");
    flags.extend([
        "--ipc-connections-max".to_string(),
        (o.connections + 64).to_string(),
    ]);
    let spec = Spec {
        tp,
        ports: group::Ports::fresh()?,
        shared: true,
        flags,
    };
    let names: Vec<String> = (1..=o.listeners)
        .map(|k| format!("basic-{run}-{k}"))
        .collect();
    let mut members = group::start_all(bin, dir, &names, &spec)?;
    // Every member's socket must be in the group before the client starts.
    let t = std::time::Instant::now();
    while group::listeners_on(spec.ports.ipc) < o.listeners {
        child::check_interrupt()?;
        if t.elapsed() > Duration::from_secs(10) {
            return Err(BenchError::Server(format!(
                "section 3, run {}: {} of {} listeners listen on the shared port 10 s after all were ready",
                run + 1,
                group::listeners_on(spec.ports.ipc),
                o.listeners
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let t0 = std::time::Instant::now();
    let mut conns = Vec::with_capacity(o.connections);
    let mut pids: Vec<Option<i64>> = Vec::with_capacity(o.connections);
    let mut failures = Vec::new();
    for i in 0..o.connections {
        child::check_interrupt()?;
        match Q::connect(spec.ports.ipc, Duration::from_secs(30))
            .and_then(|mut c| c.query(".z.i", Duration::from_secs(30)).map(|k| (c, k)))
        {
            Ok((c, k)) => {
                pids.push(q::int_of(&k));
                conns.push(c);
            }
            Err(e) => {
                if failures.len() < 3 {
                    failures.push(format!(
                        "section 3, run {}: connection {}: {e}",
                        run + 1,
                        i + 1
                    ));
                }
                pids.push(None);
            }
        }
        pb.inc(1);
    }
    let seconds = t0.elapsed().as_secs_f64();
    drop(conns);
    group::stop_all(&mut members);
    let per_listener: Vec<(u32, usize)> = members
        .iter()
        .map(|m| {
            (
                m.pid,
                pids.iter()
                    .filter(|p| **p == Some(i64::from(m.pid)))
                    .count(),
            )
        })
        .collect();
    let known: usize = per_listener.iter().map(|(_, n)| n).sum();
    if known != o.connections {
        failures.push(format!(
            "section 3, run {}: {} of {} connections answered `.z.i` with a listener's pid",
            run + 1,
            known,
            o.connections
        ));
    }
    let same_as_previous = pids
        .windows(2)
        .filter(|w| w[0].is_some() && w[0] == w[1])
        .count();
    let differ_head: String = pids
        .iter()
        .take(20)
        .enumerate()
        .map(|(i, p)| {
            if i == 0 || pids[i - 1] != *p {
                '1'
            } else {
                '0'
            }
        })
        .collect();
    let mut longest_run = 0;
    let mut streak = 0;
    for (i, p) in pids.iter().enumerate() {
        streak = if i > 0 && pids[i - 1] == *p {
            streak + 1
        } else {
            1
        };
        longest_run = longest_run.max(streak);
    }
    Ok(BasicRun {
        run,
        listeners: o.listeners,
        connections: o.connections,
        per_listener,
        same_as_previous,
        differ_head,
        longest_run,
        seconds,
        failures,
    })
}
