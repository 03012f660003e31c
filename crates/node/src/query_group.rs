//! A node's query ports as members of query groups (`rp,PORT`, the KX
//! socket sharding whitepaper): any number of rdbs and `up` nodes share
//! each query port (HTTP, PostgreSQL wire, kdb+ IPC) and the kernel spreads
//! new connections over them.
//!
//! This module owns when this member listens on each port:
//!
//! - **Join when ready.** A shared port is bound at start (a conflict is
//!   reported at once) but listened on only once the node is ready, so the
//!   kernel never hands a connection to a member with partial tables. A
//!   port of its own listens at once, so `/health` answers while loading.
//! - **Busy steering.** While the node is saturated (running and waiting
//!   queries at `--busy-queries-max`, or one query running longer than
//!   `--busy-query-ms`), it closes its shared listeners, so new
//!   connections go to the other members; it reopens them when it has
//!   capacity again. With `net.ipv4.tcp_migrate_req` on, connections
//!   already queued at the closed listener move to the others instead of
//!   being reset; with it off steering stays off. A member never leaves
//!   when it is the last listener on the port: members take a file lock
//!   (`tickdb_net::group::leave_lock`) and count the listeners before
//!   leaving, so two busy members cannot both leave.
//! - **Drain.** Every listener closes for good.
//! - **Group changes are logged**: a member that joins, leaves or crashes
//!   changes the count of listeners on the port.

use parking_lot::Mutex;
use serde::Serialize;
use socket2::Socket;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;
use tickdb_net::acceptor::{acceptor, Acceptor, AcceptorCtl, OpenConns, Slot};
use tickdb_net::{group, ListenSpec};
use tickdb_query::pool::PoolStats;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

/// How often busy steering looks at the query load, in milliseconds.
pub const STEER_CHECK_MS: u64 = 20;
/// How long a member leaving a group waits for its socket to close, in ms.
pub const LEAVE_WAIT_MS: u64 = 200;
/// How often the listeners on each shared port are counted, in ms.
pub const GROUP_WATCH_MS: u64 = 500;

/// One listening port of this node.
struct Port {
    what: String,
    ip: IpAddr,
    spec: ListenSpec,
    ctl: AcceptorCtl,
    conns: OpenConns,
    /// A shared port's socket, bound at start, until the node is ready.
    bound: Mutex<Option<Socket>>,
    /// Closed by busy steering (to be reopened).
    away: AtomicBool,
}

impl Port {
    fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.spec.port)
    }

    fn shared(&self) -> bool {
        self.spec.reuse_port
    }

    /// Listens on `socket` (bound by `bind`) and hands it to the server.
    fn listen(&self, socket: Socket) -> Result<(), String> {
        let l = tickdb_net::listen_socket(socket, self.ip, &self.spec, &self.what)
            .map_err(|e| e.to_string())?;
        let l = TcpListener::from_std(l)
            .map_err(|e| format!("{} on {}: {e}", self.what, self.addr()))?;
        self.ctl.set(Slot::Open(Arc::new(l)));
        Ok(())
    }

    fn bind(&self) -> Result<Socket, String> {
        tickdb_net::bind_socket(self.ip, &self.spec, &self.what).map_err(|e| e.to_string())
    }
}

/// When a member counts as saturated.
#[derive(Debug, Clone, Copy)]
pub struct Steering {
    pub enabled: bool,
    /// Running plus waiting queries at which the member leaves.
    pub queries_max: usize,
    /// A query running longer than this makes the member leave; zero: never.
    pub query_ms: u64,
}

/// What `/status` shows of one port.
#[derive(Debug, Clone, Serialize)]
pub struct PortStatus {
    pub what: String,
    pub port: String,
    pub listening: bool,
    /// Steered away while busy.
    pub away: bool,
    /// Sockets listening on the port now, every member's (shared ports).
    pub listeners: Option<usize>,
    pub open_connections: usize,
}

/// The node's listening ports.
pub struct QueryPorts {
    ports: Mutex<Vec<Arc<Port>>>,
    drain: CancellationToken,
    /// Shared ports bound but not yet listening (until `join`).
    unjoined: AtomicUsize,
}

