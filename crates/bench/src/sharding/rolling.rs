//! Section 7 of the whitepaper, "Minimizing downtime with rolling updates".
//! The paper's HDB sleeps 30 s to mimic its load; here the listener's load
//! is real: an rdb that replays a tp journal of `rows` rows (the feed's
//! trades and quotes, 1:10) before it is ready, measured.
//!
//! The client is the paper's `.util.connect`: a connect that fails is
//! retried after 1, 2, 4 and 8 s (five tries, then it gives up; this client
//! then starts over at its next tick); a connection the server closes
//! (`.z.pc`) is reopened the same way and the request sent again. It asks
//! `s)select count(*) from trade` every 100 ms (one q thread: a connect
//! that waits holds the timer) and checks every answer against the count
//! the listeners loaded.
//!
//! (a) one listener on a plain port: SIGTERM it, wait for it to exit, start
//!     the new one on the same port; (b) `rp,PORT`: start the new one on the
//!     same port, wait until it is ready (admin `/health` 200, `/status`
//!     ready), then SIGTERM the old one, which drains.

use super::group::{self, Member, Spec};
use super::q::{self, QError, Q};
use crate::child::{self, Child};
use crate::error::{BenchError, Result};
use indicatif::ProgressBar;
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The paper's `.util.connect` backoff: `2 xexp til 4`.
pub const BACKOFF_S: [u64; 4] = [1, 2, 4, 8];
/// The paper's figures: the HDB's simulated load and the client's wait.
pub const PAPER_LOAD_S: f64 = 30.0;
pub const PAPER_DOWNTIME_S: f64 = 28.0;
const QUERY: &str = "s)select count(*) from trade";
const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);
/// A member's drain may take this long before it is killed (its
/// `--drain-timeout-s` is 30 by default).
const DRAIN_WAIT: Duration = Duration::from_secs(45);

#[derive(Debug, Clone, Serialize)]
pub struct RollingOptions {
    /// Rows in the journal a listener loads.
    pub rows: u64,
    /// The client's timer.
    pub interval_s: f64,
    /// Client time before the upgrade starts and after it is done.
    pub around_s: f64,
    pub seed: u64,
    /// Upgrade pairs ((a) then (b)), all against the one journal.
    pub runs: usize,
}

/// What the client saw.
#[derive(Debug, Clone, Default)]
struct Seen {
    /// (seconds since the client's start, pid) of every right answer.
    answers: Vec<(f64, Option<i64>)>,
    /// Requests that got no right answer, with why.
    failed: Vec<(f64, String)>,
    /// Connections opened (the first one included).
    connects: usize,
    /// Connect tries that failed.
    connect_failures: usize,
    /// `.util.connect` calls that gave up after five tries.
    gave_up: usize,
    /// Connections closed by the server (`.z.pc`).
    lost: usize,
    /// Requests sent again on a new connection.
    resent: usize,
    /// Answers that were not the count loaded (partial data).
    wrong: usize,
}

