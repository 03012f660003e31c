//! A failover group: two `tickdb up` nodes, "a" and "b", each bound to a
//! loopback address of its own (127.0.X.11 and 127.0.X.12) with the same
//! port numbers, so that a client given both hosts (`tickdb feed --host
//! A,B`) follows the primary on one ILP port; a live feed following both;
//! and a remote `tickdb rdb --tp A,B` following the primary among their
//! subscription ports. With etcd the nodes elect their primary; without it
//! "a" starts as the primary and "b" as its standby, and the benchmark
//! promotes by hand.
//!
//! `verify` is the check every round ends with: the feed paused (SIGSTOP),
//! everything caught up, the primary's journal compared with the standby's
//! (`tickdb journal compare`, exit 0), and the rows of the primary, the
//! standby and the rdb equal.

use super::Check;
use crate::child::{self, Child};
use crate::error::{BenchError, Result};
use crate::http::{request_json_at, HttpConn};
use crate::replication::cluster::{Cluster, SECRET_ENV};
use serde_json::Value;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

/// The nodes' names (`--node-name`).
pub const NAMES: [&str; 2] = ["a", "b"];
/// The feed's symbol universe (the market-data stack's default).
const FEED_SYMBOLS: usize = 2000;
/// A status request to a node gives up after this (a node may be paused).
const STATUS_TIMEOUT: Duration = Duration::from_secs(2);
/// A node's start (its journal replayed) until it reports ready.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// How long a group may take to settle: one primary, the standby streaming
/// from it and caught up (a restarted node replays its journal first).
pub const STABLE_TIMEOUT: Duration = Duration::from_secs(300);
/// How long the paused feed's last writes may take to be applied everywhere.
const QUIESCE_TIMEOUT: Duration = Duration::from_secs(300);
/// Polling period of every wait here.
pub const POLL: Duration = Duration::from_millis(10);
/// A stopped node's grace period (a final sync and checkpoint).
const STOP_GRACE: Duration = Duration::from_secs(30);
/// Tries at finding one set of ports free on both addresses.
const PORT_TRIES: usize = 50;

/// How the nodes of a group run.
#[derive(Debug, Clone)]
pub struct GroupSpec {
    /// Prefix of the logs and data directories (`WORK/TAG-a-data`).
    pub tag: String,
    /// `--etcd URL` (automatic failover), or None (promotion by hand).
    pub etcd: Option<String>,
    /// `--replication`: async or semi-sync.
    pub mode: &'static str,
    pub lease_ttl_s: u64,
    pub fence_margin_ms: u64,
    pub check_ms: u64,
}

#[derive(Debug, Clone, Copy)]
struct Ports {
    http: u16,
    ilp: u16,
    tp: u16,
    repl: u16,
    pg: u16,
}

/// The remote rdb following the group.
struct Rdb {
    child: Child,
    http: u16,
}

pub struct Group<'a> {
    c: &'a Cluster,
    pub spec: GroupSpec,
    ips: [Ipv4Addr; 2],
    ports: Ports,
    nodes: [Option<Child>; 2],
    starts: [u32; 2],
    feed: Option<Child>,
    feed_paused: bool,
    rdb: Option<Rdb>,
    rdb_starts: u32,
    /// Why an rdb stopped, for each one that did while the group waited
    /// (a fresh rdb replaced it).
    rdb_deaths: Vec<String>,
}

/// What the benchmark reads of a node's /status.
#[derive(Debug, Clone)]
pub struct NodeView {
    /// primary, standby or fenced; None until it is ready.
    pub role: Option<String>,
    pub epoch: u64,
    /// Its journal's last sequence.
    pub tp_seq: u64,
    /// What its rdb applied.
    pub seq: u64,
    pub rows: u64,
    /// A standby's link to its primary: state and the primary's address.
    pub link_state: String,
    pub json: Value,
}

