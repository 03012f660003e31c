//! Sections 4 and 5 of the whitepaper: the timer client (`timer.rs`)
//! against single-threaded listeners (`--query-concurrency 1
//! --query-threads 1`, like a kdb+ process) sharing one kdb+ IPC port.
//!
//! - Section 4 ("Adding more listeners on the fly", Table 1): 2 s requests
//!   every second; one listener for the first period, a second started at
//!   the start of the second, a third at the third. Requests processed and
//!   the average time taken per period, grouped by when the timer fired,
//!   as the paper's `select avg timeTaken by sendTime.minute`.
//! - Section 5 ("Sending a large volume of requests"): 0.2 s requests
//!   every 100 ms against 1, 2 and 3 listeners (added one by one, each
//!   phase after the previous one's answers are in).

use super::group::{self, Member, Spec};
use super::timer::{self, Live, Req};
use super::Steering;
use crate::child;
use crate::error::Result;
use crate::stats::Samples;
use indicatif::ProgressBar;
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

/// The paper's Table 1 (averages over 3 tests of one minute per period).
pub const PAPER_REQUESTS: [f64; 3] = [31.0, 42.33, 55.0];
pub const PAPER_AVG_S: [f64; 3] = [3.909, 3.356, 2.607];
/// The paper's period, seconds.
pub const PAPER_PERIOD_S: f64 = 60.0;

#[derive(Debug, Clone, Serialize)]
pub struct FlyOptions {
    /// Seconds per period (the paper: 60).
    pub period_s: f64,
    /// Listeners, one more each period (the paper: 3).
    pub listeners: usize,
    /// The timer (the paper: 1 s) and each request's sleep (2 s).
    pub interval_s: f64,
    pub sleep_s: f64,
    /// Runs of the whole scenario (the paper's Table 1 averages 3 tests).
    pub runs: usize,
}

/// When a listener joined.
#[derive(Debug, Clone, Serialize)]
pub struct Join {
    pub listener: usize,
    pub pid: u32,
    /// Spawned, seconds since the client's start (negative: before it).
    pub started_s: f64,
    /// Ready (admin `/health` 200, `/status` ready), since the client's start.
    pub ready_s: f64,
    /// Its load: spawn to ready.
    pub load_s: f64,
}

/// Statistics of a set of requests.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ReqStats {
    pub sent: usize,
    pub answered: usize,
    pub failed: usize,
    pub mean_s: Option<f64>,
    pub p50_s: Option<f64>,
    pub p99_s: Option<f64>,
    pub max_s: Option<f64>,
    /// Answered requests per listener pid.
    pub per_listener: BTreeMap<u32, usize>,
}

