//! `tickdb bench robustness`: acknowledged-write latency of a feed at the
//! Optane kdb+ study's 48,000 updates/s, first on a quiet node, then while hostile
//! queries and clients hit every port: statements nested thousands deep,
//! functions asked to allocate gigabytes, cross joins, a slowly read
//! result of every row, 50 concurrent slow queries, idle and slowloris
//! clients on HTTP, ILP, the subscription port and PostgreSQL, and
//! subscribers that never read. Reported: p50, p99 and max of the write
//! acknowledgements in both phases and their ratio (the target:
//! p99 within 2× of quiet), what the node answered the hostile queries,
//! and the check that matters more than speed: the node is still up and
//! every acknowledged row is there exactly once.
//!
//! No peer runs here: the comparison is the node against itself, quiet.

use crate::child;
use crate::error::{BenchError, Result};
use crate::http::{url_encode, HttpConn};
use crate::servers;
use crate::stats::Samples;
use hdrhistogram::Histogram;
use indicatif::{ProgressBar, ProgressStyle};
use serde::Serialize;
use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The symbol the measured feed writes; each row's `size` is its unique id.
const FEED_SYM: &str = "ROBUST";
/// Writer connections sharing the feed (each paces its own share).
const WRITERS: usize = 4;
/// Rows per preload request.
const PRELOAD_BATCH_ROWS: usize = 10_000;
/// Symbols of the preloaded table the queries chew on.
const PRELOAD_SYMBOLS: usize = 100;
/// Terms of the deep statement (it aborted the process before).
const DEEP_TERMS: usize = 3_000;
/// Slowloris clients per port, each sending a byte a second.
const SLOW_CLIENTS: usize = 10;

#[derive(Debug, Clone)]
pub struct RobustnessOptions {
    /// Updates (journaled requests) per second, all writers together.
    pub updates_per_s: u64,
    /// Rows per update: 48,000 rows/s in 1 ms ticks (as `bench restart`).
    pub update_rows: usize,
    /// Seconds per phase.
    pub seconds: f64,
    /// Rows in the table the hostile queries read.
    pub preload_rows: u64,
    /// Concurrent slow queries in the storm.
    pub slow_queries: usize,
    /// Idle connections held open per port in the storm.
    pub idle_per_port: usize,
    /// The node's --query-timeout-ms.
    pub query_timeout_ms: u64,
    /// The node's --query-threads (None: its default, one per core).
    pub query_threads: Option<usize>,
    /// Rounds of a quiet phase then a storm, on the same node; the report
    /// gives medians over them.
    pub runs: usize,
}

#[derive(Debug, Clone, Serialize)]
pub struct PhaseResult {
    pub phase: String,
    pub updates_acked: u64,
    pub rows_acked: u64,
    pub write_errors: u64,
    pub achieved_updates_per_s: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub max_us: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct RobustnessReport {
    pub machine: String,
    pub date: String,
    pub options: String,
    /// One quiet phase per round, in round order.
    pub quiet: Vec<PhaseResult>,
    /// One storm per round, each right after that round's quiet phase.
    pub storm: Vec<PhaseResult>,
    /// Hostile query outcomes: class (HTTP status and code) → count.
    pub query_outcomes: BTreeMap<String, u64>,
    pub idle_connections: usize,
    pub slow_clients: usize,
    pub preload_rows: u64,
    pub slow_queries: usize,
    /// Acknowledged rows missing afterwards (must be 0).
    pub lost_rows: u64,
    /// Acknowledged rows present more than once (must be 0).
    pub duplicated_rows: u64,
    pub node_alive: bool,
    pub rss_max_bytes: u64,
}

impl RobustnessReport {
    /// Each round's storm p99 ÷ that round's quiet p99.
    pub fn p99_ratios(&self) -> Samples {
        Samples(
            self.quiet
                .iter()
                .zip(&self.storm)
                .map(|(q, s)| s.p99_us / q.p99_us.max(1.0))
                .collect(),
        )
    }