/// One upgrade.
#[derive(Debug, Clone, Serialize)]
pub struct Upgrade {
    /// Which run (0-based).
    pub run: usize,
    /// `rp,PORT` (b) or a plain port (a).
    pub shared: bool,
    pub old_pid: u32,
    pub new_pid: u32,
    /// The new listener's load: spawn to ready; and the old one's, when
    /// it was started alone before the upgrade.
    pub load_s: f64,
    pub old_load_s: f64,
    /// SIGTERM to the old listener's exit.
    pub drain_s: f64,
    pub old_exit: String,
    /// The longest time between two right answers, from the upgrade's
    /// start (the first SIGTERM or spawn) on.
    pub downtime_s: f64,
    /// The upgrade's start to the first answer by the new listener.
    pub first_new_answer_s: Option<f64>,
    pub requests: usize,
    pub answered: usize,
    pub failed: usize,
    pub failed_examples: Vec<String>,
    pub by_old: usize,
    pub by_new: usize,
    pub connects: usize,
    pub connect_failures: usize,
    pub gave_up: usize,
    pub lost: usize,
    pub resent: usize,
    /// Answers that were not the count loaded, and whether the new
    /// listener loaded that count.
    pub wrong: usize,
    pub new_trades_equal: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct RollingRun {
    /// Rows in the journal (trades and quotes) and the trades among them.
    pub rows: u64,
    pub trades: u64,
    /// Seconds the feed took to journal them.
    pub feed_s: f64,
    /// Each run's (a) then (b), run by run.
    pub upgrades: Vec<Upgrade>,
    pub failures: Vec<String>,
}

impl RollingRun {
    /// The upgrades of (a) (`shared` false) or of (b), run by run.
    pub fn of(&self, shared: bool) -> Vec<&Upgrade> {
        self.upgrades
            .iter()
            .filter(|u| u.shared == shared)
            .collect()
    }
}

/// `.util.connect`: five tries, 1, 2, 4, 8 s apart. The pid comes from
/// `.z.i`.
fn util_connect(port: u16, stop: &AtomicBool, seen: &Mutex<Seen>) -> Option<(Q, Option<i64>)> {
    let mut backoff = BACKOFF_S.iter();
    loop {
        let tried = Q::connect(port, ANSWER_TIMEOUT).and_then(|mut c| {
            let pid = c.query(".z.i", ANSWER_TIMEOUT)?;
            Ok((c, q::int_of(&pid)))
        });
        let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
        match tried {
            Ok(c) => {
                s.connects += 1;
                return Some(c);
            }
            Err(_) => s.connect_failures += 1,
        }
        drop(s);
        let Some(wait) = backoff.next() else {
            seen.lock().unwrap_or_else(|e| e.into_inner()).gave_up += 1;
            return None;
        };
        let end = Instant::now() + Duration::from_secs(*wait);
        while Instant::now() < end {
            if stop.load(Ordering::Relaxed) || child::check_interrupt().is_err() {
                return None;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}

/// The client loop, until `stop`.
fn client(
    port: u16,
    expect: i64,
    interval: Duration,
    t0: Instant,
    stop: &AtomicBool,
    seen: &Mutex<Seen>,
) {
    let since = |t: Instant| t.duration_since(t0).as_secs_f64();
    let mut conn: Option<(Q, Option<i64>)> = None;
    let mut due = Instant::now();
    while !stop.load(Ordering::Relaxed) && child::check_interrupt().is_ok() {
        let now = Instant::now();
        if now < due {
            std::thread::sleep((due - now).min(Duration::from_millis(10)));
            continue;
        }
        let sent = since(Instant::now());
        let mut sends = 0;
        loop {
            if conn.is_none() {
                conn = util_connect(port, stop, seen);
                if conn.is_none() {
                    if !stop.load(Ordering::Relaxed) {
                        seen.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .failed
                            .push((sent, "could not connect after 5 tries".into()));
                    }
                    break;
                }
            }
            let Some((c, pid)) = conn.as_mut() else { break };
            sends += 1;
            if sends > 1 {
                seen.lock().unwrap_or_else(|e| e.into_inner()).resent += 1;
            }
            match c.query(QUERY, ANSWER_TIMEOUT) {
                Ok(k) => {
                    let mut s = seen.lock().unwrap_or_else(|e| e.into_inner());
                    match q::int_of(&k) {
                        Some(n) if n == expect => s.answers.push((since(Instant::now()), *pid)),
                        got => {
                            s.wrong += 1;
                            s.failed.push((
                                sent,
                                format!("answered {got:?} (type {}), not {expect}", k.type_code()),
                            ));
                        }
                    }
                    break;
                }
                Err(QError::Closed(why)) if sends <= 3 => {
                    // `.z.pc`: reopen and send it again.
                    let _ = why;
                    seen.lock().unwrap_or_else(|e| e.into_inner()).lost += 1;
                    conn = None;
                }
                Err(e) => {
                    if matches!(
                        e,
                        QError::Closed(_) | QError::Timeout(_) | QError::Protocol(_)
                    ) {
                        conn = None;
                    }
                    seen.lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .failed
                        .push((sent, e.to_string()));
                    break;
                }
            }
        }
        due += interval;
        let now = Instant::now();
        if due < now {
            due = now;
        }
    }
}

/// Builds the journal: a tp and `tickdb feed --prestress` (10k-row writes).
fn journal(bin: &Path, dir: &Path, o: &RollingOptions) -> Result<(crate::servers::Tickdb, f64)> {
    let tp = crate::servers::start_tickdb(bin, dir, "tp", "rolling-tp", &["--fsync", "never"])?;
    let t = Instant::now();
    let mut cmd = Command::new(bin);
    cmd.env("TICKDB_LOG", "warn")
        .args(["feed", "--http-port", &tp.http.to_string()])
        .args(["--ilp-port", &tp.ilp.to_string()])
        .args(["--prestress", &o.rows.to_string(), "--duration", "0"])
        .args(["--prestress-batch-rows", "10000"])
        .args(["--symbols", "2000", "--seed", &o.seed.to_string()]);
    let mut feed = Child::spawn(
        "tickdb feed --prestress",
        &mut cmd,
        &dir.join("rolling-feed.log"),
    )?;
    let st = feed.wait_exit(Duration::from_secs(60 + 120 * o.rows.div_ceil(1_000_000)))?;
    if !st.success() {
        return Err(BenchError::Server(format!(
            "tickdb feed --prestress exited {st}:\n{}",
            child::log_tail(&feed.log)
        )));
    }
    group::wait_tp_rows(&tp, o.rows, Duration::from_secs(120))?;
    Ok((tp, t.elapsed().as_secs_f64()))
}

fn trades_of(m: &Member) -> Result<i64> {
    m.exec("select count(*) from trade")?[0][0]
        .as_i64()
        .ok_or_else(|| {
            BenchError::Protocol(format!("{}: select count(*) from trade: no number", m.name))
        })
}

/// Waits for the old member to exit after its SIGTERM; (seconds, status).
fn wait_exit(m: &mut Member) -> (f64, String) {
    let t = Instant::now();
    match m.child.wait_exit(DRAIN_WAIT) {
        Ok(st) => (t.elapsed().as_secs_f64(), st.to_string()),
        Err(e) => {
            m.child.kill();
            (t.elapsed().as_secs_f64(), format!("killed: {e}"))
        }
    }
}

/// One upgrade; `expect` is the trade count every answer must be (None:
/// the old listener's, which the next upgrade is then held to).
#[allow(clippy::too_many_arguments)]
fn upgrade(
    bin: &Path,
    dir: &Path,
    tp: u16,
    run: usize,
    shared: bool,
    expect: Option<i64>,
    o: &RollingOptions,
    pb: &ProgressBar,
) -> Result<(Upgrade, i64)> {
    let tag = if shared { "rp" } else { "plain" };
    let r1 = run + 1;
    let spec = Spec {
        tp,
        ports: group::Ports::fresh()?,
        shared,
        flags: Vec::new(),
    };
    pb.set_message(format!("run {r1}, {tag}: loading the old listener"));
    let mut old = group::start(bin, dir, &format!("rolling-{run}-{tag}-old"), &spec)?;
    let got = trades_of(&old)?;
    let expect = expect.unwrap_or(got);
    if got != expect {
        return Err(BenchError::Server(format!(
            "section 7: the old listener loaded {got} trades, the first one {expect}"
        )));
    }
    let seen = Mutex::new(Seen::default());
    let stop = AtomicBool::new(false);
    let t0 = Instant::now();
    let around = Duration::from_secs_f64(o.around_s);
    let interval = Duration::from_secs_f64(o.interval_s);
    let port = spec.ports.ipc;
    let since = |t: Instant| t.duration_since(t0).as_secs_f64();
    let steps = std::thread::scope(|sc| {
        let h = sc.spawn(|| client(port, expect, interval, t0, &stop, &seen));
        let r = (|| -> Result<(f64, Member, f64, f64, String)> {
            child::sleep(around)?;
            let action;
            let new;
            let (drain_s, exit);
            if shared {
                pb.set_message(format!(
                    "run {r1}, {tag}: the new listener loads beside the old"
                ));
                action = since(Instant::now());
                let mut n = group::spawn(bin, dir, &format!("rolling-{run}-{tag}-new"), &spec)?;
                n.wait_ready()?;
                pb.set_message(format!("run {r1}, {tag}: SIGTERM to the old listener"));
                old.sigterm();
                (drain_s, exit) = wait_exit(&mut old);
                new = n;
            } else {
                pb.set_message(format!("run {r1}, {tag}: SIGTERM to the old listener"));
                action = since(Instant::now());
                old.sigterm();
                (drain_s, exit) = wait_exit(&mut old);
                pb.set_message(format!("run {r1}, {tag}: the new listener loads"));
                let mut n = group::spawn(bin, dir, &format!("rolling-{run}-{tag}-new"), &spec)?;
                n.wait_ready()?;
                new = n;
            }
            let load_s = new.ready_s.unwrap_or(0.0);
            pb.set_message(format!(
                "run {r1}, {tag}: waiting for the client to reach the new listener"
            ));
            let deadline = Instant::now() + Duration::from_secs(60);
            loop {
                child::check_interrupt()?;
                let reached = seen
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .answers
                    .iter()
                    .any(|(_, p)| *p == Some(i64::from(new.pid)));
                if reached || Instant::now() > deadline {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            child::sleep(around)?;
            Ok((action, new, load_s, drain_s, exit))
        })();
        stop.store(true, Ordering::Relaxed);
        let _ = h.join();
        r
    });
    let (action, mut new, load_s, drain_s, old_exit) = steps?;
    let new_trades = trades_of(&new)?;
    new.stop(Duration::from_secs(10));
    let s = seen.into_inner().unwrap_or_else(|e| e.into_inner());
    let mut times: Vec<f64> = s
        .answers
        .iter()
        .map(|(t, _)| *t)
        .filter(|t| *t >= action)
        .collect();
    times.insert(0, action);
    let downtime_s = times.windows(2).map(|w| w[1] - w[0]).fold(0.0, f64::max);
    let pid_is = |p: &Option<i64>, x: u32| *p == Some(i64::from(x));
    let mut failed_examples: Vec<String> = s
        .failed
        .iter()
        .take(5)
        .map(|(t, why)| format!("+{:.2} s: {why}", t - action))
        .collect();
    if new_trades != expect {
        failed_examples.push(format!(
            "the new listener loaded {new_trades} trades, the old {expect}"
        ));
    }
    Ok((
        Upgrade {
            run,
            shared,
            old_pid: old.pid,
            new_pid: new.pid,
            load_s,
            old_load_s: old.ready_s.unwrap_or(0.0),
            drain_s,
            old_exit,
            downtime_s,
            first_new_answer_s: s
                .answers
                .iter()
                .find(|(_, p)| pid_is(p, new.pid))
                .map(|(t, _)| t - action),
            requests: s.answers.len() + s.failed.len(),
            answered: s.answers.len(),
            failed: s.failed.len() + usize::from(new_trades != expect),
            failed_examples,
            by_old: s.answers.iter().filter(|(_, p)| pid_is(p, old.pid)).count(),
            by_new: s.answers.iter().filter(|(_, p)| pid_is(p, new.pid)).count(),
            connects: s.connects,
            connect_failures: s.connect_failures,
            gave_up: s.gave_up,
            lost: s.lost,
            resent: s.resent,
            wrong: s.wrong,
            new_trades_equal: new_trades == expect,
        },
        expect,
    ))
}

/// What one run's pair of upgrades must show: no failed request on `rp`,
/// the new listener reached in both, and every answer the count loaded.
fn checks(run: usize, expect: i64, plain: &Upgrade, shared: &Upgrade) -> Vec<String> {
    let mut failures = Vec::new();
    if shared.failed > 0 {
        failures.push(format!(
            "section 7 (b), run {}, rolling upgrade on rp: {} failed requests (target: zero): {}",
            run + 1,
            shared.failed,
            shared.failed_examples.join("; ")
        ));
    }
    if plain.by_new == 0 || shared.by_new == 0 {
        failures.push(format!(
            "section 7, run {}: the client never reached the new listener (plain port: {} answers, rp: {})",
            run + 1,
            plain.by_new,
            shared.by_new
        ));
    }
    for u in [plain, shared] {
        if u.wrong > 0 || !u.new_trades_equal {
            failures.push(format!(
                "section 7 ({}), run {}: {} answers were not the {expect} trades loaded, or the new listener loaded another count: {}",
                if u.shared { "rp" } else { "plain port" },
                run + 1,
                u.wrong,
                u.failed_examples.join("; ")
            ));
        }
    }
    failures
}

/// Journals the rows once, then `o.runs` pairs of upgrades against it.
pub fn run_rolling(
    bin: &Path,
    dir: &Path,
    o: &RollingOptions,
    pb: &ProgressBar,
) -> Result<RollingRun> {
    pb.set_message(format!(
        "journaling {} rows",
        crate::stats::si(o.rows as f64)
    ));
    let (tp, feed_s) = journal(bin, dir, o)?;
    pb.inc(1);
    let mut expect: Option<i64> = None;
    let mut upgrades = Vec::new();
    let mut failures = Vec::new();
    for run in 0..o.runs.max(1) {
        // The first listener's count is what every answer, in every run,
        // must be.
        let (plain, got) = upgrade(bin, dir, tp.tp, run, false, expect, o, pb)?;
        let want = *expect.get_or_insert(got);
        pb.inc(1);
        let (shared, _) = upgrade(bin, dir, tp.tp, run, true, Some(want), o, pb)?;
        pb.inc(1);
        failures.extend(checks(run, want, &plain, &shared));
        upgrades.extend([plain, shared]);
    }
    let mut tp = tp;
    tp.child.stop(Duration::from_secs(10));
    let _ = std::fs::remove_dir_all(&tp.data_dir);
    Ok(RollingRun {
        rows: o.rows,
        trades: expect.unwrap_or(0).max(0) as u64,
        feed_s,
        upgrades,
        failures,
    })
}
