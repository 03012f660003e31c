//! The processes of the socket sharding benchmark: one `tickdb tp` that
//! every listener follows, and listeners (`tickdb rdb`) that share query
//! ports (`rp,PORT`), each with an `--admin-port` of its own; what the
//! kernel says listens on a port; and `net.ipv4.tcp_migrate_req`, set for
//! the run and put back afterwards.

use crate::child::{self, free_port, Child};
use crate::error::{BenchError, Result};
use crate::http::{request_json, HttpConn};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// A listener may take this long to load and get ready.
const READY_TIMEOUT: Duration = Duration::from_secs(300);
/// Starts tried when the admin port found free was taken before the
/// listener bound it.
const PORT_RACE_TRIES: usize = 3;

pub const MIGRATE_REQ: &str = tickdb_net::group::MIGRATE_REQ_SYSCTL;

/// The query ports a group of listeners shares.
#[derive(Debug, Clone, Copy)]
pub struct Ports {
    pub ipc: u16,
    pub pg: u16,
    pub http: u16,
}

impl Ports {
    pub fn fresh() -> Result<Ports> {
        Ok(Ports {
            ipc: free_port()?,
            pg: free_port()?,
            http: free_port()?,
        })
    }
}

/// How a listener is started.
#[derive(Debug, Clone)]
pub struct Spec {
    /// The tp's subscription port.
    pub tp: u16,
    pub ports: Ports,
    /// `rp,PORT` (a group) or the plain port (a listener alone).
    pub shared: bool,
    /// Flags after the ports (steering, query slots).
    pub flags: Vec<String>,
}

/// One listener (`tickdb rdb`).
pub struct Member {
    pub name: String,
    pub child: Child,
    pub admin: u16,
    /// Its OS pid (what `.z.i` and `pg_backend_pid()` answer).
    pub pid: u32,
    pub spawned: Instant,
    /// Seconds from the spawn until its admin `/health` answered 200,
    /// `/status` said ready and its shared ports listened.
    pub ready_s: Option<f64>,
}

fn spec_port(p: u16, shared: bool) -> String {
    if shared {
        format!("rp,{p}")
    } else {
        p.to_string()
    }
}

/// Spawns a listener; `wait_ready` waits for it.
pub fn spawn(bin: &Path, work: &Path, name: &str, spec: &Spec) -> Result<Member> {
    let admin = free_port()?;
    let mut cmd = Command::new(bin);
    cmd.arg("rdb")
        .args(["--tp", &format!("127.0.0.1:{}", spec.tp)])
        .args(["--ipc-port", &spec_port(spec.ports.ipc, spec.shared)])
        .args(["--pg-port", &spec_port(spec.ports.pg, spec.shared)])
        .args(["--http-port", &spec_port(spec.ports.http, spec.shared)])
        .args(["--admin-port", &admin.to_string()])
        .args(&spec.flags)
        .env("TICKDB_LOG", "info")
        .env("TICKDB_PG_PASSWORD", crate::sharding::q::PASSWORD);
    let log = work.join(format!("{name}.log"));
    let child = Child::spawn(&format!("listener {name}"), &mut cmd, &log)?;
    let pid = child.pid().unwrap_or(0);
    Ok(Member {
        name: name.to_string(),
        child,
        admin,
        pid,
        spawned: Instant::now(),
        ready_s: None,
    })
}

/// `spawn` then `wait_ready`, on a fresh admin port when the one found
/// free was taken before the listener bound it.
pub fn start(bin: &Path, work: &Path, name: &str, spec: &Spec) -> Result<Member> {
    let mut tries = 0;
    loop {
        tries += 1;
        let mut m = spawn(bin, work, name, spec)?;
        match m.wait_ready() {
            Err(BenchError::Server(msg))
                if tries < PORT_RACE_TRIES && msg.contains("address already in use") =>
            {
                eprintln!("{name}: a port was taken before it bound it; starting it again");
            }
            Err(e) => return Err(e),
            Ok(_) => return Ok(m),
        }
    }
}