    pub fn markdown(&self) -> String {
        let mut s = format!(
            "A feed writes {} over ILP/HTTP ({WRITERS} connections; each request is one journaled update, answered once journaled under `--fsync always`) to `tickdb up`, first on a quiet node, then through a storm: statements {DEEP_TERMS} terms deep, `repeat('a', 2000000000)`, cross joins and self-joins of the {}-row table, `select *` read slowly, {} concurrent slow queries, {} idle connections on each of HTTP, ILP TCP, the subscription port and PostgreSQL, {SLOW_CLIENTS} slowloris clients on HTTP, ILP and PostgreSQL, and {SLOW_CLIENTS} subscribers that never read. The client, the storm and the node share the machine's cores. Measured on {}, {}.\n\n\
             {} round(s) of a quiet phase then a storm, on the same node: median (min–max) over the rounds, `*` marking a spread over 1.3×; each percentile is over one phase's acknowledgements, and the counts are summed over the rounds.\n\n",
            self.options,
            self.preload_rows,
            self.slow_queries,
            self.idle_connections / 4,
            self.machine,
            self.date,
            self.quiet.len()
        );
        s.push_str("| phase | updates acked | rows acked | errors | updates/s | ack p50 | ack p99 | ack max |\n|---|---|---|---|---|---|---|---|\n");
        for (name, ps) in [("quiet", &self.quiet), ("storm", &self.storm)] {
            let f = |g: fn(&PhaseResult) -> f64| Samples(ps.iter().map(g).collect());
            s.push_str(&format!(
                "| {name} | {} | {} | {} | {} | {} | {} | {} |\n",
                ps.iter().map(|p| p.updates_acked).sum::<u64>(),
                ps.iter().map(|p| p.rows_acked).sum::<u64>(),
                ps.iter().map(|p| p.write_errors).sum::<u64>(),
                f(|p| p.achieved_updates_per_s).describe(|x| format!("{x:.0}")),
                f(|p| p.p50_us).describe(us),
                f(|p| p.p99_us).describe(us),
                f(|p| p.max_us).describe(us)
            ));
        }
        let ratios = self.p99_ratios();
        let ratio = ratios.median().unwrap_or(0.0);
        s.push_str(&format!(
            "\np99 under the storm ÷ quiet p99, the median of the rounds' ratios: **{ratio:.2}×**{} (target: at most 2×, {}). Acknowledged rows lost: **{}**, duplicated: **{}**; node alive afterwards: **{}**; RSS max {}.\n\n",
            match (ratios.min(), ratios.max()) {
                (Some(lo), Some(hi)) if ratios.0.len() > 1 => format!(" ({lo:.2}×–{hi:.2}×)"),
                _ => String::new(),
            },
            if ratio <= 2.0 { "met" } else { "missed" },
            self.lost_rows,
            self.duplicated_rows,
            if self.node_alive { "yes" } else { "NO" },
            crate::stack::bytes(self.rss_max_bytes as f64)
        ));
        s.push_str(
            "What the node answered the hostile queries:\n\n| answer | count |\n|---|---|\n",
        );
        for (k, v) in &self.query_outcomes {
            s.push_str(&format!("| {k} | {v} |\n"));
        }
        s
    }
}

fn us(v: f64) -> String {
    if v >= 1000.0 {
        format!("{:.2} ms", v / 1000.0)
    } else {
        format!("{v:.0} µs")
    }
}

fn now_ns() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as i64)
        .unwrap_or(0)
}

/// What the feed acknowledged: latencies, and the ids of acknowledged rows.
pub(crate) struct Feed {
    hist: Mutex<Histogram<u64>>,
    acked_ids: Mutex<Vec<(u64, u64)>>,
    updates: AtomicU64,
    rows: AtomicU64,
    errors: AtomicU64,
    next_id: AtomicU64,
}

