//! `tickdb bench sharding`: the experiments of the KX whitepaper "Socket
//! Sharding with kdb+ and Linux" (Marcus Clarke), run against tickdb on
//! this machine with the sizes scaled and stated, plus the query throughput
//! of rdbs sharing one PostgreSQL port.
//!
//! The listeners are `tickdb rdb` processes following one `tickdb tp` (fed
//! with trade rows over ILP) and sharing query ports with `rp,PORT`; each
//! has an `--admin-port` of its own, where the benchmark watches it load
//! and become ready. The clients speak kdb+ IPC where the paper's did (q's
//! `hopen`, `.z.i`, `"s)SELECT ..."`) and PostgreSQL (psycopg) for the
//! throughput section. kdb+ itself cannot be run here: the paper's figures
//! are quoted beside each table, and where tickdb has something the paper
//! did not (busy steering) the comparison is steering off against on.
//!
//! Sections (`--sections`):
//!
//! - `basic` (§3): 1000 connections over 4 listeners.
//! - `on-the-fly` (§4, Table 1): 2 s requests every second, a listener
//!   added each period.
//! - `volume` (§5): 0.2 s requests every 100 ms, 1, 2 and 3 listeners.
//! - `busy` (§6, Figure 4): one of two listeners blocked.
//! - `rolling` (§7): a rolling upgrade without and with a shared port.
//! - `throughput`: 1, 2 and 4 rdbs behind one PostgreSQL port.
//!
//! Busy steering needs `net.ipv4.tcp_migrate_req=1`: the benchmark sets it
//! for its run when it is root (and puts the old value back), and says when
//! it cannot. Every section checks what it can (every request answered,
//! with the right value, by a member of the group; the rdbs' answers equal;
//! no failed request in the rolling upgrade on `rp`) and a failed check
//! fails the benchmark.

pub mod basic;
pub mod busy;
pub mod fly;
pub mod group;
pub mod q;
pub mod rolling;
pub mod throughput;
pub mod timer;

use crate::error::Result;
use crate::stats::{in_order, median_item, si, Samples};
use indicatif::{MultiProgress, ProgressBar, ProgressStyle};
use serde::Serialize;
use std::path::Path;

pub const SECTIONS: [&str; 6] = [
    "basic",
    "on-the-fly",
    "volume",
    "busy",
    "rolling",
    "throughput",
];

/// The paper's title and author, as the report quotes them.
pub const PAPER: &str =
    "\"Socket Sharding with kdb+ and Linux\" (KX technical whitepaper, Marcus Clarke)";

/// Busy steering off (`--no-busy-steering`, the kernel alone, as kdb+) or on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Steering {
    Off,
    On,
}

impl Steering {
    pub const BOTH: [Steering; 2] = [Steering::Off, Steering::On];