impl Member {
    /// Waits until its admin `/health` answers 200 (the node is ready and
    /// every shared port listens); returns (and keeps) the seconds since
    /// the spawn.
    pub fn wait_ready(&mut self) -> Result<f64> {
        loop {
            child::check_interrupt()?;
            self.child.check_alive()?;
            let healthy = matches!(
                HttpConn::connect(self.admin).and_then(|mut c| c.request("GET", "/health", b"")),
                Ok((200, _))
            );
            if healthy {
                let st = request_json(self.admin, "GET", "/status")?;
                if let Some(p) = st["member"]["pid"].as_u64() {
                    if p as u32 != self.pid {
                        return Err(BenchError::Server(format!(
                            "{}: /status says member pid {p}; the process is {}",
                            self.name, self.pid
                        )));
                    }
                }
                let s = self.spawned.elapsed().as_secs_f64();
                self.ready_s = Some(s);
                return Ok(s);
            }
            if self.spawned.elapsed() > READY_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "{}: not ready after {READY_TIMEOUT:?}; log {}:\n{}",
                    self.name,
                    self.child.log.display(),
                    child::log_tail(&self.child.log)
                )));
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// SIGTERM (a drain), then SIGKILL after `grace`.
    pub fn stop(&mut self, grace: Duration) {
        self.child.stop(grace);
    }

    /// Sends SIGTERM only: the member drains and exits by itself.
    pub fn sigterm(&self) {
        if let Some(pid) = self.child.pid() {
            unsafe {
                libc::kill(pid as i32, libc::SIGTERM);
            }
        }
    }

    /// One SQL answer's `dataset` from its own admin port.
    pub fn exec(&self, sql: &str) -> Result<serde_json::Value> {
        let v = request_json(
            self.admin,
            "GET",
            &format!("/exec?query={}", crate::http::url_encode(sql)),
        )?;
        Ok(v["dataset"].clone())
    }
}

/// SIGTERM to every member at once (each drains), then each is waited
/// for (SIGKILL after a few seconds).
pub fn stop_all(members: &mut [Member]) {
    for m in members.iter() {
        m.sigterm();
    }
    for m in members.iter_mut() {
        m.stop(Duration::from_secs(5));
    }
}

/// Starts several listeners at once (they load in parallel) and waits for
/// all of them.
pub fn start_all(bin: &Path, work: &Path, names: &[String], spec: &Spec) -> Result<Vec<Member>> {
    let mut ms = Vec::new();
    for n in names {
        ms.push(spawn(bin, work, n, spec)?);
    }
    let mut out = Vec::new();
    for mut m in ms {
        match m.wait_ready() {
            Ok(_) => out.push(m),
            Err(BenchError::Server(msg)) if msg.contains("address already in use") => {
                eprintln!(
                    "{}: a port was taken before it bound it; starting it again",
                    m.name
                );
                let name = m.name.clone();
                drop(m);
                out.push(start(bin, work, &name, spec)?);
            }
            Err(e) => return Err(e),
        }
    }
    Ok(out)
}

/// Sockets listening on 127.0.0.1:`port` now, one per member that has the
/// port open (the count the members themselves take).
pub fn listeners_on(port: u16) -> usize {
    tickdb_net::group::listeners_on(std::net::SocketAddr::from(([127, 0, 0, 1], port))).unwrap_or(0)
}

/// The tp every listener follows, fed `rows` trade rows over ILP TCP.
pub struct Feed {
    pub tp: crate::servers::Tickdb,
    /// Trade rows the tp holds.
    pub trades: u64,
}

/// Starts a tp (`--fsync never`: kdb+ tps log without one) and feeds it
/// `rows` trade rows (`bench ingest`'s generator: 500 symbols, 10k-row
/// writes); waits until its journal holds them.
pub fn feed_trades(bin: &Path, work: &Path, rows: u64, seed: u64) -> Result<Feed> {
    use std::io::Write;
    let tp = crate::servers::start_tickdb(bin, work, "tp", "sharding-tp", &["--fsync", "never"])?;
    let mut sock = std::net::TcpStream::connect(("127.0.0.1", tp.ilp))
        .map_err(BenchError::io("ILP TCP connect to the tp"))?;
    let mut left = rows;
    let mut part = 0u64;
    while left > 0 {
        child::check_interrupt()?;
        // A million rows at a time: the generator holds its text in memory.
        let n = left.min(1_000_000);
        for b in crate::ingest::generate("trade", n as usize, seed + part) {
            sock.write_all(&b)
                .map_err(BenchError::io("ILP TCP write"))?;
        }
        left -= n;
        part += 1;
    }
    drop(sock);
    wait_tp_rows(&tp, rows, Duration::from_secs(120))?;
    Ok(Feed { tp, trades: rows })
}

