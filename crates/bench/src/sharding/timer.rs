//! The whitepaper's timer client (sections 4 and 5), over kdb+ IPC.
//!
//! The paper's client is one q process: `.z.ts` fires every second (or
//! 100 ms), notes `st:.z.T`, opens a connection (`hopen 5000`), sends the
//! request asynchronously and records the time taken when the answer comes
//! back. A kdb+ listener that is busy (sleeping in `.z.ps`) does not
//! complete the login, so `hopen` blocks the client's only thread until the
//! listener is free again, and the timer is held up meanwhile: that is why
//! one listener answers about one 2 s request every 2 s at ~4 s each.
//!
//! tickdb accepts and logs in while its query slot is busy, so here the
//! client's `hopen` is the connect, the login and one sync `s)select
//! pg_backend_pid()`, which waits for the listener's only query slot
//! (`--query-concurrency 1`) as q's `hopen` waits for the busy listener, and
//! names the listener. Then the request (`s)select pg_sleep(S)`) is sent
//! and its answer awaited on a thread of its own, as the paper's async
//! callback, and the timer goes on. A late tick fires at once; missed ticks
//! are not made up.

use super::q::{self, Q};
use crate::child;
use indicatif::ProgressBar;
use serde::Serialize;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The longest a `hopen` or an answer may take.
const ANSWER_TIMEOUT: Duration = Duration::from_secs(60);

/// One request.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Req {
    /// When the timer fired (q's `st:.z.T`), seconds since the run's start.
    pub st: f64,
    /// When `hopen` returned (the listener took the connection).
    pub connected: Option<f64>,
    /// When the answer came back.
    pub answered: Option<f64>,
    /// The listener that answered (its pid).
    pub pid: Option<i64>,
    pub error: Option<String>,
}

impl Req {
    /// The paper's `timeTaken`: answer − `st`.
    pub fn taken(&self) -> Option<f64> {
        self.answered.map(|a| a - self.st)
    }
}

/// Counts shown while the client runs.
#[derive(Default)]
pub struct Live {
    pub sent: AtomicUsize,
    pub answered: AtomicUsize,
    pub failed: AtomicUsize,
}

/// Counts the answered and failed requests into the live counters.
fn tally(live: &Live, reqs: &[Req]) {
    let answered = reqs.iter().filter(|r| r.answered.is_some()).count();
    let failed = reqs.iter().filter(|r| r.error.is_some()).count();
    live.answered.store(answered, Ordering::Relaxed);
    live.failed.store(failed, Ordering::Relaxed);
}

/// Runs the client against 127.0.0.1:`port` from `t0` until `until`
/// (no tick after it), then waits for every answer. `pb` shows the time
/// in ms, from `pb_from_ms` at `t0`.
#[allow(clippy::too_many_arguments)]
pub fn run(
    port: u16,
    interval: Duration,
    sleep_s: f64,
    t0: Instant,
    until: Instant,
    live: &Live,
    pb: &ProgressBar,
    pb_from_ms: u64,
) -> Vec<Req> {
    let reqs: Arc<Mutex<Vec<Req>>> = Arc::new(Mutex::new(Vec::new()));
    let mut readers = Vec::new();
    let request = format!("s)select pg_sleep({sleep_s})");
    let since = move |t: Instant| t.duration_since(t0).as_secs_f64();
    let mut due = Instant::now().max(t0);
    while due < until {
        if child::check_interrupt().is_err() {
            break;
        }
        let now = Instant::now();
        if now < due {
            std::thread::sleep((due - now).min(Duration::from_millis(20)));
            pb.set_position(pb_from_ms + (since(Instant::now()) * 1000.0) as u64);
            continue;
        }
        let st = Instant::now();
        live.sent.fetch_add(1, Ordering::Relaxed);
        let mut r = Req {
            st: since(st),
            ..Req::default()
        };
        let opened = Q::connect(port, ANSWER_TIMEOUT).and_then(|mut c| {
            let pid = c.query("s)select pg_backend_pid()", ANSWER_TIMEOUT)?;
            Ok((c, pid))
        });
        match opened {
            Ok((mut c, pid)) => {
                r.connected = Some(since(Instant::now()));
                r.pid = q::int_of(&pid);
                if r.pid.is_none() {
                    r.error = Some("pg_backend_pid() did not answer one integer".into());
                }
                match c.send(&request) {
                    Ok(()) => {
                        let i = {
                            let mut v = reqs.lock().unwrap_or_else(|e| e.into_inner());
                            v.push(r);
                            v.len() - 1
                        };
                        let reqs = reqs.clone();
                        readers.push(std::thread::spawn(move || {
                            let a = c.answer(ANSWER_TIMEOUT);
                            let t = since(Instant::now());
                            let mut v = reqs.lock().unwrap_or_else(|e| e.into_inner());
                            let r = &mut v[i];
                            match a {
                                Ok(k) if q::one_row(&k) => r.answered = Some(t),
                                Ok(k) => {
                                    r.error = Some(format!(
                                    "pg_sleep answered an object of type {} ({} rows), not one row",
                                    k.type_code(),
                                    k.count()
                                ))
                                }
                                Err(e) => r.error = Some(e.to_string()),
                            }
                        }));
                    }
                    Err(e) => {
                        r.error = Some(e.to_string());
                        reqs.lock().unwrap_or_else(|e| e.into_inner()).push(r);
                    }
                }
            }
            Err(e) => {
                r.error = Some(format!("hopen: {e}"));
                reqs.lock().unwrap_or_else(|e| e.into_inner()).push(r);
            }
        }
        tally(live, &reqs.lock().unwrap_or_else(|e| e.into_inner()));
        pb.set_position(pb_from_ms + (since(Instant::now()) * 1000.0) as u64);
        pb.set_message(format!(
            "{} sent, {} answered",
            live.sent.load(Ordering::Relaxed),
            live.answered.load(Ordering::Relaxed)
        ));
        // q's timer: the next tick is due an interval after this one; a
        // late one fires at once, and missed ones are not made up.
        due += interval;
        let now = Instant::now();
        if due < now {
            due = now;
        }
    }
    for h in readers {
        let _ = h.join();
    }
    let v = reqs.lock().unwrap_or_else(|e| e.into_inner()).clone();
    tally(live, &v);
    v
}