impl Feed {
    pub(crate) fn new() -> Result<Feed> {
        Ok(Feed {
            hist: Mutex::new(
                Histogram::<u64>::new_with_bounds(1, 120_000_000, 3)
                    .map_err(|e| BenchError::Protocol(e.to_string()))?,
            ),
            acked_ids: Mutex::new(Vec::new()),
            updates: AtomicU64::new(0),
            rows: AtomicU64::new(0),
            errors: AtomicU64::new(0),
            next_id: AtomicU64::new(1),
        })
    }
}

/// One writer: `per_s` updates a second of `rows` rows, until `stop`.
fn writer(
    port: u16,
    per_s: f64,
    rows: usize,
    feed: &Feed,
    stop: &AtomicBool,
    offset: Duration,
) -> Result<()> {
    let mut conn = HttpConn::connect(port)?;
    let every = Duration::from_secs_f64(1.0 / per_s.max(1.0));
    let mut next = Instant::now() + offset;
    let mut body = String::with_capacity(rows * 64);
    while !stop.load(Ordering::Relaxed) {
        let now = Instant::now();
        if now < next {
            std::thread::sleep(next - now);
        }
        next += every;
        let first = feed.next_id.fetch_add(rows as u64, Ordering::Relaxed);
        body.clear();
        let t = now_ns();
        for i in 0..rows as u64 {
            body.push_str(&format!(
                "trade,sym={FEED_SYM} price=1.5,size={}i {}\n",
                first + i,
                t + i as i64
            ));
        }
        let sent = Instant::now();
        let r = conn.request("POST", "/write", body.as_bytes());
        let took = sent.elapsed();
        match r {
            Ok((204, _)) => {
                feed.updates.fetch_add(1, Ordering::Relaxed);
                feed.rows.fetch_add(rows as u64, Ordering::Relaxed);
                if let Ok(mut h) = feed.hist.lock() {
                    let _ = h.record((took.as_micros() as u64).max(1));
                }
                if let Ok(mut ids) = feed.acked_ids.lock() {
                    ids.push((first, first + rows as u64));
                }
            }
            Ok(_) | Err(_) => {
                feed.errors.fetch_add(1, Ordering::Relaxed);
                conn = HttpConn::connect(port)?;
            }
        }
    }
    Ok(())
}