impl NodeView {
    fn of(json: Value) -> NodeView {
        let r = &json["replication"];
        let ready = json["ready"].as_bool() == Some(true);
        NodeView {
            role: r["role"].as_str().filter(|_| ready).map(str::to_string),
            epoch: r["epoch"].as_u64().unwrap_or(0),
            tp_seq: json["tp"]["seq"].as_u64().unwrap_or(0),
            seq: json["seq"].as_u64().unwrap_or(0),
            rows: crate::restart::rdb_rows(&json),
            link_state: r["primary"]["state"].as_str().unwrap_or("").to_string(),
            json,
        }
    }

    pub fn is(&self, role: &str) -> bool {
        self.role.as_deref() == Some(role)
    }
}

/// Picks a free port on `a`, also free on `b`; the listeners are kept by
/// the caller until every port is chosen, so no two are the same.
fn port_on_both(a: Ipv4Addr, b: Ipv4Addr) -> Result<(u16, TcpListener, TcpListener)> {
    for _ in 0..PORT_TRIES {
        let la = TcpListener::bind((a, 0)).map_err(BenchError::io(format!("binding {a}")))?;
        let port = la
            .local_addr()
            .map_err(BenchError::io("a listener's address"))?
            .port();
        if let Ok(lb) = TcpListener::bind((b, port)) {
            return Ok((port, la, lb));
        }
    }
    Err(BenchError::Server(format!(
        "no port free on both {a} and {b} after {PORT_TRIES} tries"
    )))
}

