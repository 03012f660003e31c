//! The peer: Redis Sentinel's failover (Debian's redis-server 7, which is
//! also Sentinel: `redis-server CONF --sentinel`). Per round, fresh on free
//! loopback ports: a master, a replica (`replicaof`), and one Sentinel
//! monitoring the master with quorum 1. Once Sentinel knows the replica
//! and a key written to the master is on the replica (`WAIT 1`), the
//! master is killed with SIGKILL. Timed from the kill, as tickdb's probe
//! is: until a client trying both addresses can `SET` on the new master
//! (the replica answers -READONLY until Sentinel promotes it), and until
//! Sentinel names the new master (`SENTINEL get-master-addr-by-name`). The
//! key written before the kill and the one written after must read back on
//! the new master.

use super::Progress;
use crate::child::{self, free_port, Child};
use crate::error::{BenchError, Result};
use crate::redis::{Conn, Reply};
use serde::Serialize;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

const MASTER_NAME: &str = "fomaster";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// A request to a server that may be dead or busy gives up after this.
const REQUEST_TIMEOUT: Duration = Duration::from_millis(500);
/// Between attempts while waiting for the new master.
const POLL: Duration = Duration::from_millis(1);

/// How Sentinel is configured.
#[derive(Debug, Clone, Serialize)]
pub struct SentinelForm {
    pub label: &'static str,
    /// `sentinel down-after-milliseconds` (None: Sentinel's default, 30000).
    pub down_after_ms: Option<u64>,
    /// `sentinel failover-timeout` (None: the default, 180000).
    pub failover_timeout_ms: Option<u64>,
    pub rounds: usize,
}

impl SentinelForm {
    pub const DEFAULT_DOWN_AFTER_MS: u64 = 30_000;
    pub const DEFAULT_FAILOVER_TIMEOUT_MS: u64 = 180_000;

    pub fn down_after(&self) -> u64 {
        self.down_after_ms.unwrap_or(Self::DEFAULT_DOWN_AFTER_MS)
    }