impl QueryPorts {
    pub fn new(drain: CancellationToken) -> Arc<QueryPorts> {
        Arc::new(QueryPorts {
            ports: Mutex::new(Vec::new()),
            drain,
            unjoined: AtomicUsize::new(0),
        })
    }

    /// Binds a port. A shared one (`rp,`) listens once `join` says the node
    /// is ready; any other listens now.
    pub fn add(&self, ip: IpAddr, spec: &ListenSpec, what: &str) -> Result<Acceptor, String> {
        let conns = OpenConns::default();
        let (ctl, acc) = acceptor(Slot::Closed, self.drain.clone(), conns.clone());
        let port = Arc::new(Port {
            what: what.to_string(),
            ip,
            spec: *spec,
            ctl,
            conns,
            bound: Mutex::new(None),
            away: AtomicBool::new(false),
        });
        let socket = port.bind()?;
        if port.shared() {
            *port.bound.lock() = Some(socket);
            self.unjoined.fetch_add(1, Ordering::AcqRel);
        } else {
            port.listen(socket)?;
        }
        self.ports.lock().push(port);
        Ok(acc)
    }

    fn all(&self) -> Vec<Arc<Port>> {
        self.ports.lock().clone()
    }

    /// The node is ready: listen on the shared ports bound at start, all
    /// of them before `/health` says ready (`joined`).
    pub fn join(&self) -> Result<(), String> {
        let mut joined = Vec::new();
        for p in self.all() {
            let Some(socket) = p.bound.lock().take() else {
                continue;
            };
            if self.drain.is_cancelled() {
                return Ok(());
            }
            p.listen(socket)?;
            joined.push(p);
        }
        self.unjoined.store(0, Ordering::Release);
        for p in joined {
            tracing::info!(
                "ready: joined the query group on {} ({}){}",
                p.addr(),
                p.what,
                count_text(p.addr())
            );
        }
        Ok(())
    }

    /// Whether every shared port listens (true at once when none is
    /// shared).
    pub fn joined(&self) -> bool {
        self.unjoined.load(Ordering::Acquire) == 0
    }

    /// Closes every listener for good (drain): with
    /// `net.ipv4.tcp_migrate_req` on, connections queued at them move to
    /// the other members.
    pub fn close_all(&self) {
        for p in self.all() {
            p.bound.lock().take();
            p.ctl.set(Slot::Done);
        }
    }

    /// Connections open on every port.
    pub fn open_connections(&self) -> usize {
        self.all().iter().map(|p| p.conns.count()).sum()
    }

    pub fn status(&self) -> Vec<PortStatus> {
        self.all()
            .iter()
            .map(|p| PortStatus {
                what: p.what.clone(),
                port: p.spec.to_string(),
                listening: p.ctl.is_open(),
                away: p.away.load(Ordering::Relaxed),
                listeners: p
                    .shared()
                    .then(|| group::listeners_on(p.addr()).ok())
                    .flatten(),
                open_connections: p.conns.count(),
            })
            .collect()
    }

    /// Whether any port is shared.
    pub fn any_shared(&self) -> bool {
        self.all().iter().any(|p| p.shared())
    }

    /// Logs at start what the kernel's settings mean for this member.
    pub fn log_kernel_settings(&self, steering: &Steering) {
        if !self.any_shared() {
            return;
        }
        match group::migrate_req() {
            Some(true) => {}
            Some(false) => tracing::warn!(
                "net.ipv4.tcp_migrate_req is 0: connections waiting in this member's accept queue are reset, not moved to the other members of its query groups, when it drains or stops; busy steering is off{} (sysctl -w net.ipv4.tcp_migrate_req=1 turns both on)",
                if steering.enabled { "" } else { " (and --no-busy-steering is set)" }
            ),
            None => tracing::warn!(
                "this kernel has no net.ipv4.tcp_migrate_req (Linux 5.14+): connections waiting in this member's accept queue are reset when it drains or stops; busy steering is off"
            ),
        }
    }