impl<'a> Group<'a> {
    /// Chooses the group's addresses and ports; starts nothing.
    pub fn new(c: &'a Cluster, spec: GroupSpec) -> Result<Group<'a>> {
        // A third octet of its own, so that groups of a run (and other
        // runs' loopback nodes on 127.0.0.x) never share an address.
        let x: u8 = rand::random_range(100..=250);
        let ips = [Ipv4Addr::new(127, 0, x, 11), Ipv4Addr::new(127, 0, x, 12)];
        let mut held = Vec::new();
        let mut next = || -> Result<u16> {
            let (p, la, lb) = port_on_both(ips[0], ips[1])?;
            held.push((la, lb));
            Ok(p)
        };
        let ports = Ports {
            http: next()?,
            ilp: next()?,
            tp: next()?,
            repl: next()?,
            pg: next()?,
        };
        drop(held);
        for n in NAMES {
            let _ = std::fs::remove_dir_all(c.work().join(format!("{}-{n}-data", spec.tag)));
        }
        Ok(Group {
            c,
            spec,
            ips,
            ports,
            nodes: [None, None],
            starts: [0, 0],
            feed: None,
            feed_paused: false,
            rdb: None,
            rdb_starts: 0,
            rdb_deaths: Vec::new(),
        })
    }

    pub fn http(&self, i: usize) -> SocketAddr {
        SocketAddr::new(IpAddr::V4(self.ips[i]), self.ports.http)
    }

    fn repl(&self, i: usize) -> String {
        format!("{}:{}", self.ips[i], self.ports.repl)
    }

    pub fn data_dir(&self, i: usize) -> PathBuf {
        self.c
            .work()
            .join(format!("{}-{}-data", self.spec.tag, NAMES[i]))
    }

    /// The other node.
    pub fn other(i: usize) -> usize {
        1 - i
    }

    /// Starts node `i` on its data directory (what an earlier run of it
    /// left), as a standby of `standby_of` when given (without etcd), and
    /// waits until it reports ready.
    pub fn start(&mut self, i: usize, standby_of: Option<usize>) -> Result<()> {
        let s = &self.spec;
        let ip = self.ips[i].to_string();
        let mut cmd = Command::new(self.c.bin());
        cmd.arg("up")
            .args(["--bind", &ip, "--no-protected-mode", "--advertise", &ip])
            .args(["--http-port", &self.ports.http.to_string()])
            .args(["--ilp-port", &self.ports.ilp.to_string()])
            .args(["--tp-port", &self.ports.tp.to_string()])
            .args(["--repl-port", &self.ports.repl.to_string()])
            .args(["--pg-port", &self.ports.pg.to_string()])
            .arg("--data-dir")
            .arg(self.data_dir(i))
            .args(["--node-name", NAMES[i]])
            .args(["--fsync", "always", "--replication", s.mode]);
        if let Some(url) = &s.etcd {
            cmd.args(["--etcd", url, "--cluster", &s.tag])
                .args(["--lease-ttl-s", &s.lease_ttl_s.to_string()])
                .args(["--fence-margin-ms", &s.fence_margin_ms.to_string()])
                .args(["--failover-check-ms", &s.check_ms.to_string()]);
        }
        if let Some(p) = standby_of {
            cmd.args(["--standby-of", &self.repl(p)]);
        }
        cmd.env("TICKDB_LOG", "warn")
            .env(SECRET_ENV, self.c.secret());
        self.starts[i] += 1;
        let log = self.c.work().join(format!(
            "{}-{}-{}.log",
            self.spec.tag, NAMES[i], self.starts[i]
        ));
        self.nodes[i] = Some(Child::spawn(
            &format!("tickdb up ({} node {})", self.spec.tag, NAMES[i]),
            &mut cmd,
            &log,
        )?);
        let t0 = Instant::now();
        loop {
            child::check_interrupt()?;
            self.alive(i)?;
            if let Ok(v) = self.view(i) {
                if v.role.is_some() {
                    return Ok(());
                }
            }
            if t0.elapsed() > READY_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "{} node {} not ready after {READY_TIMEOUT:?}:\n{}",
                    self.spec.tag,
                    NAMES[i],
                    child::log_tail(&log)
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Fails if node `i` was started and has exited.
    pub fn alive(&mut self, i: usize) -> Result<()> {
        match self.nodes[i].as_mut() {
            Some(c) => c.check_alive(),
            None => Ok(()),
        }
    }

    pub fn view(&self, i: usize) -> Result<NodeView> {
        request_json_at(self.http(i), "GET", "/status", STATUS_TIMEOUT).map(NodeView::of)
    }

    /// The sum of a counter over both nodes' /metrics (a node that does not
    /// answer counts 0).
    pub fn metric_sum(&self, name: &str) -> u64 {
        (0..2)
            .filter_map(|i| {
                let (st, body) = HttpConn::connect_to(self.http(i), STATUS_TIMEOUT)
                    .and_then(|mut c| c.request("GET", "/metrics", b""))
                    .ok()?;
                (st == 200).then_some(())?;
                String::from_utf8_lossy(&body).lines().find_map(|l| {
                    l.strip_prefix(name)
                        .and_then(|v| v.strip_prefix(' '))
                        .and_then(|v| v.trim().parse::<u64>().ok())
                })
            })
            .sum()
    }

    /// SIGKILL to node `i`: a crash, with no shutdown work.
    pub fn kill(&mut self, i: usize) {
        if let Some(mut c) = self.nodes[i].take() {
            c.kill();
        }
    }

    /// Sends `sig` to node `i`'s process group (SIGSTOP, SIGCONT).
    pub fn signal(&self, i: usize, sig: libc::c_int) {
        if let Some(pid) = self.nodes[i].as_ref().and_then(|c| c.pid()) {
            unsafe {
                libc::kill(-(pid as i32), sig);
            }
        }
    }

    /// Waits until one node is the primary and the other its standby,
    /// streaming and holding everything the primary held a moment before,
    /// and the rdb (if any) has applied as much. Returns (primary, standby).
    pub fn wait_stable(&mut self, timeout: Duration) -> Result<(usize, usize)> {
        let t0 = Instant::now();
        let mut last = String::new();
        loop {
            child::check_interrupt()?;
            self.alive(0)?;
            self.alive(1)?;
            if let Some(why) = self.rdb_exited() {
                self.rdb_deaths.push(why);
                self.restart_rdb()?;
            }
            let views = [self.view(0).ok(), self.view(1).ok()];
            let p = (0..2).find(|&i| views[i].as_ref().is_some_and(|v| v.is("primary")));
            if let (Some(p), Some(pv)) = (p, p.and_then(|p| views[p].as_ref())) {
                let s = Group::other(p);
                // Read after the primary: it must hold at least as much.
                if let (Ok(sv), Ok(rdb_seq)) = (self.view(s), self.rdb_seq()) {
                    let following = sv.json["replication"]["primary"]["primary"]
                        .as_str()
                        .is_some_and(|a| a == self.repl(p));
                    if sv.is("standby")
                        && sv.link_state == "streaming"
                        && following
                        && sv.tp_seq >= pv.tp_seq
                        && sv.seq >= pv.tp_seq
                        && rdb_seq.is_none_or(|r| r >= pv.tp_seq)
                    {
                        return Ok((p, s));
                    }
                    last = format!(
                        "primary {} at seq {}; {} is {:?} ({}), journal at {}, applied {}; rdb at {rdb_seq:?}",
                        NAMES[p], pv.tp_seq, NAMES[s], sv.role, sv.link_state, sv.tp_seq, sv.seq
                    );
                }
            } else {
                last = format!(
                    "roles: a {:?}, b {:?}",
                    views[0].as_ref().map(|v| v.role.clone()),
                    views[1].as_ref().map(|v| v.role.clone())
                );
            }
            if t0.elapsed() > timeout {
                return Err(BenchError::Server(format!(
                    "{}: no stable primary and standby within {timeout:?}: {last}",
                    self.spec.tag
                )));
            }
            std::thread::sleep(POLL);
        }
    }

    /// Starts the feed, following both nodes: `tickdb feed --host A,B` at
    /// `rate` over ILP TCP (the nodes' shared ILP port).
    pub fn start_feed(&mut self, rate: u64, seed: u64) -> Result<()> {
        let mut cmd = Command::new(self.c.bin());
        cmd.env("TICKDB_LOG", "warn")
            .arg("feed")
            .args(["--host", &format!("{},{}", self.ips[0], self.ips[1])])
            .args(["--ilp-port", &self.ports.ilp.to_string()])
            .args(["--http-port", &self.ports.http.to_string()])
            .args(["--rate", &rate.to_string()])
            .args(["--symbols", &FEED_SYMBOLS.to_string()])
            .args(["--seed", &seed.to_string()])
            .arg("--summary")
            .arg(self.feed_summary_path());
        self.feed = Some(Child::spawn(
            "tickdb feed",
            &mut cmd,
            &self.c.work().join(format!("{}-feed.log", self.spec.tag)),
        )?);
        Ok(())
    }

    fn feed_summary_path(&self) -> PathBuf {
        self.c.work().join(format!("{}-feed.json", self.spec.tag))
    }

    /// Stops the feed (SIGTERM: it writes its summary) and returns the
    /// summary.
    pub fn stop_feed(&mut self) -> Result<Option<tickdb_stack::feed::FeedSummary>> {
        self.pause_feed(false);
        let Some(mut f) = self.feed.take() else {
            return Ok(None);
        };
        f.check_alive()?;
        f.stop(Duration::from_secs(10));
        let text = std::fs::read(self.feed_summary_path()).ok();
        Ok(text.and_then(|t| serde_json::from_slice(&t).ok()))
    }

    /// SIGSTOP (true) or SIGCONT (false) to the feed.
    fn pause_feed(&mut self, pause: bool) {
        if pause == self.feed_paused {
            return;
        }
        if let Some(pid) = self.feed.as_ref().and_then(|c| c.pid()) {
            unsafe {
                libc::kill(
                    pid as i32,
                    if pause { libc::SIGSTOP } else { libc::SIGCONT },
                );
            }
        }
        self.feed_paused = pause;
    }

    pub fn feed_alive(&mut self) -> Result<()> {
        match self.feed.as_mut() {
            Some(f) => f.check_alive(),
            None => Ok(()),
        }
    }

    /// Starts a remote rdb following the group's subscription ports.
    pub fn start_rdb(&mut self) -> Result<()> {
        let http = child::free_port()?;
        let pg = child::free_port()?;
        let tp = format!(
            "{}:{},{}:{}",
            self.ips[0], self.ports.tp, self.ips[1], self.ports.tp
        );
        let mut cmd = Command::new(self.c.bin());
        cmd.env("TICKDB_LOG", "warn")
            .arg("rdb")
            .args(["--tp", &tp])
            .args(["--http-port", &http.to_string()])
            .args(["--pg-port", &pg.to_string()]);
        self.rdb_starts += 1;
        let mut child = Child::spawn(
            "tickdb rdb",
            &mut cmd,
            &self
                .c
                .work()
                .join(format!("{}-rdb-{}.log", self.spec.tag, self.rdb_starts)),
        )?;
        crate::servers::wait_http(&mut child, http, "/health")?;
        self.rdb = Some(Rdb { child, http });
        Ok(())
    }

    /// The rdb's applied sequence (None without an rdb).
    pub fn rdb_seq(&self) -> Result<Option<u64>> {
        self.rdb_view().map(|v| v.map(|v| v.seq))
    }

    fn rdb_view(&self) -> Result<Option<NodeView>> {
        match &self.rdb {
            Some(r) => request_json_at(
                SocketAddr::from(([127, 0, 0, 1], r.http)),
                "GET",
                "/status",
                STATUS_TIMEOUT,
            )
            .map(|j| Some(NodeView::of(j))),
            None => Ok(None),
        }
    }

    pub fn rdb_alive(&mut self) -> Result<()> {
        match self.rdb.as_mut() {
            Some(r) => r.child.check_alive(),
            None => Ok(()),
        }
    }

    /// Whether the rdb has exited, and why (its log's last line).
    pub fn rdb_exited(&mut self) -> Option<String> {
        let r = self.rdb.as_mut()?;
        r.child.check_alive().err()?;
        let tail = child::log_tail(&r.child.log);
        Some(
            tail.lines()
                .last()
                .unwrap_or("tickdb rdb exited (no log)")
                .to_string(),
        )
    }

    /// Why rdbs stopped (and were replaced) while the group waited, since
    /// the last call.
    pub fn take_rdb_deaths(&mut self) -> Vec<String> {
        std::mem::take(&mut self.rdb_deaths)
    }

    /// Replaces an rdb that exited with a fresh one (it replays the
    /// primary's journal from the start).
    pub fn restart_rdb(&mut self) -> Result<()> {
        if let Some(mut r) = self.rdb.take() {
            r.child.kill();
        }
        self.start_rdb()
    }

    /// The check a round ends with: the group stable, the feed paused,
    /// everything applied, the journals compared and the rows counted on
    /// the primary, the standby and the rdb. The feed resumes afterwards.
    pub fn verify(&mut self, scenario: &str) -> Result<Check> {
        let (p, s) = self.wait_stable(STABLE_TIMEOUT)?;
        self.pause_feed(true);
        let r = self.verify_paused(scenario, p, s);
        self.pause_feed(false);
        let c = r?;
        if c.rdb_rows.is_some_and(|n| n != c.primary_rows) {
            // Counted once: later rounds are checked with a fresh rdb.
            self.restart_rdb()?;
        }
        Ok(c)
    }

    fn verify_paused(&mut self, scenario: &str, p: usize, s: usize) -> Result<Check> {
        let t0 = Instant::now();
        let mut prev = None;
        let (pv, sv, rv) = loop {
            child::check_interrupt()?;
            self.alive(p)?;
            self.alive(s)?;
            self.rdb_alive()?;
            let pv = self.view(p)?;
            let sv = self.view(s)?;
            let rv = self.rdb_view()?;
            let all = pv.tp_seq;
            let settled = prev == Some(all)
                && pv.seq == all
                && sv.tp_seq == all
                && sv.seq == all
                && rv.as_ref().is_none_or(|r| r.seq == all);
            if settled {
                break (pv, sv, rv);
            }
            prev = Some(all);
            if t0.elapsed() > QUIESCE_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "{scenario}: not caught up within {QUIESCE_TIMEOUT:?} with the feed paused: primary journal {} applied {}, standby journal {} applied {}, rdb {:?}",
                    pv.tp_seq, pv.seq, sv.tp_seq, sv.seq, rv.map(|r| r.seq)
                )));
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        let (journal_equal, journal_compare) = self
            .c
            .compare_journals(&self.data_dir(p), &self.data_dir(s))?;
        let rdb_rows = rv.as_ref().map(|r| r.rows);
        let ok = journal_equal && pv.rows == sv.rows && rdb_rows.is_none_or(|r| r == pv.rows);
        if !ok {
            eprintln!(
                "failover: {scenario}: MISMATCH: journals {journal_compare}; rows {} on the primary, {} on the standby, {rdb_rows:?} on the rdb",
                pv.rows, sv.rows
            );
        }
        Ok(Check {
            scenario: scenario.to_string(),
            primary: NAMES[p].to_string(),
            seq: pv.tp_seq,
            primary_rows: pv.rows,
            standby_rows: sv.rows,
            rdb_rows,
            journal_equal,
            journal_compare,
            ok,
        })
    }

    /// Writer rows (`sym = SYM`) on node `i`: each id (`size`) and how many
    /// times it is there.
    pub fn ids(&self, i: usize, sym: &str) -> Result<std::collections::HashMap<u64, u32>> {
        ids_at(self.http(i), NAMES[i], sym)
    }

    /// `ids` on the rdb.
    pub fn rdb_ids(&self, sym: &str) -> Result<std::collections::HashMap<u64, u32>> {
        match &self.rdb {
            Some(r) => ids_at(SocketAddr::from(([127, 0, 0, 1], r.http)), "the rdb", sym),
            None => Ok(Default::default()),
        }
    }

    /// Stops everything (feed, rdb, nodes) and removes the data directories.
    pub fn stop(&mut self) {
        let _ = self.stop_feed();
        if let Some(mut r) = self.rdb.take() {
            r.child.stop(Duration::from_secs(5));
        }
        for i in 0..2 {
            if let Some(mut c) = self.nodes[i].take() {
                c.stop(STOP_GRACE);
            }
            let _ = std::fs::remove_dir_all(self.data_dir(i));
        }
    }
}

impl Drop for Group<'_> {
    fn drop(&mut self) {
        // A paused feed is killed like a running one (SIGKILL works on a
        // stopped process); the children's own guards do the rest.
        self.pause_feed(false);
    }
}

/// `select size from trade where sym = SYM` at `addr`: id → copies.
fn ids_at(addr: SocketAddr, who: &str, sym: &str) -> Result<std::collections::HashMap<u64, u32>> {
    let sql = format!("select size from trade where sym = '{sym}'");
    let path = format!("/exec?query={}", crate::http::url_encode(&sql));
    let (status, body) =
        HttpConn::connect_to(addr, Duration::from_secs(60))?.request("GET", &path, b"")?;
    if status != 200 {
        return Err(BenchError::Server(format!(
            "{sql} on {who}: HTTP {status}: {}",
            String::from_utf8_lossy(&body)
        )));
    }
    let v: Value =
        serde_json::from_slice(&body).map_err(|e| BenchError::Protocol(format!("{sql}: {e}")))?;
    let mut out = std::collections::HashMap::new();
    for row in v["dataset"].as_array().into_iter().flatten() {
        if let Some(id) = row[0].as_u64() {
            *out.entry(id).or_insert(0) += 1;
        }
    }
    Ok(out)
}