/// Waits until the tp's journal holds `rows` rows.
pub fn wait_tp_rows(tp: &crate::servers::Tickdb, rows: u64, timeout: Duration) -> Result<()> {
    let t0 = Instant::now();
    loop {
        child::check_interrupt()?;
        let st = request_json(tp.http, "GET", "/status")?;
        if st["tp"]["rows"].as_u64().unwrap_or(0) >= rows {
            return Ok(());
        }
        if t0.elapsed() > timeout {
            return Err(BenchError::Server(format!(
                "the tp did not journal {rows} rows within {timeout:?}: {}",
                st["tp"]
            )));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What the run did with `net.ipv4.tcp_migrate_req`, for the report.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Sysctl {
    /// The value before the run ("0", "1"; None: no such setting).
    pub before: Option<String>,
    /// The value during the run.
    pub during: Option<String>,
    /// Whether the benchmark set it (and put it back).
    pub set_by_bench: bool,
    /// In words.
    pub note: String,
}

impl Sysctl {
    /// Busy steering works only with tcp_migrate_req on.
    pub fn steering_possible(&self) -> bool {
        self.during.as_deref() == Some("1")
    }
}

/// Sets tcp_migrate_req to 1 for the run when it is 0 and this is root;
/// the old value comes back on drop (also on an error or Ctrl-C).
pub struct MigrateReqGuard {
    pub state: Sysctl,
    restore: Option<String>,
}

impl MigrateReqGuard {
    pub fn acquire() -> MigrateReqGuard {
        let before = std::fs::read_to_string(MIGRATE_REQ)
            .ok()
            .map(|s| s.trim().to_string());
        let root = unsafe { libc::geteuid() } == 0;
        let (during, set, note) = match before.as_deref() {
            None => (
                None,
                false,
                format!("{MIGRATE_REQ} does not exist (Linux before 5.14): busy steering is measured off"),
            ),
            Some("0") if root => match std::fs::write(MIGRATE_REQ, "1") {
                Ok(()) => (
                    Some("1".to_string()),
                    true,
                    "net.ipv4.tcp_migrate_req was 0: set to 1 for this run (as root) and put back to 0 afterwards".to_string(),
                ),
                Err(e) => (
                    Some("0".to_string()),
                    false,
                    format!("net.ipv4.tcp_migrate_req is 0 and setting it failed ({e}): busy steering is measured off"),
                ),
            },
            Some("0") => (
                Some("0".to_string()),
                false,
                "net.ipv4.tcp_migrate_req is 0 and this is not root: busy steering is measured off (the members log it); run as root, or `sysctl -w net.ipv4.tcp_migrate_req=1`, to measure it".to_string(),
            ),
            Some(v) => (
                Some(v.to_string()),
                false,
                format!("net.ipv4.tcp_migrate_req was already {v}: left as it was"),
            ),
        };
        eprintln!("sharding: {note}");
        MigrateReqGuard {
            state: Sysctl {
                before: before.clone(),
                during,
                set_by_bench: set,
                note,
            },
            restore: if set { before } else { None },
        }
    }
}

impl Drop for MigrateReqGuard {
    fn drop(&mut self) {
        if let Some(v) = self.restore.take() {
            match std::fs::write(MIGRATE_REQ, &v) {
                Ok(()) => eprintln!("sharding: net.ipv4.tcp_migrate_req put back to {v}"),
                Err(e) => eprintln!(
                    "sharding: could not put net.ipv4.tcp_migrate_req back to {v}: {e} (set it by hand)"
                ),
            }
        }
    }
}

/// A directory of its own under `work` for one experiment's logs.
pub fn dir(work: &Path, name: &str) -> Result<PathBuf> {
    let d = work.join(name);
    std::fs::create_dir_all(&d).map_err(BenchError::io(format!("creating {}", d.display())))?;
    Ok(d)
}
