//! Figures 2 and 3 of Zero-Impact Crash Recovery for kdb+: what shipping
//! the log costs the primary. The bulk-insert client (`insert::insert`: one
//! connection, 10,000-row trade requests, each answered once journaled)
//! runs against `tickdb up` alone, with an async standby and with a
//! semi-sync standby; the primary's CPU and RSS are sampled as it runs (and
//! the standby's CPU, which shares the machine's cores).

use super::cluster::{self, Check, Cluster, Setup};
use super::Progress;
use crate::error::Result;
use crate::insert::{self, InsertOptions, InsertResult, InsertTarget, ProcSample};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

/// The setups of the figures, in the order each repeat runs them (one of
/// each per repeat, so a drift of the machine touches them alike).
pub const SETUPS: [Setup; 3] = [Setup::Alone, Setup::Async, Setup::SemiSync];

#[derive(Debug, Clone, Serialize)]
pub struct CostOptions {
    pub rows: u64,
    /// The primary's `--fsync` policies; each gets the three setups.
    pub fsync: Vec<String>,
    pub repeats: usize,
    /// An async standby's `--fsync` (a semi-sync one always runs `always`).
    pub standby_fsync: String,
    pub seed: u64,
}

/// One setup under one primary fsync policy: every repeat's run.
#[derive(Debug, Clone, Serialize)]
pub struct CostCell {
    pub primary_fsync: String,
    pub setup: Setup,
    pub standby_fsync: Option<String>,
    pub runs: Vec<InsertResult>,
    /// The standby's CPU (% of one core) averaged over each run.
    pub standby_cpu_avg: Vec<f64>,
}

/// Samples a process's CPU and RSS on a thread of its own until dropped.
struct Sampling {
    stop: Arc<AtomicBool>,
    samples: Arc<Mutex<Vec<ProcSample>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampling {
    fn start(pid: Option<u32>) -> Sampling {
        let stop = Arc::new(AtomicBool::new(false));
        let samples = Arc::new(Mutex::new(Vec::new()));
        let thread = pid.map(|pid| {
            let (stop, samples) = (stop.clone(), samples.clone());
            std::thread::spawn(move || insert::sampler(pid, stop, samples))
        });
        Sampling {
            stop,
            samples,
            thread,
        }
    }

    /// Stops sampling; the mean CPU over the samples, if any.
    fn finish(mut self) -> Option<f64> {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let v = self.samples.lock().map(|v| v.clone()).unwrap_or_default();
        (!v.is_empty()).then(|| v.iter().map(|s| s.cpu_pct).sum::<f64>() / v.len() as f64)
    }
}

impl Drop for Sampling {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
    }
}

fn insert_bar(mp: &MultiProgress, rows: u64, what: &str) -> ProgressBar {
    let pb = mp.add(ProgressBar::new(rows));
    pb.set_style(
        ProgressStyle::with_template(&format!(
            "  insert, {what} {{bar:30}} {{human_pos}}/{{human_len}} rows {{per_sec}}"
        ))
        .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// One run: fresh nodes, the insert, the check, the nodes stopped and
/// their data removed.
fn run_one(
    c: &Cluster,
    o: &CostOptions,
    policy: &str,
    setup: Setup,
    mp: &MultiProgress,
    checks: &mut Vec<Check>,
) -> Result<(InsertResult, Option<f64>)> {
    let name = format!("repl-insert-{policy}-{}", setup.label());
    let mut flags = vec!["--fsync".to_string(), policy.to_string()];
    flags.extend(setup.primary_flags());
    let mut p = c.primary(&format!("{name}-primary"), &flags)?;
    let mut s = match setup {
        Setup::Alone => None,
        _ => {
            let sf = vec!["--fsync".into(), setup.standby_fsync(&o.standby_fsync)];
            Some(c.standby(&format!("{name}-standby"), &p, &sf)?)
        }
    };
    cluster::wait_linked(&mut p, setup)?;
    let target = InsertTarget {
        http_port: p.http,
        pid: p.child.pid(),
    };
    let sampling = Sampling::start(s.as_ref().and_then(|s| s.child.pid()));
    let pb = insert_bar(mp, o.rows, &format!("--fsync {policy}, {}", setup.label()));
    let r = insert::insert(
        &target,
        &InsertOptions {
            rows: o.rows,
            seed: o.seed,
        },
        &pb,
    );
    pb.finish_and_clear();
    mp.remove(&pb);
    let standby_cpu = sampling.finish();
    let r = r?;
    if let Some(s) = s.as_mut() {
        checks.push(c.verify(&format!("insert, {name}"), &mut p, s)?);
        cluster::stop(s);
        cluster::remove_data(s);
    }
    cluster::stop(&mut p);
    cluster::remove_data(&p);
    Ok((r, standby_cpu))
}

pub fn run(
    c: &Cluster,
    o: &CostOptions,
    ui: &Progress,
    checks: &mut Vec<Check>,
) -> Result<Vec<CostCell>> {
    let (mp, steps) = (&ui.mp, &ui.steps);
    let mut cells: Vec<CostCell> = o
        .fsync
        .iter()
        .flat_map(|p| {
            SETUPS.iter().map(|&setup| CostCell {
                primary_fsync: p.clone(),
                setup,
                standby_fsync: (setup != Setup::Alone)
                    .then(|| setup.standby_fsync(&o.standby_fsync)),
                runs: Vec::new(),
                standby_cpu_avg: Vec::new(),
            })
        })
        .collect();
    for rep in 0..o.repeats {
        for cell in cells.iter_mut() {
            steps.set_message(format!(
                "bulk insert, --fsync {}, {} (repeat {} of {})",
                cell.primary_fsync,
                cell.setup.label(),
                rep + 1,
                o.repeats
            ));
            let (r, cpu) = run_one(c, o, &cell.primary_fsync, cell.setup, mp, checks)?;
            cell.runs.push(r);
            if let Some(cpu) = cpu {
                cell.standby_cpu_avg.push(cpu);
            }
            steps.inc(1);
        }
    }
    Ok(cells)
}

/// Runs the section takes (for the progress bar).
pub fn steps(o: &CostOptions) -> u64 {
    (o.fsync.len() * SETUPS.len() * o.repeats) as u64
}