    pub fn failover_timeout(&self) -> u64 {
        self.failover_timeout_ms
            .unwrap_or(Self::DEFAULT_FAILOVER_TIMEOUT_MS)
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct SentinelRound {
    /// The kill until a SET on the new master was acknowledged, s.
    pub set_s: f64,
    /// The kill until Sentinel named the new master, s.
    pub named_s: f64,
}

#[derive(Debug, Clone, Serialize)]
pub struct SentinelResult {
    pub form: SentinelForm,
    pub rounds: Vec<SentinelRound>,
}

/// A redis-server (or Sentinel) child on a free port.
struct Server {
    child: Child,
    port: u16,
}

fn start(dir: &Path, name: &str, conf: &str, sentinel: bool) -> Result<Server> {
    let port = free_port()?;
    let path = dir.join(format!("{name}.conf"));
    let text = format!(
        "bind 127.0.0.1\nport {port}\nprotected-mode yes\ndaemonize no\ndir {}\nlogfile \"\"\n{conf}",
        dir.display()
    );
    std::fs::write(&path, text).map_err(BenchError::io(format!("writing {}", path.display())))?;
    let mut cmd = Command::new("redis-server");
    cmd.arg(&path);
    if sentinel {
        cmd.arg("--sentinel");
    }
    let log = dir.join(format!("{name}.log"));
    let mut child = Child::spawn(&format!("redis-server ({name})"), &mut cmd, &log)?;
    let t0 = Instant::now();
    loop {
        child::check_interrupt()?;
        child.check_alive()?;
        if Conn::connect_timeout(port, REQUEST_TIMEOUT)
            .and_then(|mut c| c.command(&[b"PING"]))
            .is_ok_and(|r| r == Reply::Simple("PONG".into()))
        {
            return Ok(Server { child, port });
        }
        if t0.elapsed() > READY_TIMEOUT {
            return Err(BenchError::Server(format!(
                "{name} not answering PING after {READY_TIMEOUT:?}:\n{}",
                child::log_tail(&log)
            )));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn command(port: u16, args: &[&[u8]]) -> Result<Reply> {
    Conn::connect_timeout(port, REQUEST_TIMEOUT)?.command(args)
}

/// Waits until `ok` holds, or fails with `what`.
fn wait(what: &str, mut ok: impl FnMut() -> bool) -> Result<()> {
    let t0 = Instant::now();
    while !ok() {
        child::check_interrupt()?;
        if t0.elapsed() > READY_TIMEOUT {
            return Err(BenchError::Server(format!(
                "Redis Sentinel: {what} within {READY_TIMEOUT:?}"
            )));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    Ok(())
}

/// Whether Sentinel lists `port` as a healthy replica of the master.
fn sentinel_knows_replica(sentinel: u16, port: u16) -> bool {
    let Ok(Reply::Array(Some(replicas))) = command(
        sentinel,
        &[b"SENTINEL", b"REPLICAS", MASTER_NAME.as_bytes()],
    ) else {
        return false;
    };
    replicas.iter().any(|r| {
        let Reply::Array(Some(kv)) = r else {
            return false;
        };
        let field = |name: &str| {
            kv.chunks(2)
                .find(|p| p[0].text().as_deref() == Some(name))
                .and_then(|p| p.get(1).and_then(Reply::text))
        };
        field("port").as_deref() == Some(port.to_string().as_str())
            && field("flags").as_deref() == Some("slave")
            && field("master-link-status").as_deref() == Some("ok")
    })
}

/// The port Sentinel names as the master's, asked on `conn` (reconnected
/// when it broke).
fn named_master(sentinel: u16, conn: &mut Option<Conn>) -> Option<u16> {
    let mut c = match conn.take() {
        Some(c) => c,
        None => Conn::connect_timeout(sentinel, REQUEST_TIMEOUT).ok()?,
    };
    let r = c.command(&[
        b"SENTINEL",
        b"GET-MASTER-ADDR-BY-NAME",
        MASTER_NAME.as_bytes(),
    ]);
    let port = match &r {
        Ok(Reply::Array(Some(a))) => a.get(1).and_then(Reply::text)?.parse().ok(),
        _ => None,
    };
    if r.is_ok() {
        *conn = Some(c);
    }
    port
}

fn round(work: &Path, form: &SentinelForm, n: usize) -> Result<SentinelRound> {
    let dir = work.join(format!("fo-sentinel-{}-{n}", form.label));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).map_err(BenchError::io(format!("creating {}", dir.display())))?;
    // In memory, as a cache would run: persistence plays no part in a
    // failover. The replica's first sync starts at once (the master would
    // otherwise wait 5 s for more replicas to join a diskless transfer).
    let data = "save \"\"\nappendonly no\nrepl-diskless-sync-delay 0\n";
    let mut master = start(&dir, "master", data, false)?;
    let replica = start(
        &dir,
        "replica",
        &format!("{data}replicaof 127.0.0.1 {}\n", master.port),
        false,
    )?;
    let mut conf = format!(
        "sentinel monitor {MASTER_NAME} 127.0.0.1 {} 1\n",
        master.port
    );
    if let Some(ms) = form.down_after_ms {
        conf.push_str(&format!(
            "sentinel down-after-milliseconds {MASTER_NAME} {ms}\n"
        ));
    }
    if let Some(ms) = form.failover_timeout_ms {
        conf.push_str(&format!("sentinel failover-timeout {MASTER_NAME} {ms}\n"));
    }
    let key_before = format!("fo:{n}:before");
    let key_after = format!("fo:{n}:after");
    wait("the replica did not sync with the master", || {
        matches!(
            command(replica.port, &[b"INFO", b"replication"]),
            Ok(Reply::Bulk(Some(b))) if String::from_utf8_lossy(&b).contains("master_link_status:up")
        )
    })?;
    let mut m = Conn::connect_timeout(master.port, Duration::from_secs(5))?;
    if m.command(&[b"SET", key_before.as_bytes(), b"1"])? != Reply::Simple("OK".into()) {
        return Err(BenchError::Server("Redis: SET on the master failed".into()));
    }
    if m.command(&[b"WAIT", b"1", b"5000"])? != Reply::Int(1) {
        return Err(BenchError::Server(
            "Redis: the replica did not acknowledge the key (WAIT 1)".into(),
        ));
    }
    // Started once the replica is in sync, so that its first look at the
    // master (INFO) lists the replica.
    let sentinel = start(&dir, "sentinel", &conf, true)?;
    wait("Sentinel did not list the replica as healthy", || {
        sentinel_knows_replica(sentinel.port, replica.port)
    })?;
    let limit = Duration::from_millis(form.down_after() + form.failover_timeout())
        + Duration::from_secs(60);
    let t0 = Instant::now();
    master.child.kill();
    let (mut set_s, mut named_s) = (None, None);
    let (mut conn, mut sconn): (Option<Conn>, Option<Conn>) = (None, None);
    while set_s.is_none() || named_s.is_none() {
        child::check_interrupt()?;
        if named_s.is_none() && named_master(sentinel.port, &mut sconn) == Some(replica.port) {
            named_s = Some(t0.elapsed().as_secs_f64());
        }
        if set_s.is_none() {
            let c = match conn.take() {
                Some(c) => Ok(c),
                None => Conn::connect_timeout(replica.port, REQUEST_TIMEOUT),
            };
            if let Ok(mut c) = c {
                if let Ok(r) = c.command(&[b"SET", key_after.as_bytes(), b"2"]) {
                    if r == Reply::Simple("OK".into()) {
                        set_s = Some(t0.elapsed().as_secs_f64());
                    }
                    conn = Some(c);
                }
            }
        }
        if t0.elapsed() > limit {
            return Err(BenchError::Server(format!(
                "Redis Sentinel ({}): no new master within {limit:?} of the kill",
                form.label
            )));
        }
        std::thread::sleep(POLL);
    }
    // Both keys read back on the new master.
    for (k, v) in [(&key_before, "1"), (&key_after, "2")] {
        let got = command(replica.port, &[b"GET", k.as_bytes()])?;
        if got.text().as_deref() != Some(v) {
            return Err(BenchError::Server(format!(
                "Redis Sentinel ({}): {k} reads {got:?} on the new master, not {v}",
                form.label
            )));
        }
    }
    drop(sentinel);
    drop(replica);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(SentinelRound {
        set_s: set_s.unwrap_or(0.0),
        named_s: named_s.unwrap_or(0.0),
    })
}

pub fn run(work: &Path, form: &SentinelForm, ui: &Progress) -> Result<SentinelResult> {
    let mut rounds = Vec::new();
    for n in 1..=form.rounds {
        ui.steps.set_message(format!(
            "Redis Sentinel ({}, down-after-milliseconds {}): round {n}/{}",
            form.label,
            form.down_after(),
            form.rounds
        ));
        rounds.push(round(work, form, n)?);
        ui.steps.inc(1);
    }
    Ok(SentinelResult {
        form: form.clone(),
        rounds,
    })
}
