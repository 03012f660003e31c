//! False failovers: a healthy but starved primary must keep its role. For
//! the soak's length both cores are saturated by busy loops (`sh -c 'while
//! :; do :; done'`, one per core, at the nodes' own priority), the feed
//! runs, and every few seconds the primary is paused (SIGSTOP, then SIGCONT
//! after 150 ms: a long GC-like stall, well inside the lease). Any
//! promotion counts: epochs (each promotion begins one) and the nodes'
//! `tickdb_failover_promotions_total` before and after.

use super::group::{Group, NAMES, STABLE_TIMEOUT};
use super::{Check, Progress};
use crate::child::{self, Child};
use crate::error::{BenchError, Result};
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::process::Command;
use std::time::{Duration, Instant};

#[derive(Debug, Clone, Serialize)]
pub struct SoakOptions {
    pub seconds: f64,
    /// A pause every this many seconds (±10%, at random).
    pub pause_every_s: f64,
    pub pause_ms: u64,
    /// Busy loops (one per core).
    pub busy_loops: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct SoakResult {
    pub seconds: f64,
    pub pauses: u64,
    /// Longest a pause lasted (SIGSTOP to SIGCONT), ms.
    pub longest_pause_ms: f64,
    pub busy_loops: usize,
    pub primary: &'static str,
    pub epoch_before: u64,
    pub epoch_after: u64,
    pub promotions: u64,
    /// Times the primary fenced itself (stopped acknowledging while its
    /// lease could not be renewed in time): not a failover, reported.
    pub fences: u64,
    /// False failovers: promotions or new epochs, whichever is larger, or
    /// 1 when another node is the primary afterwards.
    pub false_failovers: u64,
    /// Why the rdb stopped during the soak, if it did (a fresh one replaced
    /// it). A failure: nothing should make it diverge here.
    pub rdb_diverged: Vec<String>,
}

fn busy(work: &std::path::Path, i: usize) -> Result<Child> {
    let mut cmd = Command::new("sh");
    cmd.args(["-c", "while :; do :; done"]);
    Child::spawn(
        "busy loop",
        &mut cmd,
        &work.join(format!("fo-soak-busy-{i}.log")),
    )
}

pub fn run(
    g: &mut Group,
    o: &SoakOptions,
    work: &std::path::Path,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<SoakResult> {
    let (p, _) = g.wait_stable(STABLE_TIMEOUT)?;
    ui.steps.set_message(format!(
        "soak: {} s, cores saturated, the primary {} paused {} ms every {} s",
        o.seconds, NAMES[p], o.pause_ms, o.pause_every_s
    ));
    let epoch = |g: &Group| (0..2).filter_map(|i| g.view(i).ok()).map(|v| v.epoch).max();
    let epoch_before = epoch(g).unwrap_or(0);
    let promotions_before = g.metric_sum("tickdb_failover_promotions_total");
    let fences_before = g.metric_sum("tickdb_failover_fences_total");
    let mut loops = (0..o.busy_loops)
        .map(|i| busy(work, i))
        .collect::<Result<Vec<_>>>()?;
    let bar = ui.mp.add(ProgressBar::new(o.seconds.ceil() as u64));
    bar.set_style(
        ProgressStyle::with_template("  soak {bar:30} {pos}/{len} s {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let t0 = Instant::now();
    let end = t0 + Duration::from_secs_f64(o.seconds);
    let (mut pauses, mut longest) = (0u64, 0f64);
    let mut deaths = Vec::new();
    let every = |base: f64| Duration::from_secs_f64(base * rand::random_range(0.9..1.1));
    // The first pause half a period in: a 10 s soak has two.
    let mut next = t0 + every(o.pause_every_s / 2.0);
    let result = (|| -> Result<()> {
        while Instant::now() < end {
            child::check_interrupt()?;
            g.alive(0)?;
            g.alive(1)?;
            g.feed_alive()?;
            if let Some(why) = g.rdb_exited() {
                deaths.push(why);
                g.restart_rdb()?;
            }
            for l in loops.iter_mut() {
                l.check_alive()?;
            }
            if Instant::now() >= next && next < end {
                let t = Instant::now();
                g.signal(p, libc::SIGSTOP);
                std::thread::sleep(Duration::from_millis(o.pause_ms));
                g.signal(p, libc::SIGCONT);
                longest = longest.max(t.elapsed().as_secs_f64() * 1000.0);
                pauses += 1;
                bar.set_message(format!("{pauses} pauses"));
                next += every(o.pause_every_s);
            }
            bar.set_position(t0.elapsed().as_secs());
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(())
    })();
    // Never leave the primary stopped.
    g.signal(p, libc::SIGCONT);
    for l in loops.iter_mut() {
        l.kill();
    }
    bar.finish_and_clear();
    result?;
    // A failover under way at the end would show within the lease.
    child::sleep(Duration::from_secs(1))?;
    let (now_p, _) = g.wait_stable(STABLE_TIMEOUT)?;
    let epoch_after = epoch(g).ok_or_else(|| BenchError::Server("soak: no node answers".into()))?;
    let promotions = g
        .metric_sum("tickdb_failover_promotions_total")
        .saturating_sub(promotions_before);
    let fences = g
        .metric_sum("tickdb_failover_fences_total")
        .saturating_sub(fences_before);
    let mut false_failovers = promotions.max(epoch_after.saturating_sub(epoch_before));
    if now_p != p {
        false_failovers = false_failovers.max(1);
    }
    checks.push(g.verify("soak")?);
    deaths.extend(g.take_rdb_deaths());
    ui.steps.inc(1);
    Ok(SoakResult {
        seconds: o.seconds,
        pauses,
        longest_pause_ms: longest,
        busy_loops: o.busy_loops,
        primary: NAMES[p],
        epoch_before,
        epoch_after,
        promotions,
        fences,
        false_failovers,
        rdb_diverged: deaths,
    })
}