    /// Counts the listeners on each shared port and logs every change: a
    /// member that joined, drained, was steered away, or crashed.
    pub async fn watch_groups(self: Arc<Self>) {
        let mut last: Vec<Option<usize>> = Vec::new();
        loop {
            if self.drain.is_cancelled() {
                return;
            }
            let ports = self.all();
            last.resize(ports.len(), None);
            for (i, p) in ports.iter().enumerate() {
                if !p.shared() {
                    continue;
                }
                let Ok(n) = group::listeners_on(p.addr()) else {
                    continue;
                };
                if let Some(was) = last[i] {
                    if was != n {
                        tracing::info!(
                            "query group on {} ({}): {n} listener(s) now, was {was}{}",
                            p.addr(),
                            p.what,
                            if n < was {
                                " (a member left: drained, busy, or stopped)"
                            } else {
                                ""
                            }
                        );
                    }
                }
                last[i] = Some(n);
            }
            tokio::time::sleep(Duration::from_millis(GROUP_WATCH_MS)).await;
        }
    }

    /// Busy steering: leaves the shared ports' groups while `load` says
    /// the member is saturated, rejoins when it is not.
    pub async fn steer(
        self: Arc<Self>,
        steering: Steering,
        load: impl Fn() -> Option<PoolStats> + Send + 'static,
    ) {
        if !steering.enabled || !self.any_shared() {
            return;
        }
        let mut stuck_logged = false;
        loop {
            tokio::time::sleep(Duration::from_millis(STEER_CHECK_MS)).await;
            if self.drain.is_cancelled() {
                return;
            }
            let Some(l) = load() else { continue };
            let reason = busy_reason(&steering, &l);
            let away: Vec<Arc<Port>> = self
                .all()
                .into_iter()
                .filter(|p| p.away.load(Ordering::Relaxed))
                .collect();
            // A port that stayed while another left (it was the only
            // listener at that moment) is tried again each period while
            // the member stays busy, not only when every port is in.
            let present = self.all().iter().any(|p| p.shared() && p.ctl.is_open());
            match reason {
                Some(why) if present => {
                    if group::migrate_req() != Some(true) {
                        continue;
                    }
                    // The load is looked at again under each port's lock:
                    // a query that ended meanwhile must not send the
                    // member away for one steering period.
                    let still_busy =
                        || load().is_some_and(|l| busy_reason(&steering, &l).is_some());
                    let (left, stayed) = self.leave(still_busy).await;
                    if !left.is_empty() {
                        stuck_logged = false;
                        tracing::warn!(
                            "busy ({why}): left the query group on {}; new connections go to the other members until this one has capacity again",
                            left.join(", ")
                        );
                    } else if !stayed.is_empty() && !stuck_logged {
                        stuck_logged = true;
                        tracing::warn!(
                            "busy ({why}) but the only listener on {}: staying, so the port keeps answering",
                            stayed.join(", ")
                        );
                    }
                }
                None if !away.is_empty() => {
                    let mut back = Vec::new();
                    for p in away {
                        match reopen(&p) {
                            Ok(()) => back.push(format!("{} ({})", p.addr(), p.what)),
                            Err(e) => tracing::error!("rejoining the query group: {e}"),
                        }
                    }
                    tracing::info!(
                        "capacity again ({} running, {} waiting): rejoined the query group on {}",
                        l.running,
                        l.waiting,
                        back.join(", ")
                    );
                }
                None => stuck_logged = false,
                _ => {}
            }
        }
    }