impl ReqStats {
    pub fn of<'a>(reqs: impl Iterator<Item = &'a Req>) -> ReqStats {
        let mut s = ReqStats::default();
        let mut taken = Samples::default();
        for r in reqs {
            s.sent += 1;
            if r.error.is_some() {
                s.failed += 1;
            } else if let Some(t) = r.taken() {
                s.answered += 1;
                taken.push(t);
                if let Some(p) = r.pid {
                    *s.per_listener.entry(p as u32).or_default() += 1;
                }
            }
        }
        if !taken.0.is_empty() {
            s.mean_s = Some(taken.0.iter().sum::<f64>() / taken.0.len() as f64);
        }
        s.p50_s = taken.median();
        s.p99_s = taken.percentile(99.0);
        s.max_s = taken.max();
        s
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Period {
    pub period: usize,
    pub listeners: usize,
    pub stats: ReqStats,
}

/// One section 4 run.
#[derive(Debug, Clone, Serialize)]
pub struct FlyRun {
    /// Which run (0-based).
    pub run: usize,
    pub steering: Steering,
    pub joins: Vec<Join>,
    pub periods: Vec<Period>,
    /// Every request, in the order the timer fired.
    pub requests: Vec<Req>,
    pub failures: Vec<String>,
}

fn sleep_until(t: Instant) -> Result<()> {
    child::sleep(t.saturating_duration_since(Instant::now()))
}

/// The checks every run ends with: each request answered (one row), by a
/// listener of the group.
fn check(reqs: &[Req], pids: &[u32], what: &str, failures: &mut Vec<String>) {
    let failed: Vec<&Req> = reqs.iter().filter(|r| r.error.is_some()).collect();
    if let Some(r) = failed.first() {
        failures.push(format!(
            "{what}: {} of {} requests failed (first, sent at +{:.2} s: {})",
            failed.len(),
            reqs.len(),
            r.st,
            r.error.as_deref().unwrap_or("")
        ));
    }
    let strangers: Vec<i64> = reqs
        .iter()
        .filter_map(|r| r.pid)
        .filter(|p| !pids.iter().any(|&q| i64::from(q) == *p))
        .collect();
    if let Some(p) = strangers.first() {
        failures.push(format!(
            "{what}: {} requests were answered by pid {p}, not a listener of the group ({pids:?})",
            strangers.len()
        ));
    }
}

fn listener_name(section: &str, run: usize, s: Steering, k: usize) -> String {
    format!("{section}-{run}-{}-{k}", s.short())
}

/// Section 4, one run (`run`, 0-based) of one steering mode.
pub fn run_fly(
    bin: &Path,
    dir: &Path,
    tp: u16,
    run: usize,
    s: Steering,
    o: &FlyOptions,
    pb: &ProgressBar,
) -> Result<FlyRun> {
    let spec = Spec {
        tp,
        ports: group::Ports::fresh()?,
        shared: true,
        flags: s.flags(None),
    };
    let first = group::start(bin, dir, &listener_name("fly", run, s, 1), &spec)?;
    let load0 = first.ready_s.unwrap_or(0.0);
    let mut joins = vec![Join {
        listener: 1,
        pid: first.pid,
        started_s: -load0,
        ready_s: 0.0,
        load_s: load0,
    }];
    let period = Duration::from_secs_f64(o.period_s);
    let t0 = Instant::now();
    let until = t0 + period * o.listeners as u32;
    let live = Live::default();
    // The listeners are started from this thread, which outlives them: a
    // child dies with the thread that spawned it (PR_SET_PDEATHSIG). The
    // client runs on a thread of its own.
    let (reqs, joined) = std::thread::scope(|sc| {
        let client = sc.spawn(|| {
            timer::run(
                spec.ports.ipc,
                Duration::from_secs_f64(o.interval_s),
                o.sleep_s,
                t0,
                until,
                &live,
                pb,
                0,
            )
        });
        let joined = (|| -> Result<Vec<(Member, Join)>> {
            let mut out = Vec::new();
            for k in 1..o.listeners {
                sleep_until(t0 + period * k as u32)?;
                let mut m = group::spawn(bin, dir, &listener_name("fly", run, s, k + 1), &spec)?;
                let started_s = t0.elapsed().as_secs_f64();
                let load_s = m.wait_ready()?;
                let join = Join {
                    listener: k + 1,
                    pid: m.pid,
                    started_s,
                    ready_s: started_s + load_s,
                    load_s,
                };
                out.push((m, join));
            }
            Ok(out)
        })();
        let reqs = client.join().unwrap_or_default();
        (reqs, joined)
    });
    child::check_interrupt()?;
    let joined = joined?;
    let mut members = vec![first];
    for (m, j) in joined {
        members.push(m);
        joins.push(j);
    }
    let pids: Vec<u32> = members.iter().map(|m| m.pid).collect();
    let mut failures = Vec::new();
    check(
        &reqs,
        &pids,
        &format!("section 4, {}", s.label()),
        &mut failures,
    );
    let last = o.listeners.saturating_sub(1);
    let periods = (0..o.listeners)
        .map(|k| Period {
            period: k + 1,
            listeners: k + 1,
            stats: ReqStats::of(
                reqs.iter()
                    .filter(|r| ((r.st / o.period_s).max(0.0) as usize).min(last) == k),
            ),
        })
        .collect();
    group::stop_all(&mut members);
    Ok(FlyRun {
        run,
        steering: s,
        joins,
        periods,
        requests: reqs,
        failures,
    })
}

#[derive(Debug, Clone, Serialize)]
pub struct VolumeOptions {
    /// Seconds per listener count.
    pub seconds: f64,
    pub listeners: usize,
    /// The timer (the paper: 100 ms) and each request's sleep (0.2 s).
    pub interval_s: f64,
    pub sleep_s: f64,
    /// Runs of the whole scenario.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct VolumeCell {
    /// Which run (0-based).
    pub run: usize,
    pub steering: Steering,
    pub listeners: usize,
    pub seconds: f64,
    pub stats: ReqStats,
    /// Answers that came back during the phase, per second.
    pub throughput: f64,
}

/// Section 5, one run (`run`, 0-based) of one steering mode: 1, 2, 3
/// listeners in turn.
pub fn run_volume(
    bin: &Path,
    dir: &Path,
    tp: u16,
    run: usize,
    s: Steering,
    o: &VolumeOptions,
    pb: &ProgressBar,
) -> Result<(Vec<VolumeCell>, Vec<String>)> {
    let spec = Spec {
        tp,
        ports: group::Ports::fresh()?,
        shared: true,
        flags: s.flags(None),
    };
    let mut members: Vec<Member> = Vec::new();
    let mut cells = Vec::new();
    let mut failures = Vec::new();
    let phase_ms = (o.seconds * 1000.0) as u64;
    for n in 1..=o.listeners {
        members.push(group::start(
            bin,
            dir,
            &listener_name("volume", run, s, n),
            &spec,
        )?);
        let live = Live::default();
        let t0 = Instant::now();
        let reqs = timer::run(
            spec.ports.ipc,
            Duration::from_secs_f64(o.interval_s),
            o.sleep_s,
            t0,
            t0 + Duration::from_secs_f64(o.seconds),
            &live,
            pb,
            phase_ms * (n as u64 - 1),
        );
        child::check_interrupt()?;
        let pids: Vec<u32> = members.iter().map(|m| m.pid).collect();
        check(
            &reqs,
            &pids,
            &format!("section 5, {n} listener(s), {}", s.label()),
            &mut failures,
        );
        let stats = ReqStats::of(reqs.iter());
        // Answers that came back within the phase (the last requests sent
        // are answered after it).
        let within = reqs
            .iter()
            .filter(|r| r.error.is_none() && r.answered.is_some_and(|a| a <= o.seconds))
            .count();
        cells.push(VolumeCell {
            run,
            steering: s,
            listeners: n,
            seconds: o.seconds,
            throughput: within as f64 / o.seconds,
            stats,
        });
    }
    group::stop_all(&mut members);
    Ok((cells, failures))
}
