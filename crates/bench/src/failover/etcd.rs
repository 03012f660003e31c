//! etcd for the failover benchmark: one member (Debian's etcd-server) as a
//! child process on free loopback ports, with a data directory of its own
//! and the fault tests' Raft timing (`--heartbeat-interval 50
//! --election-timeout 500`: a tickdb lease of 2 s is several election
//! timeouts long). Killed with the run.

use crate::child::{self, free_port, Child};
use crate::error::{BenchError, Result};
use crate::http::HttpConn;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// Where Debian's etcd-server puts it; `etcd` on the PATH is tried first.
const DEBIAN_ETCD: &str = "/usr/bin/etcd";
const READY_TIMEOUT: Duration = Duration::from_secs(60);
/// Starts whose ports were taken before etcd bound them.
const PORT_RACE_TRIES: usize = 3;
pub const HEARTBEAT_MS: u64 = 50;
pub const ELECTION_MS: u64 = 500;

fn program() -> String {
    if Command::new("etcd").arg("--version").output().is_ok() {
        "etcd".into()
    } else {
        DEBIAN_ETCD.into()
    }
}

/// Why etcd cannot run here, if it cannot.
pub fn unavailable() -> Option<String> {
    match Command::new(program()).arg("--version").output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!("etcd --version failed ({})", o.status)),
        Err(e) => Some(format!(
            "no etcd ({e}); install Debian's etcd-server (apt-get install etcd-server)"
        )),
    }
}

/// `etcd --version`'s version, e.g. "3.4.23".
pub fn version() -> String {
    Command::new(program())
        .arg("--version")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| {
            s.lines().find_map(|l| {
                l.strip_prefix("etcd Version:")
                    .map(|v| v.trim().to_string())
            })
        })
        .unwrap_or_else(|| "unknown".into())
}

pub struct Etcd {
    child: Child,
    data: std::path::PathBuf,
    /// Its client URL, for `--etcd`.
    pub url: String,
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.child.kill();
        let _ = std::fs::remove_dir_all(&self.data);
    }
}

impl Etcd {
    pub fn start(work: &Path) -> Result<Etcd> {
        let mut tries = 0;
        loop {
            tries += 1;
            let log = work.join("fo-etcd.log");
            match Etcd::start_once(work, &log) {
                Err(BenchError::Server(_))
                    if tries < PORT_RACE_TRIES
                        && std::fs::read_to_string(&log)
                            .is_ok_and(|l| l.contains("address already in use")) => {}
                r => return r,
            }
        }
    }

    fn start_once(work: &Path, log: &Path) -> Result<Etcd> {
        let data = work.join("fo-etcd-data");
        let _ = std::fs::remove_dir_all(&data);
        let (client, peer) = (free_port()?, free_port()?);
        let url = format!("http://127.0.0.1:{client}");
        let peer_url = format!("http://127.0.0.1:{peer}");
        let mut cmd = Command::new(program());
        cmd.args(["--name", "fo", "--data-dir"])
            .arg(&data)
            .args([
                "--listen-client-urls",
                &url,
                "--advertise-client-urls",
                &url,
            ])
            .args(["--listen-peer-urls", &peer_url])
            .args(["--initial-advertise-peer-urls", &peer_url])
            .args(["--initial-cluster", &format!("fo={peer_url}")])
            .args(["--initial-cluster-state", "new"])
            .args(["--heartbeat-interval", &HEARTBEAT_MS.to_string()])
            .args(["--election-timeout", &ELECTION_MS.to_string()]);
        let mut child = Child::spawn("etcd", &mut cmd, log)?;
        let t0 = Instant::now();
        loop {
            child::check_interrupt()?;
            child.check_alive()?;
            let healthy = HttpConn::connect(client)
                .and_then(|mut c| c.request("GET", "/health", b""))
                .is_ok_and(|(st, body)| {
                    st == 200 && String::from_utf8_lossy(&body).contains("\"true\"")
                });
            if healthy {
                return Ok(Etcd { child, data, url });
            }
            if t0.elapsed() > READY_TIMEOUT {
                return Err(BenchError::Server(format!(
                    "etcd not healthy after {READY_TIMEOUT:?}:\n{}",
                    child::log_tail(log)
                )));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}