    /// Closes each open shared listener this member is not the last on,
    /// while `still_busy` says it is saturated.
    async fn leave(&self, still_busy: impl Fn() -> bool) -> (Vec<String>, Vec<String>) {
        let (mut left, mut stayed) = (Vec::new(), Vec::new());
        for p in self.all() {
            if !p.shared() || !p.ctl.is_open() {
                continue;
            }
            let name = format!("{} ({})", p.addr(), p.what);
            let lock = match group::leave_lock(p.addr()) {
                Ok(l) => l,
                Err(e) => {
                    tracing::warn!("busy steering: cannot take the group lock for {name}: {e}");
                    continue;
                }
            };
            if !still_busy() {
                break;
            }
            match group::listeners_on(p.addr()) {
                Ok(n) if n > 1 => {
                    p.away.store(true, Ordering::Relaxed);
                    p.ctl.set(Slot::Closed);
                    // The acceptor task drops the socket when it next
                    // runs: hold the lock until the kernel has it gone, so
                    // the next member to decide counts this one out.
                    let deadline = std::time::Instant::now() + Duration::from_millis(LEAVE_WAIT_MS);
                    while group::listeners_on(p.addr()).is_ok_and(|now| now >= n)
                        && std::time::Instant::now() < deadline
                    {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                    left.push(name);
                }
                _ => stayed.push(name),
            }
            drop(lock);
        }
        (left, stayed)
    }
}

/// Why the member is saturated now, or None.
fn busy_reason(s: &Steering, l: &PoolStats) -> Option<String> {
    let in_flight = l.running + l.waiting;
    if in_flight >= s.queries_max.max(1) {
        return Some(format!(
            "{in_flight} queries in flight, --busy-queries-max {}",
            s.queries_max
        ));
    }
    match l.longest_running_ms {
        Some(ms) if s.query_ms > 0 && ms >= s.query_ms => Some(format!(
            "a query has run {ms} ms, --busy-query-ms {}",
            s.query_ms
        )),
        _ => None,
    }
}

fn reopen(p: &Port) -> Result<(), String> {
    p.listen(p.bind()?)?;
    p.away.store(false, Ordering::Relaxed);
    Ok(())
}

fn count_text(addr: SocketAddr) -> String {
    match group::listeners_on(addr) {
        Ok(n) => format!(", {n} listener(s) on the port now"),
        Err(_) => String::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(running: usize, waiting: usize, longest_ms: Option<u64>) -> PoolStats {
        PoolStats {
            threads: 1,
            concurrency: 4,
            queue_max: 64,
            running,
            waiting,
            admitted_total: 0,
            refused_busy_total: 0,
            expired_waiting_total: 0,
            longest_running_ms: longest_ms,
        }
    }

    /// Two members joined on one free port on loopback.
    fn two_members() -> (Arc<QueryPorts>, Arc<QueryPorts>, SocketAddr) {
        let ip: IpAddr = "127.0.0.1".parse().unwrap();
        let port = std::net::TcpListener::bind((ip, 0))
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let spec = ListenSpec {
            port,
            reuse_port: true,
        };
        let members: Vec<Arc<QueryPorts>> = (0..2)
            .map(|_| {
                let m = QueryPorts::new(CancellationToken::new());
                m.add(ip, &spec, "HTTP").unwrap();
                m.join().unwrap();
                m
            })
            .collect();
        let addr = SocketAddr::new(ip, port);
        assert_eq!(group::listeners_on(addr).unwrap(), 2);
        (members[0].clone(), members[1].clone(), addr)
    }

    #[tokio::test]
    async fn a_member_whose_load_ended_before_the_lock_stays() {
        let (a, _b, addr) = two_members();
        let (left, stayed) = a.leave(|| false).await;
        assert!(left.is_empty() && stayed.is_empty(), "{left:?} {stayed:?}");
        assert_eq!(group::listeners_on(addr).unwrap(), 2);
    }

    #[tokio::test]
    async fn a_busy_member_leaves_but_never_as_the_last_listener() {
        let (a, b, addr) = two_members();
        let (left, _) = a.leave(|| true).await;
        assert_eq!(left.len(), 1, "{left:?}");
        assert_eq!(group::listeners_on(addr).unwrap(), 1);
        let (left, stayed) = b.leave(|| true).await;
        assert!(left.is_empty() && stayed.len() == 1, "{left:?} {stayed:?}");
        assert_eq!(group::listeners_on(addr).unwrap(), 1);
    }

    #[test]
    fn saturated_by_queries_in_flight_or_by_one_long_query() {
        let s = Steering {
            enabled: true,
            queries_max: 2,
            query_ms: 500,
        };
        assert!(busy_reason(&s, &load(1, 0, Some(10))).is_none());
        assert!(busy_reason(&s, &load(1, 1, Some(10)))
            .unwrap()
            .contains("2 queries in flight"));
        assert!(busy_reason(&s, &load(1, 0, Some(600)))
            .unwrap()
            .contains("--busy-query-ms 500"));
        let no_time = Steering { query_ms: 0, ..s };
        assert!(busy_reason(&no_time, &load(1, 0, Some(60_000))).is_none());
    }
}