    pub fn short(self) -> &'static str {
        match self {
            Steering::Off => "off",
            Steering::On => "on",
        }
    }

    pub fn label(self) -> &'static str {
        match self {
            Steering::Off => "steering off",
            Steering::On => "steering on",
        }
    }

    /// A single-threaded listener (one query at a time, like a kdb+
    /// process), with steering off or on (`--busy-query-ms` when given).
    pub fn flags(self, busy_query_ms: Option<u64>) -> Vec<String> {
        let mut f: Vec<String> = ["--query-concurrency", "1", "--query-threads", "1"]
            .map(String::from)
            .to_vec();
        match (self, busy_query_ms) {
            (Steering::Off, _) => f.push("--no-busy-steering".into()),
            (Steering::On, Some(ms)) => f.extend(["--busy-query-ms".into(), ms.to_string()]),
            (Steering::On, None) => {}
        }
        f
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct ShardingOptions {
    pub sections: Vec<String>,
    pub quick: bool,
    /// Trade rows fed to the tp every listener follows.
    pub rows: u64,
    pub basic: basic::BasicOptions,
    pub fly: fly::FlyOptions,
    pub volume: fly::VolumeOptions,
    pub busy: busy::BusyOptions,
    pub rolling: rolling::RollingOptions,
    pub throughput: throughput::ThroughputOptions,
    pub seed: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct ShardingReport {
    pub options: ShardingOptions,
    pub cores: usize,
    pub sysctl: group::Sysctl,
    pub basic: Vec<basic::BasicRun>,
    pub fly: Vec<fly::FlyRun>,
    pub volume: Vec<fly::VolumeCell>,
    pub busy: Vec<busy::BusyRun>,
    pub rolling: Option<rolling::RollingRun>,
    pub throughput: Option<throughput::ThroughputRun>,
    /// Failed checks: any fails the benchmark.
    pub failures: Vec<String>,
    pub seconds: f64,
    pub machine: String,
    pub date: String,
    pub profile: &'static str,
}

fn bar(mp: &MultiProgress, len: u64, template: &str) -> ProgressBar {
    let pb = mp.add(ProgressBar::new(len));
    pb.set_style(
        ProgressStyle::with_template(template).unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    pb
}

/// Runs `f` for steering off and on at the same time, on ports and
/// listeners of their own, each with its progress bar. Their requests
/// mostly sleep (`pg_sleep`), so the two barely share the CPU.
fn off_and_on<T: Send>(
    mp: &MultiProgress,
    len: u64,
    what: &str,
    unit: &str,
    f: impl Fn(Steering, &ProgressBar) -> Result<T> + Sync,
) -> Result<(T, T)> {
    let bars = Steering::BOTH.map(|s| {
        bar(
            mp,
            len,
            &format!(
                "{what}, {:<12} {{bar:30}} {{pos}}/{{len}} {unit} {{msg}}",
                s.label()
            ),
        )
    });
    let (a, b) = std::thread::scope(|sc| {
        let f = &f;
        let hs = [0, 1].map(|i| {
            let pb = &bars[i];
            sc.spawn(move || f(Steering::BOTH[i], pb))
        });
        let [a, b] = hs;
        (
            a.join().unwrap_or_else(|_| {
                Err(crate::error::BenchError::Server(format!(
                    "{what}: a thread panicked"
                )))
            }),
            b.join().unwrap_or_else(|_| {
                Err(crate::error::BenchError::Server(format!(
                    "{what}: a thread panicked"
                )))
            }),
        )
    });
    for b in &bars {
        b.finish_and_clear();
    }
    Ok((a?, b?))
}

pub fn run(bin: &Path, work: &Path, o: &ShardingOptions) -> Result<ShardingReport> {
    let started = std::time::Instant::now();
    let machine = crate::machine::Machine::probe(work);
    let wants = |s: &str| o.sections.iter().any(|x| x == s);
    // A section asked for runs at least once; one not asked for, never.
    let rounds = |s: &str, runs: usize| if wants(s) { runs.max(1) } else { 0 };
    let guard = group::MigrateReqGuard::acquire();
    let mp = MultiProgress::new();
    let mut failures = Vec::new();
    let dir = group::dir(work, "sharding")?;
    let needs_feed = SECTIONS
        .iter()
        .filter(|s| **s != "rolling")
        .any(|s| wants(s));
    let feed = if needs_feed {
        eprintln!(
            "sharding: feeding {} trade rows to the tp",
            si(o.rows as f64)
        );
        Some(group::feed_trades(bin, &dir, o.rows, o.seed)?)
    } else {
        None
    };
    let tp = feed.as_ref().map(|f| f.tp.tp).unwrap_or(0);

    let mut basic = Vec::new();
    let basic_rounds = rounds("basic", o.basic.runs);
    for run in 0..basic_rounds {
        let pb = bar(
            &mp,
            o.basic.connections as u64,
            &format!(
                "§3 basic, run {}: connections {{bar:30}} {{pos}}/{{len}} {{per_sec}}",
                run + 1
            ),
        );
        let r = basic::run_basic(bin, &dir, tp, run, &o.basic, &pb);
        pb.finish_and_clear();
        let r = r?;
        eprintln!(
            "sharding §3, run {}: {} connections over {} listeners: {}; {} consecutive to the same listener",
            run + 1,
            r.connections,
            r.listeners,
            r.per_listener
                .iter()
                .map(|(_, n)| format!("{:.1}%", 100.0 * *n as f64 / r.connections as f64))
                .collect::<Vec<_>>()
                .join(", "),
            r.same_as_previous
        );
        failures.extend(r.failures.clone());
        basic.push(r);
    }

    let mut fly_runs = Vec::new();
    let fly_rounds = rounds("on-the-fly", o.fly.runs);
    for run in 0..fly_rounds {
        let len = (o.fly.period_s * o.fly.listeners as f64 * 1000.0) as u64;
        let what = format!("§4 on the fly, run {}", run + 1);
        let (a, b) = off_and_on(&mp, len, &what, "ms", |s, pb| {
            fly::run_fly(bin, &dir, tp, run, s, &o.fly, pb)
        })?;
        for r in [a, b] {
            eprintln!(
                "sharding §4, run {}, {}: {}",
                run + 1,
                r.steering.label(),
                r.periods
                    .iter()
                    .map(|p| format!(
                        "period {}: {} requests, {} avg",
                        p.period,
                        p.stats.answered,
                        secs(p.stats.mean_s)
                    ))
                    .collect::<Vec<_>>()
                    .join("; ")
            );
            failures.extend(r.failures.clone());
            fly_runs.push(r);
        }
    }

    let mut volume = Vec::new();
    let volume_rounds = rounds("volume", o.volume.runs);
    for run in 0..volume_rounds {
        let len = (o.volume.seconds * o.volume.listeners as f64 * 1000.0) as u64;
        let what = format!("§5 volume, run {}", run + 1);
        let (a, b) = off_and_on(&mp, len, &what, "ms", |s, pb| {
            fly::run_volume(bin, &dir, tp, run, s, &o.volume, pb)
        })?;
        for (cells, fs) in [a, b] {
            for c in &cells {
                eprintln!(
                    "sharding §5, run {}, {} listener(s), {}: {:.1} answers/s, median {}, p99 {}",
                    run + 1,
                    c.listeners,
                    c.steering.label(),
                    c.throughput,
                    secs(c.stats.p50_s),
                    secs(c.stats.p99_s)
                );
            }
            volume.extend(cells);
            failures.extend(fs);
        }
        volume.sort_by_key(|c| (c.run, c.listeners, c.steering == Steering::On));
    }

    let mut busy_runs = Vec::new();
    let busy_rounds = rounds("busy", o.busy.runs);
    for run in 0..busy_rounds {
        let len = ((o.busy.block_s + 2.0 * o.busy.around_s) * 1000.0) as u64;
        let what = format!("§6 busy, run {}", run + 1);
        let (a, b) = off_and_on(&mp, len, &what, "ms", |s, pb| {
            busy::run_busy(bin, &dir, tp, run, s, &o.busy, pb)
        })?;
        for r in [a, b] {
            eprintln!(
                "sharding §6, run {}, {}: during the {:.1} s block {} connections, {} to the blocked listener ({} after {} ms), max wait {}",
                run + 1,
                r.steering.label(),
                r.block_end_s,
                r.during,
                r.to_blocked,
                r.to_blocked_after_busy_ms,
                r.busy_query_ms,
                secs(r.max_wait_s)
            );
            failures.extend(r.failures.clone());
            busy_runs.push(r);
        }
    }

    let throughput = if wants("throughput") {
        let n = (o.throughput.rdbs.len() * o.throughput.runs.max(1)) as u64;
        let pb = bar(
            &mp,
            n * ((o.throughput.seconds * 1000.0) as u64 + 700),
            "throughput (PostgreSQL) {bar:30} {pos}/{len} ms",
        );
        let r = throughput::run_throughput(bin, &dir, tp, &o.throughput, &pb);
        pb.finish_and_clear();
        let r = r?;
        for c in &r.cells {
            eprintln!(
                "sharding throughput, round {}: {} rdb(s): {:.1} queries/s",
                c.run + 1,
                c.rdbs,
                c.qps
            );
        }
        failures.extend(r.failures.clone());
        Some(r)
    } else {
        None
    };
    // The shared tp is not needed any more: the rolling upgrade has its own.
    drop(feed);

    let rolling = if wants("rolling") {
        let steps = 1 + 2 * o.rolling.runs.max(1) as u64;
        let pb = bar(&mp, steps, "§7 rolling upgrade {bar:30} {pos}/{len} {msg}");
        let r = rolling::run_rolling(bin, &dir, &o.rolling, &pb);
        pb.finish_and_clear();
        let r = r?;
        for u in &r.upgrades {
            eprintln!(
                "sharding §7, run {}, {}: load {:.2} s, downtime {:.2} s, {} failed requests",
                u.run + 1,
                if u.shared { "rp" } else { "plain port" },
                u.load_s,
                u.downtime_s,
                u.failed
            );
        }
        failures.extend(r.failures.clone());
        Some(r)
    } else {
        None
    };

    let sysctl = guard.state.clone();
    drop(guard);
    Ok(ShardingReport {
        options: o.clone(),
        cores: machine.cores,
        sysctl,
        basic,
        fly: fly_runs,
        volume,
        busy: busy_runs,
        rolling,
        throughput,
        failures,
        seconds: started.elapsed().as_secs_f64(),
        machine: machine.summary(),
        date: crate::today_utc(),
        profile: crate::build_profile(),
    })
}

fn secs(x: Option<f64>) -> String {
    match x {
        Some(s) if s < 1.0 => format!("{:.0} ms", s * 1000.0),
        Some(s) => format!("{s:.3} s"),
        None => "n/a".into(),
    }
}

fn secs_of(x: f64) -> String {
    secs(Some(x))
}

/// "**median** (min–max)", with a `*` when noisy: the median in bold, the
/// range and mark outside it.
fn bold_median(x: &Samples, fmt: fn(f64) -> String) -> String {
    let Some(m) = x.median() else {
        return "n/a".into();
    };
    let mut s = format!("**{}**", fmt(m));
    if let (Some(lo), Some(hi), true) = (x.min(), x.max(), x.0.len() > 1) {
        s.push_str(&format!(" ({}–{})", fmt(lo), fmt(hi)));
        if x.noisy() {
            s.push_str(" *");
        }
    }
    s
}

/// A count of each run, as "median (min–max)".
fn counts<T>(of: &[&T], f: fn(&T) -> usize) -> String {
    of.iter()
        .map(|x| f(x) as f64)
        .collect::<Samples>()
        .describe(|x| format!("{x:.0}"))
}

/// Listener 1's socket on the shared port during the block, over the runs
/// of one steering mode: when it closed and opened again, or that it stayed.
fn busy_socket(of: &[&busy::BusyRun]) -> String {
    let closed: Vec<&&busy::BusyRun> = of.iter().filter(|r| r.left_at_s.is_some()).collect();
    let open_min = of.iter().filter_map(|r| r.listeners_min).min();
    if closed.is_empty() {
        return match open_min {
            Some(n) => format!("open throughout ({n} listeners)"),
            None => "n/a".into(),
        };
    }
    let left: Samples = closed
        .iter()
        .filter_map(|r| Some(r.left_at_s? - r.block_running_s.unwrap_or(0.0)))
        .collect();
    let back: Samples = closed
        .iter()
        .filter_map(|r| Some((r.back_at_s? - r.block_end_s).max(0.0)))
        .collect();
    let mut d = format!(
        "closed {} into the block",
        left.describe(|t| format!("{:.0} ms", t * 1000.0))
    );
    if !back.0.is_empty() {
        d.push_str(&format!(
            ", open again {} after it ended",
            back.describe(|t| format!("{:.0} ms", t * 1000.0))
        ));
    }
    if closed.len() < of.len() {
        d.push_str(&format!(
            " (in {} of {} runs; open throughout in the others)",
            closed.len(),
            of.len()
        ));
    }
    d
}

impl ShardingReport {
    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    fn steering_note(&self, s: Steering) -> &'static str {
        match s {
            Steering::Off => "steering off",
            Steering::On if self.sysctl.steering_possible() => "steering on",
            Steering::On => "steering on (inactive: tcp_migrate_req is 0)",
        }
    }

    pub fn markdown(&self) -> String {
        let o = &self.options;
        let mut s = String::new();
        s.push_str(&format!(
            "The experiments of {PAPER}, run against tickdb on this machine ({} cores available; the listeners, the tp and the clients all share them), with the paper's durations scaled as stated in each part{}. \
             Listeners are `tickdb rdb` processes following one `tickdb tp` fed {} `trade` rows over ILP (500 symbols), sharing their query ports with `rp,PORT` (SO_REUSEPORT); each also has an `--admin-port` of its own, where the benchmark sees it load and become ready. \
             A member listens on a shared port only once it is ready. Clients speak kdb+ IPC as the paper's q clients did (login, `.z.i`, `\"s)SELECT …\"`), and PostgreSQL (psycopg) for the throughput part. \
             kdb+ itself cannot be run here, so the paper's figures are quoted beside ours. tickdb adds busy steering, which the paper does not have: a member whose queries saturate it closes its shared listening sockets (queued connections move to the other members when `net.ipv4.tcp_migrate_req` is 1) and reopens them when it has capacity again, never closing the last listener on a port. Parts 4 to 6 are run with steering off (`--no-busy-steering`: the kernel alone, as in kdb+) and on, the two at the same time on ports and listeners of their own: their requests mostly sleep, so they barely share the CPU. {}.\n\n",
            self.cores,
            if o.quick { " (`--quick`: shorter still; the figures are indicative only)" } else { "" },
            si(o.rows as f64),
            self.sysctl.note
        ));
        if !self.basic.is_empty() {
            s.push_str(&self.basic_markdown());
        }
        if !self.fly.is_empty() {
            s.push_str(&self.fly_markdown());
        }
        if !self.volume.is_empty() {
            s.push_str(&self.volume_markdown());
        }
        if !self.busy.is_empty() {
            s.push_str(&self.busy_markdown());
        }
        if let Some(r) = &self.rolling {
            s.push_str(&self.rolling_markdown(r));
        }
        if let Some(t) = &self.throughput {
            s.push_str(&self.throughput_markdown(t));
        }
        s.push_str(&format!(
            "\nMeasured on {}, {}, with a {} build, in {:.0} s.\n",
            self.machine, self.date, self.profile, self.seconds
        ));
        if self.failures.is_empty() {
            s.push_str("\nChecks: all passed (every request answered with the expected value by a listener of its group; every rdb gave the same answer; no failed request in the rolling upgrade on `rp`).\n");
        } else {
            s.push_str("\nChecks FAILED:\n\n");
            for f in &self.failures {
                s.push_str(&format!("- {f}\n"));
            }
        }
        s
    }

    fn basic_markdown(&self) -> String {
        let runs: Vec<&basic::BasicRun> = self.basic.iter().collect();
        let Some(first) = runs.first() else {
            return String::new();
        };
        let (listeners, connections) = (first.listeners, first.connections);
        let each =
            |f: fn(&basic::BasicRun) -> f64| -> Samples { runs.iter().map(|r| f(r)).collect() };
        let mut s = String::from("### 3. Basic sharding implementation\n\n");
        s.push_str(&format!(
            "{listeners} listeners share one kdb+ IPC port (`--ipc-port rp,PORT`, `--ipc-connections-max {}`); a client opens {connections} connections one after the other, keeps them all open, and asks `.z.i` (the listener's pid) on each, as the paper's ``{{h,:hopen `::5000}}each til 1000``. {} for all of them.\n\n",
            connections + 64,
            each(|r| r.seconds).describe(|x| format!("{x:.2} s")),
        ));
        s.push_str(&format!(
            "{} run(s), each on {listeners} new listeners (`--scenario-runs`): each figure is the median (min–max) over the runs, `*` marking a spread over 1.3×; listeners are numbered in the order they were started.\n\n",
            runs.len()
        ));
        s.push_str("| listener | connections | share | paper's share |\n|---|---|---|---|\n");
        for i in 0..listeners {
            let n: Samples = runs
                .iter()
                .filter_map(|r| r.per_listener.get(i))
                .map(|(_, n)| *n as f64)
                .collect();
            let share: Samples = n.0.iter().map(|n| 100.0 * n / connections as f64).collect();
            s.push_str(&format!(
                "| listener {} | {} | {} | {} |\n",
                i + 1,
                n.describe(|x| format!("{x:.0}")),
                share.describe(|x| format!("{x:.1}%")),
                basic::PAPER_SHARES
                    .get(i)
                    .map(|x| format!("{x:.1}%"))
                    .unwrap_or_else(|| "—".into())
            ));
        }
        let pairs = connections.saturating_sub(1);
        let same = each(|r| r.same_as_previous as f64);
        let typical = median_item(&runs, |r| r.same_as_previous as f64);
        s.push_str(&format!(
            "\nConsecutive connections to the same listener (the 0b's of the paper's `differ`): {} of {pairs} ({}; uniformly random choice among {listeners} gives {:.1}%); the longest run to one listener: {}. The first 20 of `differ`, in the run with the median count: `{}` (the paper's: `10111010110110100100`). The kernel picks a listener by a hash of each connection's addresses and ports, so the split is even but not round-robin, as in the paper.\n\n",
            same.describe(|x| format!("{x:.0}")),
            same.median().map_or_else(|| "n/a".to_string(), |m| format!("{:.1}%", 100.0 * m / pairs.max(1) as f64)),
            100.0 / listeners.max(1) as f64,
            counts(&runs, |r| r.longest_run),
            typical.map_or("", |r| r.differ_head.as_str())
        ));
        s
    }

    fn fly_markdown(&self) -> String {
        let o = &self.options.fly;
        let scale = o.period_s / fly::PAPER_PERIOD_S;
        let mut s =
            String::from("### 4. Adding more listeners on the fly (the paper's Table 1)\n\n");
        s.push_str(&format!(
            "Single-threaded listeners (`--query-concurrency 1 --query-threads 1`, one query at a time like a kdb+ process) share a kdb+ IPC port. The paper's timer client: every {} s it notes the time, opens a connection (`hopen`), sends a request that takes {} s (`s)select pg_sleep({})`) and records the time taken when the answer comes back. In kdb+ a busy listener does not complete `hopen`, which holds up the single-threaded client and its timer; tickdb accepts while busy, so the client's `hopen` here also asks `s)select pg_backend_pid()`, which waits for the listener's only query slot as the paper's `hopen` waits for its busy listener. \
             One listener for the first period, a second started at the start of the second period, a third at the third; a period is {} s here against the paper's 60 s (×{scale:.2}), so the paper's request counts are scaled by {scale:.2} for comparison. Requests are grouped by when the timer fired, as the paper's `select avg timeTaken by sendTime.minute`. A listener's join time includes its load (replaying the tp's journal): when each became ready is stated.\n\n",
            o.interval_s, o.sleep_s, o.sleep_s, o.period_s
        ));
        let runs = in_order(&self.fly, |r| r.run).len();
        s.push_str(&format!(
            "{runs} run(s) of the scenario, steering off and on in each (`--scenario-runs`; the paper's Table 1 averages 3 tests): each figure is the median (min–max) over the runs, `*` marking a spread over 1.3×, and failed requests are summed.\n\n"
        ));
        for steering in in_order(&self.fly, |r| r.steering) {
            let of: Vec<&fly::FlyRun> =
                self.fly.iter().filter(|r| r.steering == steering).collect();
            s.push_str(&format!("**{}**", self.steering_note(steering)));
            let joined = of.first().map_or(0, |r| r.joins.len());
            let joins: Vec<String> = (1..joined)
                .map(|k| {
                    let load: Samples = of
                        .iter()
                        .filter_map(|r| r.joins.get(k))
                        .map(|j| j.load_s)
                        .collect();
                    format!(
                        "listener {} started at the start of period {}, ready after a load of {}",
                        k + 1,
                        k + 1,
                        load.describe(|x| format!("{x:.2} s"))
                    )
                })
                .collect();
            if !joins.is_empty() {
                s.push_str(&format!(" — {}", joins.join("; ")));
            }
            s.push_str(":\n\n| period | listeners | requests processed | average response time | median | p99 | failed | paper: requests (×scale) | paper: average response time |\n|---|---|---|---|---|---|---|---|---|\n");
            let periods = of.first().map_or(0, |r| r.periods.len());
            for i in 0..periods {
                let at: Vec<&fly::Period> = of.iter().filter_map(|r| r.periods.get(i)).collect();
                let each = |f: fn(&fly::ReqStats) -> Option<f64>| -> Samples {
                    at.iter().filter_map(|p| f(&p.stats)).collect()
                };
                s.push_str(&format!(
                    "| {} ({:.0}–{:.0} s) | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                    i + 1,
                    i as f64 * o.period_s,
                    (i + 1) as f64 * o.period_s,
                    at.first().map_or(0, |p| p.listeners),
                    each(|x| Some(x.answered as f64)).describe(|x| format!("{x:.0}")),
                    each(|x| x.mean_s).describe(secs_of),
                    each(|x| x.p50_s).describe(secs_of),
                    each(|x| x.p99_s).describe(secs_of),
                    at.iter().map(|p| p.stats.failed).sum::<usize>(),
                    fly::PAPER_REQUESTS
                        .get(i)
                        .map(|x| format!("{x} ({:.1})", x * scale))
                        .unwrap_or_else(|| "—".into()),
                    fly::PAPER_AVG_S
                        .get(i)
                        .map(|x| format!("{x:.3} s"))
                        .unwrap_or_else(|| "—".into()),
                ));
            }
            s.push('\n');
        }
        s
    }

    fn volume_markdown(&self) -> String {
        let o = &self.options.volume;
        let mut s = String::from("### 5. Sending a large volume of requests\n\n");
        s.push_str(&format!(
            "The same client and listeners as part 4, its timer every {:.0} ms and each request {} s (`s)select pg_sleep({})`), against 1, 2 and 3 listeners, {} s each (the paper does not give its duration); each listener is added once the previous phase's answers are in. \
             Throughput is the answers that came back during the phase, per second; the other columns cover every request sent in it. The paper (its Figures 1 to 3, no figures given in numbers): one listener gives a consistent response time; two and three process more requests with a lower overall response time but a higher variance, because consecutive connections can land on the same listener.\n\n",
            o.interval_s * 1000.0,
            o.sleep_s,
            o.sleep_s,
            o.seconds
        ));
        let runs = in_order(&self.volume, |c| c.run).len();
        s.push_str(&format!(
            "{runs} run(s), every cell in each (`--scenario-runs`): each figure is the median (min–max) over the runs, `*` marking a spread over 1.3×; requests and failures are summed, and \"per listener\" is the answers of the run with the median answers/s (the lower middle one for an even count).\n\n"
        ));
        s.push_str("| listeners | steering | requests | answers/s | median | p99 | max | failed | per listener |\n|---|---|---|---|---|---|---|---|---|\n");
        for (listeners, steering) in in_order(&self.volume, |c| (c.listeners, c.steering)) {
            let cells: Vec<&fly::VolumeCell> = self
                .volume
                .iter()
                .filter(|c| c.listeners == listeners && c.steering == steering)
                .collect();
            let each = |f: fn(&fly::ReqStats) -> Option<f64>| -> Samples {
                cells.iter().filter_map(|c| f(&c.stats)).collect()
            };
            let throughput: Samples = cells.iter().map(|c| c.throughput).collect();
            let typical = median_item(&cells, |c| c.throughput);
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                listeners,
                self.steering_note(steering),
                cells.iter().map(|c| c.stats.sent).sum::<usize>(),
                throughput.describe(|x| format!("{x:.2}")),
                each(|x| x.p50_s).describe(secs_of),
                each(|x| x.p99_s).describe(secs_of),
                each(|x| x.max_s).describe(secs_of),
                cells.iter().map(|c| c.stats.failed).sum::<usize>(),
                typical.map_or_else(String::new, |c| c
                    .stats
                    .per_listener
                    .values()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" / "))
            ));
        }
        s.push_str(&format!(
            "\nAt most {:.0} requests a second can be answered by one listener (each takes {} s of its only query slot) and the timer offers {:.0} a second.\n\n",
            1.0 / o.sleep_s,
            o.sleep_s,
            1.0 / o.interval_s
        ));
        s
    }

    fn busy_markdown(&self) -> String {
        let o = &self.options.busy;
        let mut s = String::from("### 6. Routing connections to multiple listeners when one is busy (the paper's Figure 4)\n\n");
        s.push_str(&format!(
            "Two single-threaded listeners share a kdb+ IPC port. A client opens a connection every {:.0} ms, asks `s)select pg_backend_pid()` (which listener answered; it needs the listener's only query slot) and closes it; each connection runs on a thread of its own, so every connection the kernel hands the blocked listener is seen. {} s into the run, listener 1 is blocked for {} s (the paper: 10 s) by `select pg_sleep({})` sent to its `--admin-port` over HTTP, which takes its only query slot. \
             A connection's wait is from its connect to its answer; one that lands on the blocked listener waits behind the block, as the paper's client hangs until the block ends. The steering run uses `--busy-query-ms {}` (and `--busy-queries-max` at its default, the query concurrency: 1).\n\n",
            o.interval_s * 1000.0,
            o.around_s,
            o.block_s,
            o.block_s,
            o.busy_query_ms
        ));
        s.push_str(&format!(
            "| steering | connections during the block | to the blocked listener | of those, opened {ms} ms or more into the block | to the other | failed | median wait | p99 wait | max wait | max wait, opened {ms} ms or more into the block | listener 1's socket on the port |\n|---|---|---|---|---|---|---|---|---|---|---|\n",
            ms = o.busy_query_ms
        ));
        let runs = in_order(&self.busy, |r| r.run).len();
        for steering in in_order(&self.busy, |r| r.steering) {
            let of: Vec<&busy::BusyRun> = self
                .busy
                .iter()
                .filter(|r| r.steering == steering)
                .collect();
            let count = |f: fn(&busy::BusyRun) -> usize| counts(&of, f);
            let wait = |f: fn(&busy::BusyRun) -> Option<f64>| -> String {
                of.iter()
                    .filter_map(|r| f(r))
                    .collect::<Samples>()
                    .describe(secs_of)
            };
            s.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
                self.steering_note(steering),
                count(|r| r.during),
                count(|r| r.to_blocked),
                count(|r| r.to_blocked_after_busy_ms),
                count(|r| r.to_other),
                of.iter().map(|r| r.failed).sum::<usize>(),
                wait(|r| r.p50_wait_s),
                wait(|r| r.p99_wait_s),
                wait(|r| r.max_wait_s),
                wait(|r| r.max_wait_after_busy_ms_s),
                busy_socket(&of)
            ));
        }
        let starts: Vec<String> = in_order(&self.busy, |r| r.steering)
            .into_iter()
            .map(|st| {
                let at: Samples = self
                    .busy
                    .iter()
                    .filter(|r| r.steering == st)
                    .filter_map(|r| r.block_running_s)
                    .collect();
                format!(
                    "{}: {}",
                    st.label(),
                    at.describe(|t| format!("{:.0} ms", t * 1000.0))
                )
            })
            .collect();
        s.push_str(&format!(
            "\n{runs} run(s), steering off and on in each (`--scenario-runs`): each figure is the median (min–max) over the runs, `*` marking a spread over 1.3×, and failures are summed. \
             \"Into the block\" counts from when listener 1's `/status` first showed the block running after it was sent ({}); the block ended when its answer came back. Listener 1's socket is watched in `/proc/net/tcp` every 20 ms.\n",
            starts.join(", ")
        ));
        let on: Vec<&busy::BusyRun> = self
            .busy
            .iter()
            .filter(|r| r.steering == Steering::On)
            .collect();
        if !on.is_empty() {
            let late: Vec<String> = on
                .iter()
                .map(|r| r.to_blocked_after_busy_ms.to_string())
                .collect();
            let met = on.iter().all(|r| r.to_blocked_after_busy_ms == 0);
            s.push_str(&format!(
                "\nTarget: with steering, no connection opened {} ms or more into the block waits behind the blocked listener, in any run: {} connection(s) did, run by run ({}).{}\n",
                o.busy_query_ms,
                late.join(", "),
                if met { "met" } else { "not met" },
                if self.sysctl.steering_possible() {
                    ""
                } else {
                    " Steering could not be active in this run (tcp_migrate_req is 0)."
                }
            ));
        }
        s.push('\n');
        s
    }

    fn rolling_markdown(&self, r: &rolling::RollingRun) -> String {
        let o = &self.options.rolling;
        let mut s = String::from("### 7. Minimizing downtime with rolling updates\n\n");
        s.push_str(&format!(
            "The paper's HDB sleeps {:.0} s to mimic its load; here the load is real: a listener replays a tp journal of {} rows (the feed's trades and quotes, 1:10, 10k-row writes, journaled in {:.1} s) before it is ready. The client is the paper's `.util.connect`: a failed connect is retried after 1, 2, 4 and 8 s (five tries, then it gives up; this one then starts over at its next tick), and a connection the server closes is reopened the same way and the request sent again. It asks `s)select count(*) from trade` every {:.0} ms and checks each answer against the {} trades loaded. \
             (a) without a shared port: SIGTERM to the listener, and once it has exited the new one is started on the same plain port; (b) with `rp,PORT`: the new one is started on the same port, and once it is ready (admin `/health` 200, `/status` ready, its shared port listening) the old one gets SIGTERM and drains (stops accepting, answers what is in flight, closes idle sessions, exits). \
             Downtime is the longest time between two right answers from the start of the upgrade on; failed requests are those that got no right answer (an error, or no connection after five tries).\n\n",
            rolling::PAPER_LOAD_S,
            si(r.rows as f64),
            r.feed_s,
            o.interval_s * 1000.0,
            r.trades
        ));
        let runs = in_order(&r.upgrades, |u| u.run).len();
        s.push_str(&format!(
            "{runs} run(s) of both upgrades against the one journal (`--scenario-runs`): each figure is the median (min–max) over the runs, `*` marking a spread over 1.3×; failed requests, lost connections and failed connect tries are summed.\n\n"
        ));
        s.push_str("| upgrade | new listener's load | old listener's drain | downtime seen by the client | failed requests | answers (old / new) | connections lost / failed connect tries | paper |\n|---|---|---|---|---|---|---|---|\n");
        for shared in [false, true] {
            let of = r.of(shared);
            if of.is_empty() {
                continue;
            }
            let each =
                |f: fn(&rolling::Upgrade) -> f64| -> Samples { of.iter().map(|u| f(u)).collect() };
            let count = |f: fn(&rolling::Upgrade) -> usize| counts(&of, f);
            let sum =
                |f: fn(&rolling::Upgrade) -> usize| -> usize { of.iter().map(|u| f(u)).sum() };
            s.push_str(&format!(
                "| {} | {} | {} ({}) | {} | {} | {} / {} | {} / {} | {} |\n",
                if shared {
                    "(b) `rp,PORT`: start the new one, then stop the old"
                } else {
                    "(a) plain port: stop, then start the new one"
                },
                each(|u| u.load_s).describe(|x| format!("{x:.2} s")),
                each(|u| u.drain_s).describe(|x| format!("{x:.2} s")),
                in_order(&of, |u| u.old_exit.as_str()).join("; "),
                bold_median(&each(|u| u.downtime_s), |x| format!("{x:.2} s")),
                sum(|u| u.failed),
                count(|u| u.by_old),
                count(|u| u.by_new),
                sum(|u| u.lost),
                sum(|u| u.connect_failures),
                if shared {
                    "reconnected at once (1 ms)".to_string()
                } else {
                    format!(
                        "{:.0} s waiting for a {:.0} s load",
                        rolling::PAPER_DOWNTIME_S,
                        rolling::PAPER_LOAD_S
                    )
                }
            ));
        }
        if r.of(false)
            .iter()
            .any(|u| u.failed_examples.iter().any(|e| e.contains("not ready")))
        {
            s.push_str("\nIn (a) the new listener opens its own plain port at once and answers queries with a \"not ready\" error while it loads (a shared port opens only once the member is ready), so the client sees failed requests rather than the paper's `hopen` that hangs until the load is done.\n");
        }
        let loads: Vec<String> = in_order(&r.upgrades, |u| u.run)
            .into_iter()
            .map(|run| {
                let l: Vec<String> = r
                    .upgrades
                    .iter()
                    .filter(|u| u.run == run)
                    .flat_map(|u| [u.old_load_s, u.load_s])
                    .map(|x| format!("{x:.2} s"))
                    .collect();
                format!("run {}: {}", run + 1, l.join(", "))
            })
            .collect();
        s.push_str(&format!(
            "\nThe loads of the same journal, in order in each run (the old and new listener of (a), then of (b)): {}; a listener that loads while another holds the same rows in memory can take longer.\n",
            loads.join("; ")
        ));
        for shared in [false, true] {
            // The first run that failed requests, as an example of why.
            if let Some(u) = r
                .of(shared)
                .into_iter()
                .find(|u| !u.failed_examples.is_empty())
            {
                s.push_str(&format!(
                    "\n{}, run {}: first failed requests (time from the start of the upgrade): {}.",
                    if u.shared { "(b)" } else { "(a)" },
                    u.run + 1,
                    u.failed_examples.join("; ")
                ));
            }
        }
        let failed: Vec<String> = r.of(true).iter().map(|u| u.failed.to_string()).collect();
        let met = r.of(true).iter().all(|u| u.failed == 0);
        s.push_str(&format!(
            "\n\nTarget: zero failed requests in the rolling upgrade on `rp`, in every run ({}: {}).\n\n",
            failed.join(", "),
            if met { "met" } else { "NOT met" }
        ));
        s
    }

    fn throughput_markdown(&self, t: &throughput::ThroughputRun) -> String {
        let o = &self.options.throughput;
        let mut s = String::from("### Query throughput: rdbs sharing one PostgreSQL port\n\n");
        if let Some(why) = &t.skipped {
            s.push_str(&format!("Skipped: {why}.\n\n"));
            return s;
        }
        s.push_str(&format!(
            "1, 2 and 4 rdbs, each single-threaded (`--query-threads 1 --query-concurrency 1`, steering off), share one PostgreSQL port (`--pg-port rp,PORT`). {} psycopg client processes ({}) run `{}` ({} rows of answer over the {} trade rows) for {} s per setup, each reconnecting every {} queries so that the kernel spreads the connections. This machine has {} cores, which the rdbs and the clients share: the ratio to one rdb cannot exceed the cores the rdbs get. \
             Every rdb gave the same answer (checked on each one's admin port) and so did every client's.\n\n",
            o.clients,
            t.python,
            throughput::QUERY,
            t.answer_rows,
            si(self.options.rows as f64),
            o.seconds,
            o.per_conn,
            self.cores
        ));
        let runs = t.cells.iter().map(|c| c.run + 1).max().unwrap_or(0);
        s.push_str(&format!(
            "{runs} round(s), every setup in turn in each: median (min–max) over the rounds, `*` marking a spread over 1.3×. \
             \"÷ 1 rdb\" is the median of each round's ratio; the connections are those of the round with the median queries/s; \
             errors are summed over the rounds.\n\n"
        ));
        s.push_str("| rdbs | queries/s | ÷ 1 rdb | connections per rdb | rdbs' CPU (cores busy) | errors |\n|---|---|---|---|---|---|\n");
        for n in in_order(&t.cells, |c| c.rdbs) {
            let cells: Vec<&throughput::Cell> = t.cells.iter().filter(|c| c.rdbs == n).collect();
            let qps = Samples(cells.iter().map(|c| c.qps).collect());
            let ratio = Samples(
                cells
                    .iter()
                    .filter_map(|c| {
                        let one = t.cells.iter().find(|x| x.rdbs == 1 && x.run == c.run)?;
                        (one.qps > 0.0).then(|| c.qps / one.qps)
                    })
                    .collect(),
            );
            let mid = median_item(&cells, |c| c.qps);
            let cores: Vec<f64> = cells.iter().filter_map(|c| c.server_cores).collect();
            s.push_str(&format!(
                "| {n} | {} | {} | {} | {} | {} |\n",
                qps.describe(|x| format!("{x:.1}")),
                if ratio.0.is_empty() {
                    "n/a".to_string()
                } else if n == 1 {
                    // Each round's one rdb against itself.
                    "1.00×".to_string()
                } else {
                    ratio.describe(|x| format!("{x:.2}×"))
                },
                mid.map(|c| c
                    .per_rdb
                    .values()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join(" / "))
                    .unwrap_or_default(),
                if cores.is_empty() {
                    "n/a".to_string()
                } else {
                    Samples(cores).describe(|x| format!("{x:.2}"))
                },
                cells.iter().map(|c| c.errors).sum::<u64>()
            ));
        }
        s.push('\n');
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bold_median_keeps_its_range_and_mark_outside_the_bold() {
        let f = |x: f64| format!("{x:.2} s");
        assert_eq!(
            bold_median(&Samples(vec![0.12, 0.16, 0.12]), f),
            "**0.12 s** (0.12 s–0.16 s) *"
        );
        assert_eq!(
            bold_median(&Samples(vec![2.0, 2.1]), f),
            "**2.05 s** (2.00 s–2.10 s)"
        );
        assert_eq!(bold_median(&Samples(vec![1.91]), f), "**1.91 s**");
        assert_eq!(bold_median(&Samples(Vec::new()), f), "n/a");
    }

    fn busy_run(run: usize, left: Option<f64>, back: Option<f64>) -> busy::BusyRun {
        busy::BusyRun {
            run,
            steering: Steering::On,
            blocked_pid: 1,
            other_pid: 2,
            block_running_s: Some(0.1),
            block_end_s: 10.0,
            block_status: 200,
            during: 100,
            to_blocked: 0,
            to_other: 100,
            failed: 0,
            to_blocked_after_busy_ms: 0,
            max_wait_after_busy_ms_s: None,
            p50_wait_s: None,
            p99_wait_s: None,
            max_wait_s: None,
            blocked_max_wait_s: None,
            outside: (0, 0),
            listeners_min: Some(if left.is_some() { 1 } else { 2 }),
            left_at_s: left,
            back_at_s: back,
            busy_query_ms: 200,
            conns: Vec::new(),
            failures: Vec::new(),
        }
    }

    #[test]
    fn the_busy_socket_column_says_how_many_runs_closed_it() {
        let a = busy_run(0, Some(0.15), Some(10.02));
        let b = busy_run(1, Some(0.13), Some(10.04));
        let open = busy_run(2, None, None);
        // Times count from the block seen running (0.1 s) and from its end.
        assert_eq!(
            busy_socket(&[&a, &b]),
            "closed 40 ms (30 ms–50 ms) * into the block, open again 30 ms (20 ms–40 ms) * after it ended"
        );
        assert_eq!(
            busy_socket(&[&a, &open]),
            "closed 50 ms into the block, open again 20 ms after it ended (in 1 of 2 runs; open throughout in the others)"
        );
        assert_eq!(busy_socket(&[&open]), "open throughout (2 listeners)");
        assert_eq!(busy_socket(&[]), "n/a");
    }
}