/// One timed phase of the paced feed (`o.updates_per_s` updates of
/// `o.update_rows` rows over HTTP), with `during` running beside it.
pub(crate) fn phase(
    name: &str,
    port: u16,
    o: &RobustnessOptions,
    feed: &Arc<Feed>,
    during: impl FnOnce(&AtomicBool) -> Result<()> + Send,
) -> Result<PhaseResult> {
    if let Ok(mut h) = feed.hist.lock() {
        h.reset();
    }
    let (u0, r0, e0) = (
        feed.updates.load(Ordering::Relaxed),
        feed.rows.load(Ordering::Relaxed),
        feed.errors.load(Ordering::Relaxed),
    );
    let stop = Arc::new(AtomicBool::new(false));
    let per_writer = o.updates_per_s as f64 / WRITERS as f64;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (feed, stop) = (feed.clone(), stop.clone());
            let rows = o.update_rows;
            let offset = Duration::from_secs_f64(w as f64 / o.updates_per_s.max(1) as f64);
            std::thread::spawn(move || writer(port, per_writer, rows, &feed, &stop, offset))
        })
        .collect();
    let t0 = Instant::now();
    let bar = ProgressBar::new((o.seconds * 10.0) as u64);
    bar.set_style(
        ProgressStyle::with_template("{prefix:>12} [{bar:30}] {elapsed} {msg}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    bar.set_prefix(name.to_string());
    let storm_stop = Arc::new(AtomicBool::new(false));
    let mut elapsed = 0.0;
    let storm = {
        let s = storm_stop.clone();
        std::thread::scope(|scope| -> Result<()> {
            let h = scope.spawn(|| during(&s));
            while t0.elapsed().as_secs_f64() < o.seconds {
                child::check_interrupt()?;
                std::thread::sleep(Duration::from_millis(100));
                bar.set_position((t0.elapsed().as_secs_f64() * 10.0) as u64);
                bar.set_message(format!(
                    "{} updates acked",
                    feed.updates.load(Ordering::Relaxed) - u0
                ));
            }
            stop.store(true, Ordering::Relaxed);
            s.store(true, Ordering::Relaxed);
            elapsed = t0.elapsed().as_secs_f64();
            h.join()
                .unwrap_or_else(|_| Err(BenchError::Protocol("storm thread panicked".into())))
        })
    };
    bar.finish_and_clear();
    for w in writers {
        w.join()
            .unwrap_or_else(|_| Err(BenchError::Protocol("writer panicked".into())))?;
    }
    storm?;
    let h = feed
        .hist
        .lock()
        .map_err(|_| BenchError::Protocol("histogram lock".into()))?
        .clone();
    let updates = feed.updates.load(Ordering::Relaxed) - u0;
    Ok(PhaseResult {
        phase: name.to_string(),
        updates_acked: updates,
        rows_acked: feed.rows.load(Ordering::Relaxed) - r0,
        write_errors: feed.errors.load(Ordering::Relaxed) - e0,
        achieved_updates_per_s: updates as f64 / elapsed.max(1e-9),
        p50_us: h.value_at_quantile(0.5) as f64,
        p99_us: h.value_at_quantile(0.99) as f64,
        max_us: h.max() as f64,
    })
}

/// Hostile queries over HTTP in a loop, tallied by answer.
/// The storm's client threads run at the lowest priority (nice 19 under
/// `SCHED_IDLE`, as the node's own query threads do): on a real node
/// its attackers are remote and use none of its CPU; here they share the
/// cores, and at equal priority their own work (building requests, reading
/// a million rows) would be measured as the node's slowness.
fn as_remote_client() {
    // SAFETY: changes only this thread's own scheduling priority.
    unsafe {
        let tid = libc::syscall(libc::SYS_gettid) as libc::id_t;
        libc::setpriority(libc::PRIO_PROCESS, tid, STORM_CLIENT_NICE);
        let param = libc::sched_param { sched_priority: 0 };
        libc::sched_setscheduler(tid as libc::pid_t, libc::SCHED_IDLE, &param);
    }
}

/// How long the row check keeps retrying a node still busy with the
/// storm's queries, in seconds.
const CHECK_RETRY_S: u64 = 120;
/// Ids fetched per query by the row check: a CSV answer of about 20 MB.
const CHECK_WINDOW_IDS: u64 = 2_000_000;
/// Nice value of the storm's client threads.
const STORM_CLIENT_NICE: i32 = 19;

fn query_loop(
    port: u16,
    sql: String,
    slow_read: bool,
    stop: &AtomicBool,
    tally: &Mutex<BTreeMap<String, u64>>,
) {
    as_remote_client();
    let path = format!("/exec?query={}", url_encode(&sql));
    while !stop.load(Ordering::Relaxed) {
        let outcome = if slow_read {
            slow_get(port, &path, stop)
        } else {
            match HttpConn::connect(port).and_then(|mut c| c.request("GET", &path, b"")) {
                Ok((status, body)) => {
                    let code = serde_json::from_slice::<serde_json::Value>(&body)
                        .ok()
                        .and_then(|v| v["code"].as_str().map(str::to_string));
                    match code {
                        Some(c) => format!("{status} {c}"),
                        None => format!("{status}"),
                    }
                }
                Err(e) => format!(
                    "client error: {}",
                    e.to_string().chars().take(60).collect::<String>()
                ),
            }
        };
        if let Ok(mut t) = tally.lock() {
            *t.entry(outcome).or_insert(0) += 1;
        }
    }
}

/// A GET whose body is read a little at a time.
fn slow_get(port: u16, path: &str, stop: &AtomicBool) -> String {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return "client error: connect".into();
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(60)));
    let _ = s.write_all(
        format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
    );
    let mut buf = vec![0u8; 16 * 1024];
    let mut first = true;
    let mut status = String::from("slow read: closed");
    while !stop.load(Ordering::Relaxed) {
        match s.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => {
                if first {
                    first = false;
                    let head = String::from_utf8_lossy(&buf[..n.min(20)]).to_string();
                    status = format!(
                        "slow read: {}",
                        head.split_whitespace().nth(1).unwrap_or("?")
                    );
                }
                std::thread::sleep(Duration::from_millis(5));
            }
            Err(_) => break,
        }
    }
    status
}

/// Connections that connect and then sit.
fn hold_clients(ports: &[u16], idle: usize) -> Vec<TcpStream> {
    let mut held = Vec::new();
    for port in ports {
        for _ in 0..idle {
            if let Ok(s) = TcpStream::connect(("127.0.0.1", *port)) {
                held.push(s);
            }
        }
    }
    held
}

/// A client that trickles `bytes` a byte a second (slowloris).
fn trickle(port: u16, bytes: &'static [u8], stop: &AtomicBool) {
    as_remote_client();
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return;
    };
    for b in bytes.iter().cycle() {
        if stop.load(Ordering::Relaxed) || s.write_all(&[*b]).is_err() {
            return;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
}

/// A subscriber that asks for everything from seq 1 and never reads.
fn deaf_subscriber(port: u16) -> Option<TcpStream> {
    let mut s = TcpStream::connect(("127.0.0.1", port)).ok()?;
    let mut out = Vec::new();
    tickdb_net::proto::encode_message(
        &tickdb_net::proto::Message::Subscribe {
            from_seq: 1,
            tables: vec![],
            symbols: vec![],
            epoch: None,
        },
        &mut out,
    );
    s.write_all(&out).ok()?;
    Some(s)
}

fn preload(port: u16, rows: u64) -> Result<()> {
    let mut conn = HttpConn::connect(port)?;
    let mut done = 0u64;
    let t0 = now_ns() - 86_400_000_000_000;
    while done < rows {
        let n = (rows - done).min(PRELOAD_BATCH_ROWS as u64);
        let mut body = String::with_capacity(n as usize * 64);
        for i in done..done + n {
            body.push_str(&format!(
                "trade,sym=S{} price={},size={}i {}\n",
                i % PRELOAD_SYMBOLS as u64,
                100.0 + (i % 97) as f64 * 0.25,
                i % 13 + 1,
                t0 + i as i64 * 1000
            ));
        }
        let (status, body) = conn.request("POST", "/write", body.as_bytes())?;
        if status != 204 {
            return Err(BenchError::Server(format!(
                "preload: HTTP {status}: {}",
                String::from_utf8_lossy(&body)
            )));
        }
        done += n;
    }
    Ok(())
}

/// The node's ports the storm attacks.
#[derive(Clone, Copy)]
struct StormPorts {
    http: u16,
    ilp: u16,
    tp: u16,
    pg: u16,
}

/// The storm: hostile queries, slow queries, idle and slowloris clients and
/// deaf subscribers, until `stop`; the node's RSS is sampled meanwhile.
fn run_storm(
    p: StormPorts,
    o: &RobustnessOptions,
    stop: &AtomicBool,
    tally: &Arc<Mutex<BTreeMap<String, u64>>>,
    rss_max: &AtomicU64,
) -> Result<()> {
    let StormPorts { http, ilp, tp, pg } = p;
    std::thread::scope(|scope| {
        let deep = format!("select {}", vec!["1"; DEEP_TERMS].join("+"));
        let hostile: Vec<(String, bool)> = vec![
            (deep, false),
            ("select repeat('a', 2000000000)".into(), false),
            (
                "select length(repeat(sym, 100000000)) from trade".into(),
                false,
            ),
            (
                "select count(*) from trade a cross join trade b".into(),
                false,
            ),
            (
                "select count(*) from trade a join trade b on a.sym = b.sym".into(),
                false,
            ),
            ("select * from trade".into(), true),
        ];
        for (sql, slow) in hostile {
            let t = tally.clone();
            scope.spawn(move || query_loop(http, sql, slow, stop, &t));
        }
        for _ in 0..o.slow_queries {
            let t = tally.clone();
            scope.spawn(move || {
                query_loop(
                    http,
                    "select sum(a.size * b.size) from trade a cross join trade b where a.price > b.price".into(),
                    false,
                    stop,
                    &t,
                )
            });
        }
        let _held = hold_clients(&[http, ilp, tp, pg], o.idle_per_port);
        let _deaf: Vec<_> = (0..SLOW_CLIENTS)
            .filter_map(|_| deaf_subscriber(tp))
            .collect();
        for _ in 0..SLOW_CLIENTS {
            scope.spawn(move || trickle(http, b"GET /health HTTP/1.1\r\nHost: x\r\n", stop));
            scope.spawn(move || trickle(ilp, b"trade,sym=SLOW price=1.0,size=1i", stop));
            scope.spawn(move || trickle(pg, b"\x00\x00\x00\x50\x00\x03\x00\x00user", stop));
        }
        while !stop.load(Ordering::Relaxed) {
            if let Ok(v) = crate::http::request_json(http, "GET", "/status") {
                if let Some(r) = v["process"]["rss_bytes"].as_u64() {
                    rss_max.fetch_max(r, Ordering::Relaxed);
                }
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        Ok(())
    })
}

pub fn run(bin: &Path, work: &Path, o: &RobustnessOptions) -> Result<RobustnessReport> {
    let machine = crate::machine::Machine::probe(work);
    let timeout = o.query_timeout_ms.to_string();
    let threads = o.query_threads.map(|n| n.to_string());
    let mut flags = vec!["--query-timeout-ms", timeout.as_str()];
    if let Some(t) = &threads {
        flags.extend(["--query-threads", t.as_str()]);
    }
    let mut srv = servers::start_tickdb(bin, work, "up", "robustness", &flags)?;
    let pg_port = pg_port_of(&srv)?;
    eprintln!("robustness: preloading {} rows", o.preload_rows);
    preload(srv.http, o.preload_rows)?;
    let feed = Arc::new(Feed::new()?);
    let tally = Arc::new(Mutex::new(BTreeMap::new()));
    let rss_max = Arc::new(AtomicU64::new(0));
    let ports = StormPorts {
        http: srv.http,
        ilp: srv.ilp,
        tp: srv.tp,
        pg: pg_port,
    };
    let (mut quiet, mut storm) = (Vec::new(), Vec::new());
    for k in 0..o.runs.max(1) {
        eprintln!("robustness: round {} of {}", k + 1, o.runs.max(1));
        quiet.push(phase("quiet", srv.http, o, &feed, |_| Ok(()))?);
        let (tally, rss_max) = (tally.clone(), rss_max.clone());
        storm.push(phase("storm", srv.http, o, &feed, move |stop| {
            run_storm(ports, o, stop, &tally, &rss_max)
        })?);
    }
    // Let cancelled queries finish and the last writes apply.
    std::thread::sleep(Duration::from_millis(500));
    let node_alive = srv.child.check_alive().is_ok()
        && matches!(
            HttpConn::connect(srv.http).and_then(|mut c| c.request("GET", "/health", b"")),
            Ok((200, _))
        );
    let (lost, dup) = check_rows(srv.http, &feed)?;
    srv.child.stop(Duration::from_secs(30));
    let outcomes = tally
        .lock()
        .map_err(|_| BenchError::Protocol("tally lock".into()))?
        .clone();
    Ok(RobustnessReport {
        machine: format!(
            "{} ({} cores), {:.0} GiB RAM, Linux {}",
            machine.cpu, machine.cores, machine.ram_gib, machine.kernel
        ),
        date: crate::today_utc(),
        options: format!(
            "{} updates/s of {} rows ({} rows/s)",
            o.updates_per_s,
            o.update_rows,
            o.updates_per_s * o.update_rows as u64
        ) + &format!(", {} s per phase", o.seconds)
            + &o.query_threads
                .map(|n| format!(", --query-threads {n}"))
                .unwrap_or_default(),
        quiet,
        storm,
        query_outcomes: outcomes,
        idle_connections: o.idle_per_port * 4,
        slow_clients: SLOW_CLIENTS * 4,
        preload_rows: o.preload_rows,
        slow_queries: o.slow_queries,
        lost_rows: lost,
        duplicated_rows: dup,
        node_alive,
        rss_max_bytes: rss_max.load(Ordering::Relaxed),
    })
}

fn pg_port_of(srv: &servers::Tickdb) -> Result<u16> {
    srv.pg
        .ok_or_else(|| BenchError::Server("tickdb up started without a PostgreSQL port".into()))
}

/// Every acknowledged id present exactly once: the ids the table holds for
/// the feed's symbol (as CSV), against the acknowledged ranges. Rows
/// written but not acknowledged (a request the client gave up on) may be
/// there too; they are neither lost nor duplicated.
/// The ids (`size`) of the feed's rows in `[lo, hi)`, as the node holds
/// them (duplicates included).
fn fetch_ids(port: u16, lo: u64, hi: u64, ids: &mut Vec<u64>) -> Result<()> {
    let sql =
        format!("select size from trade where sym = '{FEED_SYM}' and size >= {lo} and size < {hi}");
    let path = format!("/exec?format=csv&query={}", url_encode(&sql));
    // Right after a storm the node is still working off the hostile
    // queries already admitted (each ends at its deadline), so the check
    // may time out or find the queue full: try again, within a bound.
    let given_up_at = Instant::now() + Duration::from_secs(CHECK_RETRY_S);
    let (status, body) = loop {
        let (status, body) = HttpConn::connect(port)?.request("GET", &path, b"")?;
        if (status == 408 || status == 503) && Instant::now() < given_up_at {
            eprintln!("robustness: the row check got HTTP {status} (the node is still ending the storm's queries); trying again");
            std::thread::sleep(Duration::from_secs(1));
            continue;
        }
        break (status, body);
    };
    if status != 200 {
        return Err(BenchError::Server(format!(
            "{sql}: HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    ids.extend(
        String::from_utf8_lossy(&body)
            .lines()
            .skip(1)
            .filter_map(|l| l.trim().parse::<u64>().ok()),
    );
    Ok(())
}

pub(crate) fn check_rows(port: u16, feed: &Feed) -> Result<(u64, u64)> {
    let mut ranges = feed
        .acked_ids
        .lock()
        .map_err(|_| BenchError::Protocol("ids lock".into()))?
        .clone();
    ranges.sort_unstable();
    // Every id the feed handed out, a window at a time: one answer for all
    // of them would outgrow what the client reads in one response.
    let end = feed.next_id.load(Ordering::Relaxed);
    let mut ids: Vec<u64> = Vec::new();
    let mut lo = 1;
    while lo < end {
        let hi = (lo + CHECK_WINDOW_IDS).min(end);
        fetch_ids(port, lo, hi, &mut ids)?;
        lo = hi;
    }
    ids.sort_unstable();
    let mut lost = 0u64;
    let mut dup = 0u64;
    let mut at = 0usize;
    for (from, to) in ranges {
        for id in from..to {
            while at < ids.len() && ids[at] < id {
                at += 1;
            }
            let mut n = 0;
            while at < ids.len() && ids[at] == id {
                n += 1;
                at += 1;
            }
            match n {
                0 => lost += 1,
                1 => {}
                k => dup += k - 1,
            }
        }
    }
    Ok((lost, dup))
}
